"""labkit.collectives.bench: nccl-tests formulas by hand, the alpha-beta fit, and real torchrun
runs on gloo (all ops on 2 ranks, two cycles, per-iteration times; 2 nodes with a corrupting
rank; start-up time); nccl-tests' JSON written from that run, read back, checked against the
structure of nccl-tests' writer and against a real nccl-tests file (tests/data/nccl_tests_json).

Each launch costs ~8-12 s here, so the runs are module fixtures and each checks many things.
No timing thresholds are asserted: this machine's numbers are noise-prone.

With ``LABKIT_NCCL_TESTS_DIR`` pointing at a checkout of NVIDIA/nccl-tests, its own
``tools/analyze_perf_json.py`` reads labkit's files too (it is not part of this repository).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import re
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from labkit.collectives import (
    LABKIT_NULLS,
    ONE_FORM,
    OPS,
    REDUCING,
    CollectiveRow,
    CollectivesReport,
    bandwidths,
    bus_factor,
    compare_rows,
    format_table,
    iter_stats,
    link_verdicts,
    message_counts,
    parse_size,
    read_nccl_tests_json,
    resolve_ops,
    run_nccl_tests,
    schema_problems,
    sweep,
    to_csv,
    write_nccl_tests_json,
)
from labkit.collectives import bench as cb
from labkit.collectives.alphabeta import AlphaBeta, fit_alpha_beta
from labkit.collectives.nccl_json import WRITER
from labkit.collectives.report import avg_busbw
from labkit.errors import LaunchError, ParameterError

JSON_KEYS = {"size", "count", "type", "time_us", "algbw", "busbw", "wrong"}


def row(op: str = "all_reduce", size: int = 1024, time_us: float = 10.0, in_place: bool = True,
        wrong: int = 0, n: int = 2) -> CollectiveRow:
    algbw, busbw = bandwidths(op, size, time_us, n)
    return CollectiveRow(op, size, size // 4, "float", "sum", -1, time_us, algbw, busbw, wrong,
                         in_place, n)


# --- formulas ------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "allreduce", "per_rank"), [
    (2, 1.0, 0.5), (4, 1.5, 0.75), (8, 1.75, 0.875),
])
def test_bus_factors(n: int, allreduce: float, per_rank: float) -> None:
    assert bus_factor("all_reduce", n) == pytest.approx(allreduce)  # 2(n-1)/n
    for op in ("reduce_scatter", "all_gather", "all_to_all"):
        assert bus_factor(op, n) == pytest.approx(per_rank)  # (n-1)/n
    assert bus_factor("broadcast", n) == bus_factor("reduce", n) == 1.0


def test_algbw_and_busbw_by_hand() -> None:
    # 1e9 bytes in 1e6 us (1 s) is 1 GB/s (1 GB = 1e9 B); all_reduce on 4 ranks: busbw 1.5x
    assert bandwidths("all_reduce", 10**9, 1e6, 4) == pytest.approx((1.0, 1.5))
    # 64 MiB in 10 ms: 6.7108864 GB/s; all_gather on 8 ranks: busbw 7/8 of it
    alg, bus = bandwidths("all_gather", 64 * 2**20, 10_000.0, 8)
    assert alg == pytest.approx(6.7108864) and bus == pytest.approx(6.7108864 * 7 / 8)
    assert bandwidths("broadcast", 4096, 2.0, 8) == pytest.approx((2.048, 2.048))


def test_message_counts_follow_nccl_tests() -> None:
    # all_reduce: count is the whole buffer; all_gather & co: count per rank, size the total
    assert message_counts("all_reduce", 1024, 4) == (256, 1024)
    assert message_counts("all_gather", 1024, 4) == (64, 1024)
    assert message_counts("reduce_scatter", 1000, 3) == (83, 996)  # rounded to n * count
    assert message_counts("all_to_all", 8, 4) == (0, 0)  # too small: nothing per rank


def test_parse_size_and_sweep() -> None:
    assert parse_size("1K") == 1024 and parse_size("64M") == 64 * 2**20
    assert parse_size("1G") == 2**30 and parse_size("8") == 8 and parse_size("2k") == 2048
    assert parse_size("0.5M") == 2**19 and parse_size(100) == 100
    for bad in ("", "1T", "abc", "-1K", "inf"):
        with pytest.raises(ParameterError):
            parse_size(bad)
    assert sweep(1024, 8192) == [1024, 2048, 4096, 8192]
    assert sweep(1024, 10000, 4) == [1024, 4096]
    with pytest.raises(ParameterError):
        sweep(1024, 512)
    assert resolve_ops("all") == list(OPS)
    assert resolve_ops("broadcast,alltoall") == ["broadcast", "all_to_all"]
    with pytest.raises(ParameterError, match="unknown"):
        resolve_ops(["all_reduce", "gossip"])


# --- alpha-beta ----------------------------------------------------------------------------


def test_fit_recovers_alpha_and_beta(tmp_path) -> None:
    alpha, beta = 25.0, 12.5  # us, GB/s
    rows = [row(size=s, time_us=alpha + s / (beta * 1e3), n=4) for s in sweep(1024, 2**24)]
    fit = fit_alpha_beta(rows, "all_reduce", backend="nccl")
    assert fit.alpha_us == pytest.approx(alpha) and fit.beta_gbps == pytest.approx(beta)
    assert fit.busbw_gbps == pytest.approx(beta * 1.5) and fit.r2 == pytest.approx(1.0)
    assert (fit.n, fit.points, fit.backend) == (4, len(rows), "nccl")
    assert fit.predict_us(2**30) == pytest.approx(alpha + 2**30 / (beta * 1e3))
    again = AlphaBeta.load(fit.save(tmp_path / "ab.json"))
    assert again == fit and json.loads((tmp_path / "ab.json").read_text())["alpha_us"] == alpha
    assert AlphaBeta.from_dict(fit.to_dict()) == fit
    # rows given as JSON dicts work too
    assert fit_alpha_beta([asdict(r) for r in rows]).alpha_us == pytest.approx(alpha)


def test_fit_refuses_what_it_cannot_fit() -> None:
    with pytest.raises(ParameterError, match="2 or more sizes"):
        fit_alpha_beta([row(size=1024)])
    with pytest.raises(ParameterError, match="does not grow"):
        fit_alpha_beta([row(size=1024, time_us=9.0), row(size=4096, time_us=5.0)])


# --- formatting ----------------------------------------------------------------------------


def test_table_csv_and_json_have_the_columns() -> None:
    rows = [row("all_gather", 1024, 5.0, False), row("all_gather", 1024, 6.0, True),
            row("all_reduce", 2048, 7.0, True, wrong=3)]
    table = format_table(rows)
    for column in ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                   "out-of-place", "in-place", "(us)", "(GB/s)", "Avg bus bandwidth"):
        assert column in table
    line = next(x for x in table.splitlines() if x.strip().startswith("2048"))
    assert "N/A" in line and line.split()[-1] == "3"  # all_reduce: in place only
    parsed = list(csv.DictReader(io.StringIO(to_csv(rows))))
    assert len(parsed) == 3 and JSON_KEYS <= set(parsed[0]) and parsed[2]["wrong"] == "3"
    assert JSON_KEYS <= set(json.loads(json.dumps([asdict(r) for r in rows]))[0])


# --- real runs -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def all_ops() -> CollectivesReport:
    # two cycles (-N 2) and per-iteration times (-I 1, -K 1): the JSON tests below reuse it
    return cb.run_collectives("all", nnodes=1, nproc=2, min_bytes="1K", max_bytes="64K",
                              iters=3, warmup_iters=1, timeout_s=120, cycles=2, per_iter=True,
                              per_iter_skip=1)


@pytest.mark.slow
def test_all_ops_on_two_ranks_are_correct(all_ops: CollectivesReport) -> None:
    r = all_ops
    assert (r.world_size, r.nnodes, r.backend, r.device) == (2, 1, "gloo", "cpu")
    assert r.torch_version and r.params["sizes"] == sweep(1024, 65536)
    run = {s["op"] for s in r.skipped if s["placement"] == "both"}
    assert {x.op for x in r.rows} | run == set(OPS)  # every op ran or says why not
    assert all(s["reason"] for s in r.skipped)
    for op, form in ONE_FORM.items():  # torch has one form only: listed, not faked
        note = next(s for s in r.skipped if s["op"] == op)
        assert note["placement"] != form and form in note["reason"]
        assert {x.in_place for x in r.rows if x.op == op} == {form == "in-place"}
    assert r.rows and all(x.wrong == 0 for x in r.rows)
    for x in r.rows:
        assert x.time_us > 0 and x.algbw > 0 and x.nranks == 2 and x.type == "float"
        assert x.algbw == pytest.approx(x.size / 1e3 / x.time_us)
        assert x.busbw == pytest.approx(x.algbw * bus_factor(x.op, 2))
        assert x.root == (0 if x.op in ("broadcast", "reduce") else -1)
        assert x.redop == ("sum" if x.op in REDUCING else "none")
    gathered = [x for x in r.rows if x.op == "all_gather"]
    if gathered:  # both placements, count per rank, size the total
        assert {x.in_place for x in gathered} == {False, True}
        assert all(x.size == x.count * 2 * 4 for x in gathered)
    # the bare all_reduce loop ran at the largest size; its ratio is reported
    assert r.bare_size == 65536 and r.bare_all_reduce_busbw > 0
    assert r.bench_vs_bare == pytest.approx(r.bench_all_reduce_busbw / r.bare_all_reduce_busbw)


@pytest.mark.slow
def test_cycles_and_per_iteration_times(all_ops: CollectivesReport) -> None:
    r = all_ops
    first = [(x.op, x.size, x.in_place) for x in r.rows if x.cycle == 0]
    assert first == [(x.op, x.size, x.in_place) for x in r.rows if x.cycle == 1]  # -N 2
    assert {x.cycle for x in r.rows} == {0, 1}
    for x in r.rows:  # -I 1: each iteration's time is the slowest rank's, as nccl-tests keeps it
        assert len(x.iter_times_us) == 3 and len(x.rank_iter_times_us) == 2
        assert x.iter_times_us == [max(a, b) for a, b in zip(*x.rank_iter_times_us, strict=True)]
        assert min(x.iter_times_us) > 0 and x.iter_skip == 1
        s = x.iter_stats()
        assert s.skipped == 1 and s.min_us <= s.p50_us <= s.p99_us <= s.max_us
    assert "i_p50" in format_table(r.rows) and "i_p99" in format_table(r.rows)
    assert r.per_iter_clock == "host clock" and r.nccl_version is None
    assert [d["rank"] for d in r.devices] == [0, 1] and len({d["pid"] for d in r.devices}) == 2
    assert all(d["hostname"] and d["device"] is None and d["device_info"] is None
               for d in r.devices)  # a CPU has no GPU index, PCI address or name: null
    assert "WORLD_SIZE=2" in r.env and not any(e.split("=")[0].endswith("_URL") for e in r.env)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", r.started) and r.ended >= r.started


@pytest.fixture(scope="module")
def two_nodes_corrupt() -> CollectivesReport:
    return cb.run_collectives(["all_reduce", "all_gather"], nnodes=2, nproc=1, min_bytes="1K",
                              max_bytes="4K", iters=2, warmup_iters=1, corrupt_rank=1,
                              timeout_s=120)


@pytest.mark.slow
def test_two_nodes_and_corrupt_rank_gives_wrong(two_nodes_corrupt: CollectivesReport) -> None:
    r = two_nodes_corrupt
    assert (r.world_size, r.nnodes, r.nproc_per_node) == (2, 2, 1)
    assert r.rows and r.wrong > 0
    for x in r.rows:
        # rank 1 adds garbage to all it contributes: all_reduce is wrong everywhere on both
        # ranks, all_gather in rank 1's slice on both: 2 * count either way, the rest exact
        assert x.wrong == 2 * x.count, x


@pytest.mark.slow
def test_init_time_per_world_size() -> None:
    table = cb.measure_init_time(world_sizes=(1, 2), timeout_s=120)
    assert [t["world_size"] for t in table] == [1, 2]
    for t in table:
        assert t["init_s"] > 0 and t["first_collective_s"] > 0 and t["backend"] == "gloo"
        assert t["start_to_init_s"] >= t["init_s"]


# --- CLI -----------------------------------------------------------------------------------


def cli_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cb.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_cli_prints_and_fails_on_wrong(monkeypatch, capsys) -> None:
    rows = [row("all_reduce", 1024, 5.0), row("all_reduce", 2048, 6.0)]
    report = CollectivesReport(rows, "gloo", "cpu", 2, 1, 2, "2.x", bare_size=2048,
                               bare_all_reduce_busbw=0.5, bench_all_reduce_busbw=0.45,
                               bench_vs_bare=0.9)
    seen = {}

    def fake(op, **kwargs) -> CollectivesReport:
        seen.update(kwargs, op=op)
        return report

    monkeypatch.setattr(cb, "run_collectives", fake)
    args = cli_args("--op", "all", "--max", "4M", "--iters", "3")
    assert args.min == "1K" and args.max == "4M" and args.nproc == 2
    assert cb.run(args) == 0
    out = capsys.readouterr().out
    assert "busbw" in out and "bare all_reduce" in out and "0.900" in out
    assert (seen["op"], seen["min_bytes"], seen["max_bytes"], seen["iters"]) == ("all", "1K",
                                                                              "4M", 3)
    assert cb.run(cli_args("--json")) == 0
    assert JSON_KEYS <= set(json.loads(capsys.readouterr().out)[0])
    assert cb.run(cli_args("--csv")) == 0
    assert capsys.readouterr().out.startswith("op,size,count,type")
    rows[1].wrong = 5
    assert cb.run(cli_args()) == 1
    assert "5 wrong" in capsys.readouterr().err
    assert cli_args("--corrupt-rank", "1").corrupt_rank == 1
    assert not math.isnan(report.bench_vs_bare)


# --- nccl-tests JSON (-J), read back, the real sample, the structure -------------------------

SAMPLE = Path(__file__).parent / "data" / "nccl_tests_json" / "all_reduce_perf_t4_2gpu.json"
ANALYZE_ENV = "LABKIT_NCCL_TESTS_DIR"  # a checkout of NVIDIA/nccl-tests: tools/analyze_perf_json.py
STATS = ("min_us", "max_us", "avg_us", "p50_us", "p95_us", "p99_us", "stdev_us", "cv_pct")


def test_iter_stats_follow_nccl_tests() -> None:
    s = iter_stats([5.0, 1.0, 4.0, 2.0, 3.0, 6.0])
    # p50 is nccl-tests' sorted[n // 2] (the upper middle value), p95/p99 nearest rank
    assert (s.min_us, s.max_us, s.p50_us, s.p95_us, s.p99_us) == (1.0, 6.0, 4.0, 6.0, 6.0)
    assert s.avg_us == 3.5 and s.stdev_us == pytest.approx(math.sqrt(17.5 / 6))  # divides by n
    assert s.cv_pct == pytest.approx(s.stdev_us / 3.5 * 100)
    assert iter_stats([9.0, 1.0, 2.0], skipped=1).min_us == 1.0  # -K leaves the first out
    with pytest.raises(ParameterError, match="no iterations"):
        iter_stats([1.0], skipped=1)


def test_a_real_nccl_tests_file() -> None:
    doc = json.loads(SAMPLE.read_text())
    assert schema_problems(doc) == []  # the structure written from src/util.cu fits a real file
    run = read_nccl_tests_json(SAMPLE)
    assert (run.op, run.nranks, run.writer, run.backend, run.version) == (
        "all_reduce", 2, "nccl-tests", "nccl", 3)
    assert run.nccl_version == 22903 and "NCCL 2.29.3" in run.summary()
    assert [(x.in_place, x.type, x.root, x.wrong, x.cycle) for x in run.rows] == [
        (False, "half", -1, 0, 0), (True, "half", -1, 0, 0)]
    assert run.rows[0].busbw == 5.731221 and run.avg_busbw == 5.724297
    for x, name in zip(run.rows, ("out_of_place_per_iter", "in_place_per_iter"), strict=True):
        written, mine = doc["results"][0][name], x.iter_stats()
        for key in STATS:  # labkit's summary is nccl-tests' own, to its six decimals
            assert getattr(mine, key) == pytest.approx(written[key], abs=1e-5), key
    table = format_table(run.rows)  # the footer line of the run's own text log
    assert "# Avg bus bandwidth    : 5.7243 \n" in table and "23418.7" in table
    report = run.to_report()
    assert (report.backend, report.world_size, report.nnodes) == ("nccl", 2, 1)


def test_older_and_odd_nccl_tests_files_read(tmp_path) -> None:
    # built from nccl-tests' writer at v2.17.3 (JSON version 1, before per-iteration timing,
    # with its misspelt "average_bus_bandwidith"), not a real run: -N 2, -c 0, -C 1, MPI binary
    doc = json.loads(SAMPLE.read_text())
    result = doc["results"][0]
    for key in ("out_of_place_per_iter", "in_place_per_iter"):
        del result[key]
    result["in_place"] = {"cpu_time": 10.0, "alg_bw": 1.0, "bus_bw": 1.0, "nwrong": None}
    bandwidth = doc.pop("average_bus_bandwidth")["bandwidth"]
    doc |= {"version": 1, "results": [result, dict(result)], "args": ["./alltoall_perf_mpi"],
            "average_bus_bandwidith": {"bandwidith": bandwidth, "okay": "unchecked"}}
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(doc))
    run = read_nccl_tests_json(path)
    assert run.op == "all_to_all" and run.avg_busbw == bandwidth and run.version == 1
    assert [x.cycle for x in run.rows] == [0, 0, 1, 1]  # the size starting over is cycle 1
    assert run.rows[1].time_us == 10.0 and run.rows[1].wrong == -1  # -c 0: N/A
    assert run.rows[0].iter_times_us is None
    line = next(x for x in format_table(run.rows).splitlines() if x.strip().startswith("1342"))
    assert line.split()[-1] == "N/A"


@pytest.mark.parametrize(("content", "message"), [
    (None, "no such file"),
    ("{\"version\":3,\"results\":[{\"size\":8", "not JSON"),  # a run that died mid-write
    ("[1, 2]", "not nccl-tests JSON output"),
    ("{\"version\":3,\"config\":{},\"errors\":[\"unhandled cuda error\"]}", "without results"),
    ("{\"results\":[{\"count\":2}]}", "results[0]: size, count"),
    ("{\"results\":[{\"size\":8,\"count\":2,\"type\":\"float\",\"redop\":\"sum\",\"root\":\"-1\","
     "\"in_place\":{\"time\":\"fast\"}}]}", "expected a number"),
])
def test_bad_json_files_fail_in_one_line(tmp_path, content: str | None, message: str) -> None:
    path = tmp_path / "x.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ParameterError, match=re.escape(message)) as err:
        read_nccl_tests_json(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


@pytest.fixture(scope="module")
def written(all_ops: CollectivesReport, tmp_path_factory) -> list[Path]:
    return write_nccl_tests_json(all_ops, tmp_path_factory.mktemp("json") / "run.json")


@pytest.mark.slow
def test_json_written_as_nccl_tests_writes_it(all_ops: CollectivesReport,
                                             written: list[Path]) -> None:
    ops = list(dict.fromkeys(x.op for x in all_ops.rows))
    assert [p.name for p in written] == [f"run.{op}.json" for op in ops]  # one file per op
    for path, op in zip(written, ops, strict=True):
        text = path.read_text()
        doc = json.loads(text)
        # nccl-tests' structure, key order and types; labkit's only differences are documented
        assert schema_problems(doc, LABKIT_NULLS, frozenset({"labkit"})) == []
        strict = schema_problems(doc)
        assert all(p.split(":")[0] in LABKIT_NULLS | {"labkit"} for p in strict), strict
        assert ": " not in text.split('"env"')[0] and re.search(r'"time":\d+\.\d{6}[,}]', text)
        assert "\\/" in text and '"blocking_collectives":"false"' in text  # as nccl-tests
        mine = [x for x in all_ops.rows if x.op == op]
        assert doc["results"][0]["root"] == ("     0" if op in ("broadcast", "reduce") else "    -1")
        assert len(doc["results"]) == len({(x.cycle, x.size) for x in mine})
        assert doc["average_bus_bandwidth"]["bandwidth"] == pytest.approx(avg_busbw(mine), abs=1e-6)
        assert doc["out_of_bounds"] == {"count": 0, "okay": "true"}
        assert doc["config"]["per_iter_timing"] == "true" and doc["config"]["per_iter_skip"] == 1
        assert doc["labkit"]["backend"] == "gloo" and doc["labkit"]["devices"] == ["cpu", "cpu"]
        assert doc["args"][:3] == ["labkit", "bench", "collectives"] and doc["nccl_version"] is None
        for result in doc["results"]:
            for name in ("out_of_place", "in_place"):
                timing = result.get(f"{name}_per_iter")
                if result[name] is None:
                    assert timing is None  # never a null per-iteration object
                    continue
                rows = timing["per_process_max_times_us"]
                assert timing["times_us"] == [max(c) for c in zip(*rows, strict=True)]
                assert timing["skipped_iterations"] == 1
                again = iter_stats(timing["times_us"], 1)
                assert all(timing[k] == pytest.approx(getattr(again, k), abs=1e-5) for k in STATS)
        back = read_nccl_tests_json(path)  # and labkit reads its own file back
        assert (back.op, back.nranks, back.writer, back.backend) == (op, 2, WRITER, "gloo")
        assert [(x.size, x.count, x.in_place, x.cycle, x.wrong) for x in back.rows] == [
            (x.size, x.count, x.in_place, x.cycle, x.wrong) for x in mine]
        assert [x.busbw for x in back.rows] == pytest.approx([x.busbw for x in mine], abs=1e-6)
    again = write_nccl_tests_json(all_ops, written[0].parent / "run.json")
    assert [p.name for p in again] == [f"run.{op}.json.0" for op in ops]  # never overwritten


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get(ANALYZE_ENV),
                    reason=f"set {ANALYZE_ENV} to a checkout of NVIDIA/nccl-tests to run its "
                           "tools/analyze_perf_json.py on labkit's files (the structure is "
                           "checked above without it)")
def test_nccl_tests_own_analyzer_reads_labkit_files(written: list[Path]) -> None:
    tool = Path(os.environ[ANALYZE_ENV]) / "tools" / "analyze_perf_json.py"
    assert tool.is_file(), f"{tool} not found"
    by_op = {p.name.split(".")[1]: p for p in written}
    for path, flags, status in ((by_op["all_gather"], ["--all"], "PASS"),
                                (by_op["all_reduce"], ["--in-place", "--all"], "PASS"),
                                (by_op["all_to_all"], ["--in-place", "--all"], "N/A"),
                                (SAMPLE, ["--all"], "N/A")):
        done = subprocess.run([sys.executable, str(tool), str(path), *flags], capture_output=True,
                              text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        assert re.search(rf"Consistency \(times_us == max over process rows, \w+\): {status}",
                         done.stdout), done.stdout[:2000]


def test_write_refuses_what_nccl_tests_would_not_write(tmp_path) -> None:
    report = CollectivesReport([row()], "gloo", "cpu", 2, 1, 2, "2.x")
    with pytest.raises(ParameterError, match="suffix"):
        write_nccl_tests_json(report, tmp_path / "run.txt")
    one = write_nccl_tests_json(report, tmp_path / "one.json")
    assert one == [tmp_path / "one.json"]  # one op: the path as given
    doc = json.loads(one[0].read_text())
    assert doc["results"][0]["out_of_place"] is None  # torch's all_reduce: in place only
    assert "out_of_place_per_iter" not in doc["results"][0]


def test_expect_states_the_ratio() -> None:
    rows = [row(size=1024, time_us=10.0), row(size=4096, time_us=20.0)]
    (v,) = link_verdicts(rows, 2.0)
    assert v.size == 4096 and v.busbw == rows[1].busbw and v.ratio == rows[1].busbw / 2.0
    assert v.peak_busbw == max(x.busbw for x in rows) and "x the stated link" in v.line()
    for bad in ("abc", "0", "-5", "inf", "nan", ""):
        with pytest.raises(ParameterError, match="--expect"):
            link_verdicts(rows, bad)


def test_read_and_expect_on_the_command_line(capsys, tmp_path) -> None:
    assert cb.run(cli_args("--read", str(SAMPLE), "--expect", "5.8")) == 0
    out = capsys.readouterr().out
    assert "nccl-tests JSON v3, all_reduce on 2 ranks" in out and "0.987 x the stated" in out
    assert "PERFORMANCE.md" in out and "# Avg bus bandwidth    : 5.7243" in out
    assert cb.run(cli_args("--read", str(SAMPLE), "--json")) == 0
    assert json.loads(capsys.readouterr().out)[0]["busbw"] == 5.731221
    for argv, message in (  # `labkit` prints these as one "labkit: error: ..." line
        (["--read", str(tmp_path / "none.json")], "no such file"),
        (["--read", str(SAMPLE), "--expect", "fast"], "--expect wants"),
        (["--expect", "0"], "--expect wants"),
        (["-J", str(tmp_path / "out.csv")], "name it .json"),
    ):
        with pytest.raises(ParameterError, match=re.escape(message)) as err:
            cb.run(cli_args(*argv))
        assert "\n" not in str(err.value)
    assert capsys.readouterr().out == ""  # nothing printed before the error


def test_run_parameters_checked_before_a_launch() -> None:
    for kwargs, message in (({"cycles": 0}, "cycles"), ({"per_iter_skip": 1}, "per_iter_skip"),
                            ({"per_iter": True, "per_iter_skip": 3, "iters": 3},
                             "per_iter_skip")):
        with pytest.raises(ParameterError, match=message):
            cb.run_collectives("all_reduce", **kwargs)


@pytest.mark.slow
def test_cli_writes_json_from_a_run(all_ops, monkeypatch, capsys, tmp_path) -> None:
    seen = {}

    def fake(op, **kwargs) -> CollectivesReport:
        seen.update(kwargs)
        return all_ops

    monkeypatch.setattr(cb, "run_collectives", fake)
    path = tmp_path / "cli.json"
    assert cb.run(cli_args("--op", "all", "-N", "2", "-I", "1", "-K", "1", "-J", str(path),
                           "--expect", "12.5")) == 0
    out = capsys.readouterr().out
    assert (seen["cycles"], seen["per_iter"], seen["per_iter_skip"]) == (2, True, 1)
    assert f"# Writing JSON output to {tmp_path / 'cli.all_reduce.json'}" in out
    assert out.count("x the stated link bandwidth of 12.5 GB/s") == len(OPS)
    assert read_nccl_tests_json(tmp_path / "cli.broadcast.json").rows[0].root == 0


def test_nccl_tests_binary_run_and_compared(tmp_path, monkeypatch) -> None:
    # a stand-in all_reduce_perf: records its arguments and writes the real sample at -J
    args_file, fake = tmp_path / "args.txt", tmp_path / "bin" / "all_reduce_perf"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho "$@" > {args_file}\nwhile [ "$1" != -J ]; do shift; done\n'
                    f'cp {SAMPLE} "$2"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    run = run_nccl_tests("all_reduce", ngpus=2, min_bytes="128M", max_bytes="128M", iters=50,
                         warmup_iters=10, per_iter=True, out=tmp_path / "a.json")
    assert args_file.read_text().split() == ["-b", "134217728", "-e", "134217728", "-f", "2",
                                             "-g", "2", "-n", "50", "-w", "10", "-a", "3",
                                             "-I", "1", "-J", str(tmp_path / "a.json")]
    assert run.op == "all_reduce" and len(run.rows) == 2
    (same,) = [c for c in compare_rows(run.rows, run.rows) if c["placement"] == "in-place"]
    assert same["busbw_ratio"] == 1.0 and same["size"] == 134217728
    with pytest.raises(ParameterError, match="exists"):
        run_nccl_tests("all_reduce", out=tmp_path / "a.json")
    with pytest.raises(LaunchError, match="not on PATH"):
        run_nccl_tests("broadcast", out=tmp_path / "b.json")
