"""Synchronous vs asynchronous training side by side, with and without a straggler.

    labkit bench sync-async --agents 4 --straggler-factor 4 --json

Four real training runs (``labkit.training.run``) with the same agents, budget of env steps and seed:
sync and async with one agent ``--straggler-factor`` times slower, then both again without it.
With a straggler the lockstep ranks all wait for it at every gradient all-reduce, while the
other actors keep collecting. Without one, async's cost shows: policy lag, and possibly more env
steps to solve. Note that async runs one more process (the learner) on the same cores.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from labkit.errors import ParameterError
from labkit.rl.staleness import METHODS, StalenessConfig
from labkit.training.run import TrainConfig, train

KEYS = ("env_steps_per_s", "updates_per_s", "time_to_solved_s", "steps_to_solved",
        "final_mean_return", "eval_return", "mean_lag", "p90_lag", "seconds",
        "straggler_delay_s")


def _brief(result: dict[str, Any]) -> dict[str, Any]:
    return {k: result.get(k) for k in ("mode", "straggler_factor", *KEYS)}


def compare(agents: int = 4, steps: int = 60_000, straggler_factor: float = 4.0,
            straggler_rank: int | None = None, seed: int = 0, staleness: str = "none",
            baseline: bool = True, timeout_s: float = 900.0) -> dict[str, Any]:
    """Runs sync and async (and, with ``baseline``, both without the straggler)."""
    if straggler_factor < 1:
        raise ParameterError(f"--straggler-factor must be >= 1, got {straggler_factor}")
    slow = agents - 1 if straggler_rank is None else straggler_rank
    conditions = [straggler_factor] + ([1.0] if baseline and straggler_factor != 1 else [])
    results: dict[tuple[float, str], dict[str, Any]] = {}
    for factor in conditions:
        for mode in ("sync", "async"):
            cfg = TrainConfig(
                mode=mode, agents=agents, steps=steps, seed=seed,
                straggler_rank=slow if factor > 1 else None, straggler_factor=factor,
                staleness=StalenessConfig(staleness if mode == "async" else "none"),
                timeout_s=timeout_s,
            )
            results[(factor, mode)] = train(cfg)
    sync, asyn = results[(straggler_factor, "sync")], results[(straggler_factor, "async")]
    out: dict[str, Any] = {
        "agents": agents, "steps": steps, "seed": seed, "straggler_rank": slow,
        "straggler_factor": straggler_factor, "async_staleness": staleness,
        "sync_steps_per_s": sync["env_steps_per_s"],
        "async_steps_per_s": asyn["env_steps_per_s"],
        "async_over_sync": round(asyn["env_steps_per_s"] / sync["env_steps_per_s"], 2),
        "sync_time_to_solved_s": sync["time_to_solved_s"],
        "async_time_to_solved_s": asyn["time_to_solved_s"],
    }
    if (1.0, "sync") in results and straggler_factor != 1:
        base_sync, base_async = results[(1.0, "sync")], results[(1.0, "async")]
        out["no_straggler"] = {
            "sync_steps_per_s": base_sync["env_steps_per_s"],
            "async_steps_per_s": base_async["env_steps_per_s"],
            "async_over_sync": round(base_async["env_steps_per_s"]
                                     / base_sync["env_steps_per_s"], 2),
            "async_mean_lag": base_async["mean_lag"],
            "sync_steps_to_solved": base_sync["steps_to_solved"],
            "async_steps_to_solved": base_async["steps_to_solved"],
        }
    out["runs"] = [_brief(r) for r in results.values()]
    out["curves"] = {f"{mode} x{factor:g}": r["curve"] for (factor, mode), r in results.items()}
    out["lag_hist"] = {f"async x{factor:g}": r["lag_hist"] for (factor, mode), r in
                       results.items() if mode == "async"}
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``labkit bench sync-async``."""
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--steps", type=int, default=60_000, help="env steps per run")
    parser.add_argument("--straggler-factor", type=float, default=4.0)
    parser.add_argument("--straggler-rank", type=int, default=None, help="default: last agent")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--staleness", choices=METHODS, default="none",
                        help="what the async learner does with old experience")
    parser.add_argument("--no-baseline", action="store_true",
                        help="skip the two runs without a straggler")
    parser.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    """``labkit bench sync-async``."""
    out = compare(args.agents, args.steps, args.straggler_factor, args.straggler_rank,
                  args.seed, args.staleness, baseline=not args.no_baseline)
    if not args.json:
        out = {k: v for k, v in out.items() if k not in ("curves", "lag_hist")}
    print(json.dumps(out, indent=2))
    return 0
