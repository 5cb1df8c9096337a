"""nccl-tests on any backend: time, algbw, busbw and #wrong of the collectives, through torchrun.

Semantics follow NVIDIA/nccl-tests (``src/common.cu``, ``src/*.cu``, ``doc/PERFORMANCE.md``):
per size, one untimed call, a barrier, ``iters`` timed calls and a device sync; time per call
averaged over the loop on each rank, then combined across ranks: by default the slowest rank
(nccl-tests ``-a 3``; its own default ``-a 1`` averages the ranks), since a synchronous job
waits for its slowest rank; avg, min and rank0 on request. ``algbw = S / t`` (1 GB = 1e9 B), ``busbw = algbw *
factor``. For all_gather, reduce_scatter and all_to_all, S is the total across ranks and the
count column is per rank, as nccl-tests prints them. ``#wrong``: one more call on data known
from (rank, index), wrong elements summed over ranks. torch's all_reduce, broadcast and reduce
work in place only and all_to_all_single out of place only: the other variant is not run (an
extra copy would be timed) and the table shows N/A there. ``cycles`` repeats the sweep
(``-N``), ``per_iter`` keeps each iteration's time (``-I 1``), and ``-J FILE.json`` writes the
run as nccl-tests' JSON (``labkit.collectives.nccl_json``); ``--read`` prints the table of such
a file, nccl-tests' own included; ``--expect`` states a run's busbw against a link's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict
from typing import Any

from labkit.collectives.formulas import (
    AVERAGES,
    ONE_FORM,
    OPS,
    CollectiveRow,
    parse_size,
    resolve_ops,
    sweep,
)
from labkit.collectives.report import (
    CollectivesReport,
    format_table,
    parse_expect,
    to_csv,
    verdict_text,
)
from labkit.errors import LaunchError, ParameterError
from labkit.runtime.rank_script import rank_script

__all__ = ["DEFAULT_MAX", "CollectivesReport", "format_table", "measure_init_time",
           "run_collectives", "to_csv"]

DEFAULT_MAX = "16M"  # 1K..16M of all ops on 2 gloo ranks: well under a minute on 2 cores
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"  # nccl-tests' start_time / end_time (local time)

RANK_SCRIPT = rank_script(__name__)


def run_collectives(
    op: str | list[str] = "all_reduce", nnodes: int = 1, nproc: int = 2,
    min_bytes: int | str = "1K", max_bytes: int | str = DEFAULT_MAX, step_factor: int = 2,
    iters: int = 20, warmup_iters: int = 5, average: str = "max", timeout_s: float = 300.0,
    corrupt_rank: int | None = None, backend: str | None = None, network: Any = None,
    env: dict[str, str] | None = None, echo: Any = None, cycles: int = 1,
    per_iter: bool = False, per_iter_skip: int = 0,
) -> CollectivesReport:
    """Run the sweep on ``nnodes`` x ``nproc`` ranks with real torchrun; rank 0 publishes JSON.

    ``corrupt_rank`` makes that rank add garbage to its data in the checked calls (a demo of
    ``#wrong``); ``backend`` forces gloo or nccl ($LABKIT_BACKEND). ``cycles`` runs the sweep
    that many times (nccl-tests ``-N``); ``per_iter`` keeps every iteration's time (``-I 1``),
    summarised without the first ``per_iter_skip`` (``-K``)."""
    from labkit.runtime.launch import launch_local

    ops, world = resolve_ops(op), nnodes * nproc
    low, high = parse_size(min_bytes), parse_size(max_bytes)
    sizes = sweep(low, high, step_factor)
    if iters < 1 or warmup_iters < 0 or average not in AVERAGES:
        raise ParameterError(f"need iters >= 1, warmup >= 0, average in {AVERAGES}")
    if corrupt_rank is not None and not 0 <= corrupt_rank < world:
        raise ParameterError(f"corrupt_rank must be a rank of 0..{world - 1}")
    if cycles < 1:
        raise ParameterError(f"cycles must be 1 or more (nccl-tests' -N 0, forever, is not "
                             f"offered), got {cycles}")
    if per_iter_skip and not (per_iter and 0 <= per_iter_skip < iters):
        raise ParameterError(f"per_iter_skip needs per_iter and 0 <= skip < iters={iters}, got "
                             f"{per_iter_skip}")
    cfg = {"mode": "bench", "ops": ops, "sizes": sizes, "iters": iters,
           "warmup_iters": warmup_iters, "average": average, "corrupt_rank": corrupt_rank,
           "cycles": cycles, "per_iter": per_iter, "per_iter_skip": per_iter_skip}
    env = {**(env or {}), **({"LABKIT_BACKEND": backend} if backend else {})}
    started = time.strftime(TIME_FORMAT)
    result = launch_local(RANK_SCRIPT, json.dumps(cfg), nnodes=nnodes, nproc_per_node=nproc,
                          timeout_s=timeout_s, env=env, echo=echo, check=True, network=network)
    got = result.published
    if not got:
        raise LaunchError("the collectives job finished but rank 0 published nothing")
    not_run = {s["op"] for s in got["skipped"]}
    skipped = got["skipped"] + [
        {"op": o, "placement": "in-place" if form == "out-of-place" else "out-of-place",
         "reason": f"torch.distributed has only the {form} form of {o}"}
        for o, form in ONE_FORM.items() if o in ops and o not in not_run]
    params = {k: v for k, v in cfg.items() if k != "mode"} | {
        "nnodes": nnodes, "nproc": nproc, "min_bytes": low, "max_bytes": high,
        "step_factor": step_factor}
    return CollectivesReport(
        [CollectiveRow(**r) for r in got["rows"]], got["backend"], got["device"],
        got["world_size"], got["nnodes"], got["nproc_per_node"], got["torch_version"],
        params, skipped, **(got["bare"] or {}), seconds=result.seconds,
        devices=got.get("devices", []), env=got.get("env", []),
        nccl_version=got.get("nccl_version"), per_iter_clock=got.get("per_iter_clock", ""),
        started=started, ended=time.strftime(TIME_FORMAT))


def measure_init_time(world_sizes: tuple[int, ...] = (1, 2, 4), nnodes: int = 1,
                      repeats: int = 1, timeout_s: float = 300.0,
                      env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Per world size: seconds to join the process group (``init_s``), from rank-script start
    to joined (includes importing torch), and for the first all_reduce; max across ranks,
    median over ``repeats`` launches. What process-group start-up costs as the job grows."""
    from labkit.runtime.launch import launch_local

    if repeats < 1 or any(w < 1 or w % nnodes for w in world_sizes):
        raise ParameterError(f"need repeats >= 1 and world sizes divisible by nnodes={nnodes}")
    table = []
    for world in world_sizes:
        runs = [launch_local(RANK_SCRIPT, json.dumps({"mode": "init"}), nnodes=nnodes,
                             nproc_per_node=world // nnodes, timeout_s=timeout_s, env=env,
                             echo=None, check=True).published for _ in range(repeats)]
        keys = ("import_s", "init_s", "start_to_init_s", "first_collective_s")
        table.append({"world_size": world, "nnodes": nnodes, "backend": runs[0]["backend"],
                      "repeats": repeats}
                     | {k: statistics.median(r[k] for r in runs) for k in keys})
    return table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``labkit bench collectives``; the one-letter ones are nccl-tests' own."""
    parser.add_argument("--op", default="all_reduce",
                        help=f"one of {', '.join(OPS)}, a comma list, or all")
    parser.add_argument("--nproc-per-node", "--nproc", dest="nproc", type=int, default=2,
                        help="ranks per node")
    parser.add_argument("--nnodes", type=int, default=1, help="simulated nodes")
    parser.add_argument("--min", "-b", default="1K", help="smallest size (K/M/G = 1024 powers)")
    parser.add_argument("--max", "-e", default=DEFAULT_MAX,
                        help=f"largest size (default {DEFAULT_MAX})")
    parser.add_argument("--factor", "-f", type=int, default=2, help="size step factor")
    parser.add_argument("--iters", "-n", type=int, default=20, help="timed calls per size")
    parser.add_argument("--warmup", "-w", type=int, default=5, help="warm-up calls per op")
    parser.add_argument("--average", choices=AVERAGES, default="max",
                        help="combine per-rank times like nccl-tests -a (default max, its -a 3)")
    parser.add_argument("--run-cycles", "-N", dest="cycles", type=int, default=1,
                        help="run the whole sweep this many times (nccl-tests -N)")
    parser.add_argument("--per-iter-timing", "-I", dest="per_iter", type=int, choices=(0, 1),
                        default=0, help="1: time every iteration, p50/p99 columns (nccl-tests -I)")
    parser.add_argument("--per-iter-skip", "-K", dest="per_iter_skip", type=int, default=0,
                        help="leave the first K iterations out of the -I summary (nccl-tests -K)")
    parser.add_argument("--output-file", "-J", dest="output_file", metavar="PATH.json",
                        help="also write nccl-tests' JSON (one file per op when several)")
    parser.add_argument("--read", nargs="+", metavar="FILE.json",
                        help="print the table of nccl-tests JSON files (nccl-tests' or labkit's) "
                             "instead of running")
    parser.add_argument("--expect", metavar="GBPS",
                        help="a link's bandwidth in GB/s: busbw as a ratio of it, per op")
    parser.add_argument("--backend", choices=("gloo", "nccl"), help="force a backend")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds for the job")
    parser.add_argument("--corrupt-rank", type=int, metavar="RANK",
                        help="demo: that rank adds garbage in the checked call, so #wrong > 0")
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="rows as a JSON list")
    out.add_argument("--csv", action="store_true", help="rows as CSV")


def _print(rows: list[CollectiveRow], notes: list[str], args: argparse.Namespace,
           backend: str) -> int:
    """The table (or JSON/CSV rows, notes to stderr), the --expect verdict; 1 on #wrong > 0."""
    if args.expect is not None:
        notes = [*notes, verdict_text(rows, parse_expect(args.expect), backend)]
    if args.json or args.csv:
        print(json.dumps([asdict(r) for r in rows], indent=2) if args.json else to_csv(rows),
              end="\n" if args.json else "")
        print("\n".join(notes), file=sys.stderr)
    else:
        print("\n".join([notes[0], "", format_table(rows), *notes[1:]]))
    wrong = sum(max(0, r.wrong) for r in rows)
    if wrong:
        print(f"error: {wrong} wrong element(s): a collective returned bad data", file=sys.stderr)
        return 1
    return 0


def read(args: argparse.Namespace) -> int:
    """``--read``: the table of each nccl-tests JSON file, with what the file says it ran on."""
    from labkit.collectives.nccl_json import read_nccl_tests_json

    if args.expect is not None:
        parse_expect(args.expect)  # a bad value fails before any output
    status = 0
    for path in args.read:
        run = read_nccl_tests_json(path)
        notes = [f"# {path}: {run.summary()}"]
        status = max(status, _print(run.rows, notes, args, run.backend))
    return status


def run(args: argparse.Namespace) -> int:
    """Print the table (or JSON/CSV rows); 1 when any #wrong > 0, like a failed check."""
    if args.read:
        return read(args)
    if args.expect is not None:
        parse_expect(args.expect)
    if args.output_file and not args.output_file.lower().endswith(".json"):
        raise ParameterError(f"-J/--output-file writes JSON only and, like nccl-tests, takes the "
                             f"type from the suffix: name it .json, got {args.output_file!r}")
    report = run_collectives(
        args.op, nnodes=args.nnodes, nproc=args.nproc, min_bytes=args.min, max_bytes=args.max,
        step_factor=args.factor, iters=args.iters, warmup_iters=args.warmup,
        average=args.average, timeout_s=args.timeout, corrupt_rank=args.corrupt_rank,
        backend=args.backend, cycles=args.cycles, per_iter=bool(args.per_iter),
        per_iter_skip=args.per_iter_skip)
    notes = [f"# {report.backend} on {report.device}: {report.world_size} ranks "
             f"({report.nnodes} node(s)), torch {report.torch_version}, {args.iters} iters, "
             f"time {args.average} across ranks"
             + (f", {args.cycles} cycles" if args.cycles > 1 else "")
             + (f", per-iteration times by {report.per_iter_clock}" if args.per_iter else "")]
    if report.bench_vs_bare is not None:
        notes.append(f"# bare all_reduce loop at {report.bare_size} B: busbw "
                     f"{report.bare_all_reduce_busbw:.3f} GB/s, benchmark "
                     f"{report.bench_all_reduce_busbw:.3f} GB/s (ratio {report.bench_vs_bare:.3f})")
    notes += [f"# not run: {s['op']} {s['placement']}: {s['reason']}" for s in report.skipped]
    if args.output_file:
        from labkit.collectives.nccl_json import write_nccl_tests_json

        paths = write_nccl_tests_json(report, args.output_file)
        notes += [f"# Writing JSON output to {p}" for p in paths]
    return _print(report.rows, notes, args, report.backend)
