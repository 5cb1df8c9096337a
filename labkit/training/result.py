"""What a training run reports: one JSON-able dict, the same keys in both modes."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import asdict
from typing import Any

from labkit.reliability.checkpoint import params_sha256
from labkit.rl.agents import ActorCritic, evaluate
from labkit.rl.progress import Progress
from labkit.runtime.stats import percentile
from labkit.training.run import TrainConfig


def lag_stats(lags: list[int], ages_s: list[float]) -> dict[str, Any]:
    """Lag in policy versions (histogram and percentiles) and in seconds, over rollouts."""
    if not lags:
        return {"mean_lag": None, "lag_hist": {}}
    return {
        "mean_lag": round(statistics.fmean(lags), 3),
        "p50_lag": percentile(lags, 50), "p90_lag": percentile(lags, 90), "max_lag": max(lags),
        "lag_hist": {str(k): v for k, v in sorted(Counter(lags).items())},
        "p50_age_s": round(percentile(ages_s, 50), 4),
        "p90_age_s": round(percentile(ages_s, 90), 4),
    }


def summarize(cfg: TrainConfig, progress: Progress, model: ActorCritic, *, env_steps: int,
              straggler_delay_s: float, lag: dict[str, Any] | None,
              **extra: Any) -> dict[str, Any]:
    """The run's result: throughput, learning, lag, and the final parameters' hash."""
    seconds = progress.seconds
    return {
        "mode": cfg.mode, "agents": cfg.agents, "world_size": cfg.world_size,
        "seed": cfg.seed, "staleness": cfg.staleness.method,
        "straggler_rank": cfg.straggler_rank, "straggler_factor": cfg.straggler_factor,
        "env_steps": env_steps, "env_steps_consumed": progress.env_steps,
        "seconds": round(seconds, 3),
        "env_steps_per_s": round(env_steps / seconds, 1),
        "updates": progress.updates,
        "updates_per_s": round(progress.updates / seconds, 2),
        "episodes": progress.episodes,
        "final_mean_return": (None if progress.mean_return is None
                              else round(progress.mean_return, 2)),
        "eval_return": evaluate(model),
        "time_to_solved_s": None if progress.solved_s is None else round(progress.solved_s, 3),
        "steps_to_solved": progress.solved_steps,
        "straggler_delay_s": round(straggler_delay_s, 3),
        **(lag or {"mean_lag": 0.0, "lag_hist": {"0": progress.updates}}),
        "params_sha256": params_sha256(model),
        "curve": progress.curve,
        "config": asdict(cfg),
        **extra,
    }
