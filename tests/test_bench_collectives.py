"""labkit.collectives.bench: nccl-tests formulas by hand, the alpha-beta fit, and real torchrun
runs on gloo (all ops on 2 ranks; 2 nodes with a corrupting rank; start-up time).

Each launch costs ~8-12 s here, so the runs are module fixtures and each checks many things.
No timing thresholds are asserted: this machine's numbers are noise-prone.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
from dataclasses import asdict

import pytest

from labkit.collectives import (
    ONE_FORM,
    OPS,
    REDUCING,
    CollectiveRow,
    CollectivesReport,
    bandwidths,
    bus_factor,
    format_table,
    message_counts,
    parse_size,
    resolve_ops,
    sweep,
    to_csv,
)
from labkit.collectives import bench as cb
from labkit.collectives.alphabeta import AlphaBeta, fit_alpha_beta
from labkit.errors import ParameterError

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
    return cb.run_collectives("all", nnodes=1, nproc=2, min_bytes="1K", max_bytes="64K",
                              iters=3, warmup_iters=1, timeout_s=120)


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
