"""Replicated vs sharded experience: per-rank resident memory as the cluster grows.

The guide: "each agent stores every other agent's experiences", so memory grows linearly with
cluster size. Here each rank makes ``per_agent_mb`` of experience rows; ``replicated`` all-gathers
everyone's rows into local storage, ``sharded`` keeps its own and fetches sampled rows from
their owners (``all_to_all_single``). Each (world size, mode) is a separate labkit launch on
this node (gloo), so one mode's freed memory never hides in the other's numbers. Extra MB is
resident memory over a per-rank baseline taken after imports, init and a warm-up; ``sample_ok``
checks sampled rows against values known from (rank, index).
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import asdict, dataclass

from labkit.errors import LaunchError, ParameterError
from labkit.runtime.rank_script import rank_script

MODES = ("replicated", "sharded")
RANK_SCRIPT = rank_script(__name__)


@dataclass
class MemoryRow:
    """One (world size, mode): extra resident MB per rank, max and mean over ranks."""

    world_size: int
    mode: str
    per_agent_mb: float
    held_mb: float  # experience a rank holds by design: world_size x per_agent_mb, or per_agent_mb
    rss_extra_mb_max: float
    rss_extra_mb_mean: float
    rss_peak_extra_mb_max: float
    sample_ok: bool


def measure_one(world_size: int, mode: str, per_agent_mb: float = 32,
                timeout_s: float = 300.0) -> MemoryRow:
    """One launch of ``world_size`` ranks holding experience in ``mode``."""
    from labkit.runtime.launch import launch_local

    if mode not in MODES:
        raise ParameterError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if world_size < 1 or per_agent_mb <= 0:
        raise ParameterError("need world_size >= 1 and per_agent_mb > 0")
    result = launch_local(RANK_SCRIPT, json.dumps({"mode": mode, "per_agent_mb": per_agent_mb}),
                          nproc_per_node=world_size,
                          timeout_s=timeout_s, echo=None, check=True)
    got = result.published
    if not isinstance(got, dict):
        raise LaunchError(f"memory ranks published nothing; output:\n{result.output[-20:]}")
    extra = got["rss_extra_mb"]
    held = per_agent_mb * (world_size if mode == "replicated" else 1)
    return MemoryRow(world_size, mode, per_agent_mb, held, round(max(extra), 2),
                     round(statistics.fmean(extra), 2), round(max(got["rss_peak_extra_mb"]), 2),
                     all(got["sample_ok"]))


def measure_memory(world_sizes: tuple[int, ...] | list[int] = (2, 4, 8),
                   per_agent_mb: float = 32,
                   mode: tuple[str, ...] | list[str] | str = MODES) -> list[dict]:
    """``measure_one`` for every world size and mode, as JSON-able dicts."""
    modes = [mode] if isinstance(mode, str) else list(mode)
    return [asdict(measure_one(n, m, per_agent_mb)) for n in world_sizes for m in modes]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``labkit bench memory``."""
    parser.add_argument("--ranks", default="2,4,8", help="world sizes, comma-separated")
    parser.add_argument("--per-agent-mb", type=float, default=32, help="experience per agent")
    parser.add_argument("--mode", default=",".join(MODES), help="replicated,sharded")
    parser.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    """``labkit bench memory``."""
    try:
        ranks = [int(x) for x in args.ranks.split(",") if x.strip()]
    except ValueError:
        raise ParameterError(f"--ranks wants comma-separated integers, got {args.ranks!r}") from None
    modes = [m.strip() for m in args.mode.split(",") if m.strip()]
    rows = measure_memory(ranks, args.per_agent_mb, modes)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        cols = ("world_size", "mode", "held_mb", "rss_extra_mb_max", "rss_extra_mb_mean",
                "rss_peak_extra_mb_max", "sample_ok")
        print("  ".join(f"{c:>21}" for c in cols))
        for row in rows:
            print("  ".join(f"{row[c]!s:>21}" for c in cols))
    return 0 if all(r["sample_ok"] for r in rows) else 1
