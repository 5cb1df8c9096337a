"""``labkit bench buffer``: the options and the command. The measurement is
``labkit.buffers.bench_core`` (three phases per buffer on one server), the sweeps
``labkit.buffers.bench_sweep``; their names are re-exported here.
"""

from __future__ import annotations

import argparse
import json

from labkit.buffers.bench_core import (
    CHUNKS_PER_PUSH,
    IMPLS,
    SWEEP_IMPLS,
    ImplResult,
    item_bytes,
    measure_buffers,
    measure_specs,
    parse_benchmark_csv,
    server_cpu_seconds,
)
from labkit.buffers.bench_report import CHUNK_COLUMNS, COLUMNS, explained_table
from labkit.buffers.bench_sweep import compare_parsers, sweep_agents, sweep_chunks
from labkit.errors import ParameterError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``labkit bench buffer``."""
    parser.add_argument("--impl", help=f"comma list of {','.join(IMPLS)} (default: all; "
                                       f"with --sweep: {','.join(SWEEP_IMPLS)})")
    parser.add_argument("--agents", type=int, default=1, help="agent processes")
    parser.add_argument("--payload", type=int, default=1024, help="tensor bytes per item")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each window")
    parser.add_argument("--batch", type=int, default=100, help="items per push and pull")
    parser.add_argument("--chunk", type=int, help="experiences per frame: agents push chunks "
                                                  "(the guide's buffer ignores it)")
    parser.add_argument("--chunks-per-push", type=int, default=CHUNKS_PER_PUSH,
                        help="chunk frames per push with --chunk")
    parser.add_argument("--parser", choices=("hiredis", "hiredis-reader", "python"),
                        help="redis-py's reply parser and command packer (default: redis-py's "
                             "choice, hiredis for both when installed)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="measure each buffer this many times, taking turns, and report "
                             "medians (every round's end-to-end rate is listed)")
    parser.add_argument("--sweep", help="agent counts, e.g. 1,2,4,8,16,32 (ignores --agents)")
    parser.add_argument("--chunk-sweep", help="chunk sizes, e.g. 1,8,64,256: the guide, the "
                                              "list buffer per item and at each size")
    parser.add_argument("--json", action="store_true", help="print JSON")


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ParameterError(f"want comma-separated integers, got {text!r}") from None


def run(args: argparse.Namespace) -> int:
    """``labkit bench buffer``: one measurement, or a sweep over agent counts or chunk sizes."""
    impls = [x.strip() for x in args.impl.split(",")] if args.impl else None
    if args.sweep and args.rounds != 1:
        raise ParameterError("--rounds takes medians of one measurement or of --chunk-sweep; "
                             "--sweep measures each agent count once")
    if args.sweep:
        rows = sweep_agents(_ints(args.sweep), impls or SWEEP_IMPLS, args.payload,
                            args.seconds, args.batch, chunk=args.chunk,
                            chunks_per_push=args.chunks_per_push, parser=args.parser)
        print(json.dumps(rows, indent=2) if args.json else explained_table(rows, args.seconds))
        return 0
    if args.chunk_sweep:
        report = sweep_chunks(_ints(args.chunk_sweep), agents=args.agents, payload=args.payload,
                              seconds=args.seconds, batch=args.batch,
                              chunks_per_push=args.chunks_per_push, parser=args.parser,
                              rounds=args.rounds)
    else:
        report = measure_buffers(impls or IMPLS, args.agents, args.payload, args.seconds,
                                 args.batch, chunk=args.chunk,
                                 chunks_per_push=args.chunks_per_push, parser=args.parser,
                                 rounds=args.rounds)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        rows = [{"agents": report["agents"], **r} for r in report["results"]]
        chunked = args.chunk_sweep or args.chunk
        print(explained_table(rows, args.seconds, CHUNK_COLUMNS if chunked else COLUMNS))
        print(f"redis {report['redis_version']}, redis-benchmark RPUSH: "
              f"{report['redis_benchmark_rpush_per_s']}/s "
              f"({report['redis_benchmark_mb_per_s']} MB/s)")
        for key in ("list_vs_guide_e2e", "list_vs_redis_benchmark",
                    "list_push_bytes_vs_redis_benchmark"):
            if key in report:
                print(f"{key}: {report[key]}")
        if args.rounds > 1:
            print(f"medians of {args.rounds} rounds; end to end in each round:")
            for row in report["results"]:
                rounds = ", ".join("n/a" if v is None else f"{v:.0f}"
                                   for v in row.get("e2e_rounds") or [])
                print(f"  {row['impl']}: {rounds}")
    return 0


__all__ = ["CHUNKS_PER_PUSH", "IMPLS", "SWEEP_IMPLS", "ImplResult", "add_arguments",
           "compare_parsers", "item_bytes", "measure_buffers", "measure_specs",
           "parse_benchmark_csv", "run", "server_cpu_seconds", "sweep_agents", "sweep_chunks"]
