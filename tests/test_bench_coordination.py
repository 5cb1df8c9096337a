"""labkit.orchestration.coordination: one real two-rank launch over all five transports, small samples.

No wall-clock thresholds: only that every transport ran, every reply matched its ping, the
percentiles are ordered and positive, and nothing the run started is left running.
"""

from __future__ import annotations

import argparse

import pytest
from process_helpers import live_children

from labkit.errors import ParameterError
from labkit.orchestration.coordination import (
    GUIDE_FIGURES,
    TRANSPORTS,
    add_arguments,
    measure_coordination,
    parse_transports,
    summarize,
)
from labkit.runtime.stats import percentile

SAMPLES = 100


@pytest.fixture(scope="module")
def report() -> dict:
    before = live_children()
    found = measure_coordination(samples=SAMPLES, warmup=10)
    assert live_children() <= before, "the run left a server or rank process behind"
    return found


@pytest.mark.slow
def test_all_transports_measured_and_ok(report: dict) -> None:
    rows = {r["transport"]: r for r in report["rows"]}
    assert list(rows) == list(TRANSPORTS)
    for row in rows.values():
        assert row["ok"], row
        assert row["samples"] == SAMPLES
        assert 0 < row["p50_us"] <= row["p90_us"] <= row["p99_us"] <= row["max_us"]
        assert row["mean_us"] > 0


@pytest.mark.slow
def test_report_carries_versions_and_guide_figures_as_theirs(report: dict) -> None:
    assert report["server"]["redis-server"] and report["server"]["nats-server"]
    assert report["guide"] is GUIDE_FIGURES
    assert GUIDE_FIGURES["before_us"] == 12_000 and GUIDE_FIGURES["after_us"] == 400
    assert "guide" in GUIDE_FIGURES["source"]
    assert report["samples"] == SAMPLES and report["warmup"] == 10


def test_percentiles_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert (percentile(values, 50), percentile(values, 99), percentile(values, 100)) == (
        50.0, 99.0, 100.0)
    # ceil(p / 100 * n), 1-based, on values in any order; p90 of 10 values is the 9th
    assert percentile([10, 1, 9, 2, 8, 3, 7, 4, 6, 5], 90) == 9
    assert percentile([4], 1) == percentile([4], 100) == 4
    for bad in ([], 50), ([1.0], 0), ([1.0], 101):
        with pytest.raises(ParameterError):
            percentile(*bad)
    row = summarize("x", [1000, 2000, 3000], True)
    assert (row.p50_us, row.max_us, row.mean_us, row.samples) == (2.0, 3.0, 2.0, 3)


@pytest.mark.parametrize("kwargs", [{"samples": 0}, {"samples": 10, "warmup": -1},
                                    {"samples": 10, "transports": "tcpstore,carrier_pigeon"},
                                    {"samples": 10, "transports": ""},
                                    {"samples": 10, "transports": "barrier,barrier"}])
def test_bad_parameters_rejected(kwargs: dict) -> None:
    with pytest.raises(ParameterError):
        measure_coordination(**kwargs)


def test_unknown_transport_lists_valid_ones() -> None:
    with pytest.raises(ParameterError) as err:
        parse_transports("tcpstore,zeromq")
    assert "zeromq" in str(err.value)
    assert all(name in str(err.value) for name in TRANSPORTS)
    assert parse_transports(" nats_request , barrier ") == ["nats_request", "barrier"]


def test_cli_arguments() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--samples", "500", "--warmup", "5", "--transports",
                              "tcpstore,barrier", "--json"])
    assert (args.samples, args.warmup, args.transports, args.json, args.smoke) == (
        500, 5, "tcpstore,barrier", True, False)
    defaults = parser.parse_args([])
    assert (defaults.samples, defaults.warmup, defaults.json) == (2000, 50, False)
    assert defaults.transports == ",".join(TRANSPORTS)
    assert parser.parse_args(["--smoke"]).smoke
