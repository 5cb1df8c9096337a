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
extra copy would be timed) and the table shows N/A there.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import statistics
import sys
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from labkit.errors import LaunchError, ParameterError
from labkit.runtime.rank_script import rank_script

if TYPE_CHECKING:
    from labkit.collectives.alphabeta import AlphaBeta
from labkit.collectives.formulas import (
    AVERAGES,
    ONE_FORM,
    OPS,
    CollectiveRow,
    parse_size,
    resolve_ops,
    sweep,
)

DEFAULT_MAX = "16M"  # 1K..16M of all ops on 2 gloo ranks: well under a minute on 2 cores

RANK_SCRIPT = rank_script(__name__)


@dataclass
class CollectivesReport:
    """Rows of one run plus what it ran on; ``bench_vs_bare`` is bench busbw / bare busbw."""

    rows: list[CollectiveRow]
    backend: str
    device: str
    world_size: int
    nnodes: int
    nproc_per_node: int
    torch_version: str
    params: dict[str, Any] = field(default_factory=dict)
    skipped: list[dict[str, str]] = field(default_factory=list)
    bare_size: int | None = None
    bare_all_reduce_time_us: float | None = None
    bare_all_reduce_busbw: float | None = None
    bench_all_reduce_busbw: float | None = None
    bench_vs_bare: float | None = None
    seconds: float = 0.0

    @property
    def wrong(self) -> int:
        return sum(max(0, r.wrong) for r in self.rows)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def fit(self, op: str = "all_reduce", in_place: bool | None = None) -> AlphaBeta:
        from labkit.collectives.alphabeta import fit_alpha_beta

        return fit_alpha_beta(self.rows, op, in_place, backend=self.backend)


def _time(us: float) -> str:
    return f"{us:.0f}" if us >= 10000 else f"{us:.1f}" if us >= 100 else f"{us:.2f}"


def _bw(gbps: float) -> str:
    """nccl-tests prints %6.2f; CPU runs are far below 0.01 GB/s, so keep 2 digits there."""
    return f"{gbps:.2f}" if gbps >= 0.1 or gbps == 0 else f"{gbps:.2g}"


def format_table(rows: list[CollectiveRow]) -> str:
    """The nccl-tests text table, one block per op, out-of-place and in-place side by side."""
    head = f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}"
    cols = f"  {'time':>7}  {'algbw':>7}  {'busbw':>7}  {'#wrong':>6}"
    units = (f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}"
             + f"  {'(us)':>7}  {'(GB/s)':>7}  {'(GB/s)':>7}  {'':>6}" * 2)
    lines: list[str] = []
    for op in dict.fromkeys(r.op for r in rows):
        mine = [r for r in rows if r.op == op]
        lines += [f"# {op}, {mine[0].nranks} ranks",
                  f"# {'':>46}  {'out-of-place':^36}  {'in-place':^36}", head + cols * 2, units]
        for size in dict.fromkeys(r.size for r in mine):
            pair = {r.in_place: r for r in mine if r.size == size}
            first = next(iter(pair.values()))
            line = (f"{first.size:>12}  {first.count:>12}  {first.type:>8}  {first.redop:>6}  "
                    f"{first.root:>6}")
            for place in (False, True):
                r = pair.get(place)
                line += (f"  {_time(r.time_us):>7}  {_bw(r.algbw):>7}  {_bw(r.busbw):>7}  "
                         f"{r.wrong:>6}" if r else f"  {'N/A':>7}  {'N/A':>7}  {'N/A':>7}  {'N/A':>6}")
            lines.append(line)
        lines.append(f"# Avg bus bandwidth    : {statistics.fmean(r.busbw for r in mine):.4g}")
        lines.append("")
    return "\n".join(lines)


def to_csv(rows: list[CollectiveRow]) -> str:
    """One CSV line per row, with a header of the field names."""
    out = io.StringIO()
    writer = csv.DictWriter(out, [f.name for f in fields(CollectiveRow)], lineterminator="\n")
    writer.writeheader()
    writer.writerows(asdict(r) for r in rows)
    return out.getvalue()


def run_collectives(
    op: str | list[str] = "all_reduce", nnodes: int = 1, nproc: int = 2,
    min_bytes: int | str = "1K", max_bytes: int | str = DEFAULT_MAX, step_factor: int = 2,
    iters: int = 20, warmup_iters: int = 5, average: str = "max", timeout_s: float = 300.0,
    corrupt_rank: int | None = None, backend: str | None = None, network: Any = None,
    env: dict[str, str] | None = None, echo: Any = None,
) -> CollectivesReport:
    """Run the sweep on ``nnodes`` x ``nproc`` ranks with real torchrun; rank 0 publishes JSON.

    ``corrupt_rank`` makes that rank add garbage to its data in the checked calls (a demo of
    ``#wrong``); ``backend`` forces gloo or nccl ($LABKIT_BACKEND)."""
    from labkit.runtime.launch import launch_local

    ops, world = resolve_ops(op), nnodes * nproc
    sizes = sweep(parse_size(min_bytes), parse_size(max_bytes), step_factor)
    if iters < 1 or warmup_iters < 0 or average not in AVERAGES:
        raise ParameterError(f"need iters >= 1, warmup >= 0, average in {AVERAGES}")
    if corrupt_rank is not None and not 0 <= corrupt_rank < world:
        raise ParameterError(f"corrupt_rank must be a rank of 0..{world - 1}")
    cfg = {"mode": "bench", "ops": ops, "sizes": sizes, "iters": iters,
           "warmup_iters": warmup_iters, "average": average, "corrupt_rank": corrupt_rank}
    env = {**(env or {}), **({"LABKIT_BACKEND": backend} if backend else {})}
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
    report = CollectivesReport(
        [CollectiveRow(**r) for r in got["rows"]], got["backend"], got["device"],
        got["world_size"], got["nnodes"], got["nproc_per_node"], got["torch_version"],
        {k: v for k, v in cfg.items() if k != "mode"}, skipped, **(got["bare"] or {}),
        seconds=result.seconds)
    return report


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
    """Options of ``labkit bench collectives``."""
    parser.add_argument("--op", default="all_reduce",
                        help=f"one of {', '.join(OPS)}, a comma list, or all")
    parser.add_argument("--nproc-per-node", "--nproc", dest="nproc", type=int, default=2,
                        help="ranks per node")
    parser.add_argument("--nnodes", type=int, default=1, help="simulated nodes")
    parser.add_argument("--min", default="1K", help="smallest size (K/M/G = 1024 powers)")
    parser.add_argument("--max", default=DEFAULT_MAX, help=f"largest size (default {DEFAULT_MAX})")
    parser.add_argument("--factor", type=int, default=2, help="size step factor")
    parser.add_argument("--iters", type=int, default=20, help="timed calls per size")
    parser.add_argument("--warmup", type=int, default=5, help="warm-up calls per op")
    parser.add_argument("--average", choices=AVERAGES, default="max",
                        help="combine per-rank times like nccl-tests -a (default avg)")
    parser.add_argument("--backend", choices=("gloo", "nccl"), help="force a backend")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds for the job")
    parser.add_argument("--corrupt-rank", type=int, metavar="RANK",
                        help="demo: that rank adds garbage in the checked call, so #wrong > 0")
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="rows as a JSON list")
    out.add_argument("--csv", action="store_true", help="rows as CSV")


def run(args: argparse.Namespace) -> int:
    """Print the table (or JSON/CSV rows); 1 when any #wrong > 0, like a failed check."""
    report = run_collectives(
        args.op, nnodes=args.nnodes, nproc=args.nproc, min_bytes=args.min, max_bytes=args.max,
        step_factor=args.factor, iters=args.iters, warmup_iters=args.warmup,
        average=args.average, timeout_s=args.timeout, corrupt_rank=args.corrupt_rank,
        backend=args.backend)
    notes = [f"# {report.backend} on {report.device}: {report.world_size} ranks "
             f"({report.nnodes} node(s)), torch {report.torch_version}, {args.iters} iters, "
             f"time {args.average} across ranks"]
    if report.bench_vs_bare is not None:
        notes.append(f"# bare all_reduce loop at {report.bare_size} B: busbw "
                     f"{report.bare_all_reduce_busbw:.3f} GB/s, benchmark "
                     f"{report.bench_all_reduce_busbw:.3f} GB/s (ratio {report.bench_vs_bare:.3f})")
    notes += [f"# not run: {s['op']} {s['placement']}: {s['reason']}" for s in report.skipped]
    if args.json or args.csv:
        print(json.dumps([asdict(r) for r in report.rows], indent=2) if args.json
              else to_csv(report.rows), end="\n" if args.json else "")
        print("\n".join(notes), file=sys.stderr)
    else:
        print("\n".join([notes[0], "", format_table(report.rows), *notes[1:]]))
    if report.wrong:
        print(f"error: {report.wrong} wrong element(s): a collective returned bad data",
              file=sys.stderr)
        return 1
    return 0
