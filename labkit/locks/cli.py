"""``labkit bench locks``: the whole comparison on one Redis, as JSON or a table.

$REDIS_URL if set, else a private redis-server for the run. Exit status 1 when a correct
mechanism lost an update, fencing let a stale write through, or ordered locking did not finish.
"""

from __future__ import annotations

import argparse
import json
import os
from contextlib import ExitStack
from dataclasses import asdict
from typing import Any

from labkit.errors import ParameterError
from labkit.locks.base import LOCK_METHODS, check_int
from labkit.locks.experiments import deadlock_experiment, race_experiment, stale_write_experiment

CORRECT = ("redis_lock", "fenced", "lua", "watch")


def compare(url: str, methods: list[str] | tuple[str, ...] = LOCK_METHODS, agents: int = 4,
            increments: int = 200, think_s: float = 0.002, ttl_s: float = 10.0,
            stale_rounds: int = 3, guide_ranks: int = 3,
            collective_timeout_s: float = 5.0) -> dict[str, Any]:
    """Every experiment, as JSON-able dicts: ``race`` (one row per method), ``stale_writes``,
    ``deadlock`` (unordered and ordered) and, unless ``guide_ranks`` is 0, ``guide_lock``
    (``overlap`` and ``skip``, in torchrun ranks)."""
    from labkit.locks.guide import guide_lock_overlap, guide_lock_skip

    _check_methods(methods)
    if guide_ranks:
        check_int("guide_ranks", guide_ranks, 2, 16)
    report: dict[str, Any] = {
        "race": [asdict(race_experiment(url, m, agents, increments, think_s, ttl_s))
                 for m in methods],
        "stale_writes": _with_fraction(stale_write_experiment(url, stale_rounds)),
        "deadlock": {"unordered": asdict(deadlock_experiment(url, ordered=False)),
                     "ordered": asdict(deadlock_experiment(url, ordered=True))},
    }
    if guide_ranks:
        overlap = asdict(guide_lock_overlap(url, ranks=guide_ranks))
        overlap.pop("intervals")
        report["guide_lock"] = {
            "overlap": overlap,
            "skip": asdict(guide_lock_skip(url, ranks=guide_ranks,
                                           collective_timeout_s=collective_timeout_s)),
        }
    return report


def _check_methods(methods: list[str] | tuple[str, ...]) -> None:
    if not methods or any(m not in LOCK_METHODS for m in methods):
        raise ParameterError(f"methods must be among {', '.join(LOCK_METHODS)}, got {list(methods)}")


def _with_fraction(result: Any) -> dict[str, Any]:
    return {**asdict(result), "rejected_fraction": result.rejected_fraction}


def healthy(report: dict[str, Any]) -> bool:
    """The correct mechanisms lost nothing, fencing refused every stale write, sorted lock
    order finished."""
    stale = report["stale_writes"]
    return (all(r["lost_updates"] == 0 for r in report["race"] if r["method"] in CORRECT)
            and stale["stale_writes_accepted"] == 0
            and report["deadlock"]["ordered"]["finished"])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``labkit bench locks``."""
    parser.add_argument("--agents", type=int, default=4, help="agent processes in the race")
    parser.add_argument("--increments", type=int, default=200, help="increments per agent")
    parser.add_argument("--think-ms", type=float, default=2.0,
                        help="work between read and write, ms")
    parser.add_argument("--methods", default=",".join(LOCK_METHODS),
                        help=f"comma list of {','.join(LOCK_METHODS)}")
    parser.add_argument("--ttl", type=float, default=10.0, help="lock TTL in the race, s")
    parser.add_argument("--stale-rounds", type=int, default=3,
                        help="times a holder is paused past its TTL")
    parser.add_argument("--guide-ranks", type=int, default=3,
                        help="torchrun ranks for the guide's all_reduce lock (0: skip it)")
    parser.add_argument("--collective-timeout", type=float, default=5.0,
                        help="LABKIT_COLLECTIVE_TIMEOUT for the skipped-acquire run, s")
    parser.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    """``labkit bench locks``."""
    from labkit.services.redis_server import REDIS_URL_ENV, RedisServer

    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    _check_methods(methods)  # before starting a server for nothing
    with ExitStack() as stack:
        url = os.environ.get(REDIS_URL_ENV, "").strip()
        if not url:
            url = stack.enter_context(RedisServer()).url
        report = compare(url, methods, args.agents, args.increments, args.think_ms / 1000,
                         args.ttl, args.stale_rounds, args.guide_ranks,
                         args.collective_timeout)
    print(json.dumps(report, indent=2) if args.json else _text(report))
    return 0 if healthy(report) else 1


def _text(report: dict[str, Any]) -> str:
    cols = ("method", "agents", "increments", "expected", "final", "lost_updates", "retries",
            "rejected_writes", "seconds")
    lines = ["  ".join(f"{c:>15}" for c in cols)]
    lines += ["  ".join(f"{row[c]!s:>15}" for c in cols) for row in report["race"]]
    stale = report["stale_writes"]
    lines.append(f"stale writes: {stale['stale_writes_rejected']}/"
                 f"{stale['stale_writes_attempted']} refused by fencing; without fencing "
                 f"{stale['unfenced_stale_overwrites']} overwrote the new holder's data")
    for kind, dl in report["deadlock"].items():
        errors = [a["error"] for a in dl["agents"] if a["error"]]
        lines.append(f"deadlock, {kind}: finished={dl['finished']}"
                     + (f", error: {errors[0]}" if errors else ""))
    guide = report.get("guide_lock")
    if guide:
        ov, sk = guide["overlap"], guide["skip"]
        lines.append(f"guide lock: up to {ov['max_inside']}/{ov['ranks']} ranks inside at once, "
                     f"{ov['lost_updates']}/{ov['expected']} updates lost")
        lines.append(f"guide lock, rank {sk['skip_rank']} skips acquire(): others blocked "
                     f"{sk['max_blocked_s']} s (collective timeout {sk['collective_timeout_s']} s)")
    return "\n".join(lines)
