"""labkit.bench.buffer: one short real run (2 agent processes, 1 s windows) on an embedded Redis,
checked for shape and delivery invariants. No timing thresholds: rates only have to be positive.
"""

from __future__ import annotations

import argparse
import json
import shutil

import pytest

from labkit.bench.buffer import IMPLS, add_arguments, measure_buffers, parse_benchmark_csv

ROW_KEYS = {"impl", "push_per_s", "pull_per_s", "e2e_per_s", "redis_benchmark_rpush_per_s",
            "lost", "duplicates", "malformed", "pushed", "server_cpu_push", "server_cpu_e2e",
            "skipped"}
TOP_KEYS = {"benchmark", "agents", "payload", "seconds", "batch", "results", "redis_version",
            "redis_benchmark_rpush_per_s", "list_vs_guide_e2e", "list_vs_redis_benchmark"}


@pytest.fixture(scope="module")
def report() -> dict:
    return measure_buffers(IMPLS, agents=2, payload=1024, seconds=1.0, batch=50)


def rows(report: dict) -> dict[str, dict]:
    return {r["impl"]: r for r in report["results"]}


def test_shape_and_json(report: dict) -> None:
    assert TOP_KEYS <= set(report)
    assert report["benchmark"] == "buffer" and report["agents"] == 2
    assert [r["impl"] for r in report["results"]] == list(IMPLS)
    for row in report["results"]:
        assert set(row) == ROW_KEYS
    assert json.loads(json.dumps(report)) == report
    assert report["redis_version"]


@pytest.mark.parametrize("impl", ["guide", "list", "stream", "nats"])
def test_rates_and_delivery(report: dict, impl: str) -> None:
    row = rows(report)[impl]
    if row["skipped"]:
        assert impl == "nats", row["skipped"]  # the NATS buffer may not exist yet
        pytest.skip(f"nats: {row['skipped']}")
    assert row["pushed"] > 0
    for key in ("push_per_s", "pull_per_s", "e2e_per_s"):
        assert row[key] > 0, key
    assert row["lost"] == 0
    assert row["malformed"] == 0
    if impl == "guide":
        assert row["duplicates"] is None  # raw bytes carry no ids
    else:
        assert row["duplicates"] == 0
    assert row["server_cpu_push"] is None or row["server_cpu_push"] >= 0


def test_ratios(report: dict) -> None:
    by = rows(report)
    assert report["list_vs_guide_e2e"] == pytest.approx(
        by["list"]["e2e_per_s"] / by["guide"]["e2e_per_s"], rel=1e-2)


def test_redis_benchmark_ceiling(report: dict) -> None:
    if shutil.which("redis-benchmark") is None:
        assert report["redis_benchmark_rpush_per_s"] is None
        assert report["list_vs_redis_benchmark"] is None
        pytest.skip("redis-benchmark not on PATH (apt-get install redis-tools)")
    assert report["redis_benchmark_rpush_per_s"] > 0
    assert rows(report)["list"]["redis_benchmark_rpush_per_s"] > 0
    assert report["list_vs_redis_benchmark"] > 0


def test_parse_benchmark_csv() -> None:
    new = ('"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms",'
           '"p99_latency_ms","max_latency_ms"\n"RPUSH","123456.79","0.1","0.0","0.1","0.2",'
           '"0.3","1.0"\n')
    assert parse_benchmark_csv(new, "RPUSH") == pytest.approx(123456.79)
    assert parse_benchmark_csv('"RPUSH","9876.5"\n', "rpush") == pytest.approx(9876.5)
    assert parse_benchmark_csv("", "RPUSH") is None


def test_cli_arguments() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--impl", "guide,list", "--agents", "4", "--payload", "1024",
                              "--seconds", "2", "--sweep", "1,2", "--json"])
    assert (args.impl, args.agents, args.payload, args.seconds, args.sweep, args.json) == (
        "guide,list", 4, 1024, 2.0, "1,2", True)
    assert parser.parse_args([]).batch == 100
