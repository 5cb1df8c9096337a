"""labkit.buffers.bench: one short real run (2 agent processes, 1 s windows) on an embedded Redis,
and one with chunks, checked for shape and delivery invariants (marked slow: real agent
processes). No timing thresholds: rates only have to be positive.
"""

from __future__ import annotations

import argparse
import json
import shutil

import pytest

from labkit.buffers.bench import (
    IMPLS,
    add_arguments,
    measure_buffers,
    measure_specs,
    parse_benchmark_csv,
)
from labkit.buffers.bench_report import (
    BUSY,
    bottleneck,
    explained_table,
    headline_ratios,
    notes,
    sweep_summary,
)
from labkit.buffers.bench_tracking import Spans
from labkit.errors import ParameterError

ROW_KEYS = {"impl", "push_per_s", "pull_per_s", "e2e_per_s", "redis_benchmark_rpush_per_s",
            "lost", "duplicates", "malformed", "pushed", "server_cpu_push", "server_cpu_e2e",
            "lead_s", "late_start_s", "end_spread_s", "push_overlap", "e2e_overlap", "skipped",
            "chunk", "parser", "server_cpu_pull", "agents_cpu_push", "agents_cpu_e2e",
            "learner_cpu_pull", "learner_cpu_e2e", "push_mb_per_s", "pull_mb_per_s",
            "e2e_mb_per_s", "rounds", "e2e_rounds"}
TOP_KEYS = {"benchmark", "agents", "payload", "seconds", "batch", "results", "redis_version",
            "redis_benchmark_rpush_per_s", "list_vs_guide_e2e", "list_vs_redis_benchmark",
            "item_bytes", "chunk", "chunks_per_push", "redis_benchmark_mb_per_s",
            "list_push_bytes_vs_redis_benchmark"}


@pytest.fixture(scope="module")
def report() -> dict:
    return measure_buffers(IMPLS, agents=2, payload=1024, seconds=1.0, batch=50)


def rows(report: dict) -> dict[str, dict]:
    return {r["impl"]: r for r in report["results"]}


@pytest.mark.slow
def test_shape_and_json(report: dict) -> None:
    assert TOP_KEYS <= set(report)
    assert report["benchmark"] == "buffer" and report["agents"] == 2
    assert [r["impl"] for r in report["results"]] == list(IMPLS)
    for row in report["results"]:
        assert set(row) == ROW_KEYS
    assert json.loads(json.dumps(report)) == report
    assert report["redis_version"]


@pytest.mark.slow
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
    assert row["lead_s"] > 0 and row["late_start_s"] >= 0 and row["end_spread_s"] >= 0
    assert 0 < row["push_overlap"] <= 1 and 0 < row["e2e_overlap"] <= 1


@pytest.mark.slow
def test_ratios(report: dict) -> None:
    by = rows(report)
    assert report["list_vs_guide_e2e"] == pytest.approx(
        by["list"]["e2e_per_s"] / by["guide"]["e2e_per_s"], rel=1e-2)
    for row in report["results"]:
        if row["push_per_s"] is not None:
            assert row["push_mb_per_s"] == pytest.approx(
                row["push_per_s"] * report["item_bytes"] / 1e6, rel=1e-2)
    assert report["item_bytes"] == 1024 and report["chunk"] is None


@pytest.fixture(scope="module")
def chunked() -> dict:
    """Chunks through the list buffer (pulled as chunks, redis-py's own parser) and the stream
    buffer (pulled per experience), on the same two agents, in two rounds taking turns."""
    return measure_specs([("list", 8, "python"), ("stream", 4, None)], agents=2, payload=256,
                         seconds=0.4, batch=20, chunks_per_push=2, redis_benchmark=False,
                         rounds=2)


@pytest.mark.slow
def test_chunks_are_delivered_once_and_intact(chunked: dict) -> None:
    by = {r["impl"]: r for r in chunked["results"]}
    assert (by["list"]["chunk"], by["stream"]["chunk"]) == (8, 4)
    assert by["list"]["parser"] == "python" and by["stream"]["parser"] == "hiredis"
    for row in chunked["results"]:
        assert set(row) == ROW_KEYS
        assert row["pushed"] > 0 and row["lost"] == 0 and row["malformed"] == 0, row
        assert row["push_per_s"] > 0 and row["pull_per_s"] > 0
        assert row["agents_cpu_push"] >= 0 and row["learner_cpu_pull"] >= 0
    assert by["list"]["duplicates"] == 0 and by["stream"]["duplicates"] == 0
    assert by["list"]["pushed"] % 8 == 0  # whole chunks
    for row in chunked["results"]:  # two rounds: medians, every round's rate kept, counts summed
        assert chunked["rounds"] == row["rounds"] == 2 and len(row["e2e_rounds"]) == 2
        measured = sorted(v for v in row["e2e_rounds"] if v is not None)
        if len(measured) == 2:
            assert row["e2e_per_s"] == pytest.approx(sum(measured) / 2, rel=1e-3)


def test_rounds_combine_into_medians_sums_and_the_worst_start() -> None:
    from labkit.buffers.bench_core import ImplResult, combine_rounds

    rows = [ImplResult("list", chunk=64, push_per_s=p, e2e_per_s=e, lost=0, duplicates=d,
                       pushed=n, late_start_s=late, learner_cpu_e2e=c)
            for p, e, d, n, late, c in ((10.0, 5.0, 0, 100, 0.1, 0.2), (30.0, None, 1, 200, 0.4, 0.6),
                                        (20.0, 7.0, 0, 300, 0.2, 0.4))]
    one = combine_rounds(rows)
    assert (one.rounds, one.e2e_rounds) == (3, [5.0, None, 7.0])
    assert (one.push_per_s, one.e2e_per_s, one.learner_cpu_e2e) == (20.0, 6.0, 0.4)
    assert (one.lost, one.duplicates, one.pushed, one.late_start_s) == (0, 1, 600, 0.4)
    assert combine_rounds(rows[:1]) is rows[0]
    with pytest.raises(ParameterError, match="rounds"):
        measure_specs([("list", 8, None)], rounds=0)



def test_headline_ratios_pick_the_list_row_of_the_chunk() -> None:
    report = {"redis_benchmark_rpush_per_s": 1000.0, "redis_benchmark_mb_per_s": 1.0,
              "results": [{"impl": "guide", "chunk": None, "e2e_per_s": 10.0},
                          {"impl": "list", "chunk": None, "e2e_per_s": 30.0, "push_per_s": 200.0,
                           "push_mb_per_s": 0.2},
                          {"impl": "list", "chunk": 64, "e2e_per_s": 600.0, "push_per_s": 800.0,
                           "push_mb_per_s": 0.8}]}
    assert headline_ratios(report, 64) == {"list_vs_guide_e2e": 60.0,
                                           "list_vs_redis_benchmark": 0.8,
                                           "list_push_bytes_vs_redis_benchmark": 0.8}
    assert headline_ratios(report, None)["list_vs_guide_e2e"] == 3.0
    assert headline_ratios({**report, "redis_benchmark_mb_per_s": None}, 8) == dict.fromkeys(
        ("list_vs_guide_e2e", "list_vs_redis_benchmark", "list_push_bytes_vs_redis_benchmark"))


def test_client_options_pick_the_parser() -> None:
    from redis._parsers import _HiredisParser, _RESP2Parser

    from labkit.buffers.base import READ_SIZE, client_options
    from labkit.errors import LabkitError

    assert client_options("") == {"socket_read_size": READ_SIZE}
    assert all(client_options(mode)["socket_read_size"] == READ_SIZE
               for mode in ("python", "hiredis", "hiredis-reader"))
    assert client_options("python")["parser_class"] is _RESP2Parser
    assert client_options("hiredis")["parser_class"] is _HiredisParser
    reader = client_options("hiredis-reader")
    assert reader["parser_class"] is _HiredisParser
    assert type(reader["command_packer"]).__name__ == "PythonRespSerializer"
    with pytest.raises(LabkitError, match="choose"):
        client_options("fast")


@pytest.mark.slow
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
    args = parser.parse_args(["--chunk", "64", "--chunk-sweep", "1,8,64", "--parser", "python"])
    assert (args.chunk, args.chunk_sweep, args.parser, args.chunks_per_push) == (
        64, "1,8,64", "python", 8)
    assert parser.parse_args([]).chunk is None
    assert (parser.parse_args([]).rounds, parser.parse_args(["--rounds", "3"]).rounds) == (1, 3)


def test_rates_come_from_each_agents_own_span_and_the_stretch_they_shared() -> None:
    # agent 1 woke 0.5 s late: its own rate is 100/0.5 s, not 100/1.0 s
    spans = Spans(pushed=[100, 100], first=[10.0, 10.5], last=[11.0, 11.0])
    assert spans.own_rate() == pytest.approx(100 / 1.0 + 100 / 0.5)
    assert spans.together() == (10.5, 11.0) and spans.together(until=10.8) == (10.5, 10.8)
    assert spans.overlap() == pytest.approx(0.5)
    missed = Spans(pushed=[100, 0], first=[10.0, 11.2], last=[11.0, 11.2])  # woke after the end
    assert missed.own_rate() == pytest.approx(100.0)
    assert missed.together() is None and missed.overlap() == 0.0
    assert Spans(pushed=[0], first=[12.0], last=[12.0]).own_rate() is None


def test_a_window_that_measured_nothing_is_explained_not_a_crash() -> None:
    row = {"agents": 32, "impl": "list", "push_per_s": None, "pull_per_s": None,
           "e2e_per_s": None, "lost": 0, "duplicates": 0, "malformed": 0, "pushed": 0,
           "server_cpu_push": 0.01, "server_cpu_e2e": None, "lead_s": 0.4,
           "late_start_s": 1.3, "end_spread_s": 0.0, "push_overlap": 0.0, "e2e_overlap": 0.0,
           "skipped": None}
    said = " ".join(notes(row, 1.0))
    assert "no agent pushed" in said and "1.3 s after" in said and "no end-to-end rate" in said
    shown = explained_table([row], 1.0)
    text = str(shown)
    assert "n/a" in text and "no agent pushed" in text
    assert "n/a" in shown._repr_html_() and "no agent pushed" in shown._repr_html_()
    assert "no agent count gave a push rate" in sweep_summary([row], "list")
    shared = {**row, "push_per_s": 900.0, "pull_per_s": 800.0, "e2e_per_s": 700.0,
              "push_overlap": 0.5, "e2e_overlap": 0.4, "late_start_s": 0.5,
              "end_spread_s": 0.02}
    said = " ".join(notes(shared, 1.0))
    assert "together for 50%" in said and "over the 0.40 s" in said
    assert "0.5 s after" in said and "ended 0.02 s apart" in said
    assert notes({**shared, "push_overlap": 1.0, "e2e_overlap": 1.0}, 1.0) == []
    assert "peaked at 900/s with 32" in sweep_summary([shared], "list")


def sweep_rows(impl: str, rates: list[float], cpus: list[float | None]) -> list[dict]:
    """A made-up sweep over 1, 2, 4... agents: the push rate and the server's CPU at each."""
    return [{"agents": 2 ** i, "impl": impl, "push_per_s": rate, "server_cpu_push": cpu}
            for i, (rate, cpu) in enumerate(zip(rates, cpus, strict=True))]


def test_the_bottleneck_verdict_comes_from_the_sweeps_numbers() -> None:
    # the rate stops growing at 4 agents with the server at a third of a core: the clients
    clients = bottleneck(sweep_rows("guide", [100, 190, 400, 410, 405], [0.1, 0.2, 0.3, 0.35, 0.3]),
                         "guide", cores=2)
    assert clients.first == "clients" and clients.knee_agents == 4 and clients.busy_from is None
    said = clients.describe()
    assert "never used more than 0.35 of a core up to 16 agents" in said
    assert "clients saturated first" in said and "2 cores" in said
    # the server reaches a core as the rate stops growing, and stays there: the server
    server = bottleneck(sweep_rows("list", [1e4, 2e4, 3.9e4, 4e4], [0.3, 0.6, BUSY, 1.0]), "list")
    assert server.first == "server" and server.busy_from == 4 and server.busy_after
    assert f">= {BUSY:g} of a core from 4 agents on" in server.describe()
    # a busy moment while the rate kept growing is no saturation, and is said not to last
    growing = bottleneck(sweep_rows("list", [100, 200, 400], [0.1, 0.95, 0.5]), "list")
    assert growing.first == "neither" and growing.busy_from == 2 and not growing.busy_after
    assert "first at 2 agents (not at every larger count)" in growing.describe()
    assert "still growing at 4 agents" in growing.describe()
    # what the sweep cannot tell, it does not claim
    assert bottleneck(sweep_rows("list", [100, 200], [None, None]), "list").first == "unknown"
    assert bottleneck(sweep_rows("list", [100], [0.1]), "list").first == "one point"
    assert bottleneck(sweep_rows("list", [100], [0.1]), "guide") is None


def test_parser_rates_measure_every_mode_on_both_frame_kinds() -> None:
    from labkit.buffers.bench_sweep import codec_rates, parser_rates

    rows = parser_rates(payload=64, chunk=4, items=16, seconds=0.01)
    assert {(r["mode"], r["frames"]) for r in rows} == {
        (m, f) for m in ("hiredis", "hiredis-reader", "python") for f in ("per item", "chunk 4")}
    assert all(r["push_per_cpu_s"] > 0 and r["pop_per_cpu_s"] > 0 for r in rows)
    codec = codec_rates(payload=64, chunk=4, seconds=0.01)
    assert all(v > 0 for v in codec.values())


def test_chunk_findings_state_the_targets_and_every_round() -> None:
    from labkit.buffers.bench_report import chunk_findings

    guide = {"impl": "guide", "chunk": None, "e2e_per_s": 2000.0, "push_mb_per_s": 2.0,
             "push_per_s": 2000.0, "e2e_rounds": [1500.0, 2000.0, 9000.0]}
    listed = {"impl": "list", "chunk": 64, "e2e_per_s": 150000.0, "push_mb_per_s": 300.0,
              "push_per_s": 3e5, "e2e_rounds": [140000.0, 150000.0, None],
              "server_cpu_e2e": 0.3, "agents_cpu_e2e": 1.2, "learner_cpu_e2e": 0.4}
    report = {"results": [guide, listed], "rounds": 3, "agents": 4, "cpu_count": 2,
              "redis_benchmark_rpush_per_s": 4e5, "redis_benchmark_mb_per_s": 400.0}
    lines = chunk_findings(report, 64)
    assert lines[0].startswith("end to end, chunks of 64: 150000/s against the guide's 2000/s, "
                               "75.0x: meets the 50x target")
    assert "75% of redis-benchmark's" in lines[1] and "meets the 50% target" in lines[1]
    assert lines[-1] == ("medians of 3 rounds, taken in turns; end to end in each round: guide "
                         "1500, 2000, 9000/s, list 140000, 150000, n/a/s")
    assert chunk_findings({**report, "results": [guide]}, 64)[0].startswith("no list row")
