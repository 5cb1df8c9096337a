"""Staleness under control: the four methods at a fixed policy lag, over seeds, on real CartPole.

    labkit bench staleness --lags 0,8,32 --seeds 0,1,2 --steps 60000 --json

In a real asynchronous run the lag is whatever timing makes it (``labkit train --mode async``
measures it). To compare methods *at the same lag*, this benchmark controls it: each rollout is
collected with the policy from ``lag`` updates ago, drawn per rollout from 0..2*lag (mean
``lag``; ``--exact`` for always exactly ``lag``), and the learner updates on it with the chosen
method. N actors feeding one learner in turn give lags around N - 1; here without the timing
noise, so a run is repeatable from its seed. Each
(method, lag, seed) runs in its own process, as many at once as this machine has cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from labkit.errors import LabkitError, ParameterError
from labkit.rl.hyper import Hyper
from labkit.rl.staleness import METHODS, StalenessConfig


@dataclass(frozen=True)
class LagRun:
    """One controlled run: a method, a fixed lag, a seed and a budget of env steps."""

    method: str
    lag: int
    seed: int
    steps: int = 60_000
    staleness: StalenessConfig = field(default_factory=StalenessConfig)
    hyper: Hyper = field(default_factory=Hyper)
    spread: bool = True  # each rollout's lag drawn from 0..2*lag (mean lag), else exactly lag


def simulate(run: LagRun) -> dict[str, Any]:
    """Trains one learner on rollouts from a policy ``run.lag`` versions old on average."""
    import random

    import torch

    from labkit.rl.agents import ActorCritic, EnvPool, collect, evaluate, seed_everything
    from labkit.rl.learner import actor_critic_loss, apply_update
    from labkit.rl.progress import Progress

    torch.set_num_threads(1)
    h, cfg = run.hyper, run.staleness
    seed_everything(run.seed)
    model, actor = ActorCritic(h.hidden), ActorCritic(h.hidden)
    optimizer = torch.optim.Adam(model.parameters(), lr=h.lr)
    pool = EnvPool(h.envs_per_agent, run.seed * 1_000_003)
    generator = torch.Generator().manual_seed(run.seed)
    oldest = 2 * run.lag if run.spread else run.lag
    history: deque[dict[str, torch.Tensor]] = deque(maxlen=oldest + 1)
    lags = random.Random(run.seed)
    progress, version, used, kl = Progress(), 0, 0, []
    while progress.env_steps < run.steps:
        history.append({k: v.clone() for k, v in model.state_dict().items()})
        lag = min(len(history) - 1, lags.randint(0, oldest) if run.spread else run.lag)
        actor.load_state_dict(history[-1 - lag])
        rollout = collect(actor, pool, h.rollout_len, generator=generator,
                          policy_version=version - lag)
        loss, info = actor_critic_loss(model, [rollout], version, cfg, h)
        if info.used:
            kl.append(info.policy_kl)
        if loss is not None:
            apply_update(model, optimizer, loss, h.max_grad_norm)
            used += 1
        version += 1  # the clock of versions runs on, dropped or not: lag stays fixed
        progress.record(rollout.episode_returns.tolist(), rollout.steps, loss is not None)
    pool.close()
    return {
        "method": run.method, "lag": run.lag, "seed": run.seed, "steps": progress.env_steps,
        "updates": used, "final_mean_return": progress.mean_return,
        "mean_policy_kl": sum(kl) / len(kl) if kl else None,
        "eval_return": evaluate(model), "steps_to_solved": progress.solved_steps,
        "curve": [(p["env_steps"], p["mean_return"]) for p in progress.curve],
    }


def config_for(method: str, base: StalenessConfig, lag: int, drop_max_lag: int | None
               ) -> StalenessConfig:
    """``base``'s knobs with ``method`` chosen; ``drop`` keeps lags up to ``drop_max_lag``
    (None: up to the run's mean lag, so about half of a spread run's rollouts are kept)."""
    max_lag = lag if drop_max_lag is None else drop_max_lag
    return StalenessConfig(method, base.exp_lambda, max_lag, base.rho_bar, base.c_bar)


def _run_in_process(run: LagRun, timeout_s: float) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "labkit.training.fixed_lag", "--one", json.dumps(asdict(run))],
        capture_output=True, text=True, timeout=timeout_s,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    if proc.returncode != 0:
        raise LabkitError(f"staleness run {run.method} lag {run.lag} seed {run.seed} failed:\n"
                          + proc.stderr[-2000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def sweep(methods: list[str], lags: list[int], seeds: list[int], steps: int,
          base: StalenessConfig | None = None, hyper: Hyper | None = None,
          jobs: int | None = None, timeout_s: float = 900.0, spread: bool = True,
          drop_max_lag: int | None = None) -> list[dict[str, Any]]:
    """Every (method, lag, seed), ``jobs`` processes at a time; rows in that order."""
    base, hyper = base or StalenessConfig(), hyper or Hyper()
    if not lags or not seeds or min(lags) < 0 or steps < 1:
        raise ParameterError("need at least one lag >= 0, one seed and steps >= 1")
    for method in methods:
        config_for(method, base, 0, drop_max_lag).validate()
    runs = [LagRun(m, lag, seed, steps, config_for(m, base, lag, drop_max_lag), hyper, spread)
            for m in methods for lag in lags for seed in seeds]
    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
        return list(pool.map(lambda r: _run_in_process(r, timeout_s), runs))


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (method, lag): mean final return over seeds, its range, and how many solved."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["method"], row["lag"]), []).append(row)
    out = []
    for (method, lag), group in groups.items():
        finals = [r["final_mean_return"] or 0.0 for r in group]
        kls = [r["mean_policy_kl"] for r in group if r["mean_policy_kl"] is not None]
        solved = [r["steps_to_solved"] for r in group if r["steps_to_solved"] is not None]
        out.append({"method": method, "lag": lag, "seeds": len(group),
                    "mean_final_return": round(statistics.fmean(finals), 1),
                    "min_final_return": round(min(finals), 1),
                    "max_final_return": round(max(finals), 1),
                    "solved": len(solved),
                    "mean_policy_kl": round(statistics.fmean(kls), 4) if kls else None,
                    "mean_steps_to_solved": round(statistics.fmean(solved)) if solved else None})
    return out


def _ints(text: str, name: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ParameterError(f"{name} wants comma-separated integers, got {text!r}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``labkit bench staleness``."""
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--lags", default="0,8,32", help="policy lags in versions")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--steps", type=int, default=60_000, help="env steps per run")
    parser.add_argument("--exp-lambda", type=float, default=0.01)
    parser.add_argument("--max-lag", type=int, default=None,
                        help="drop: oldest lag kept (default: each run's mean lag)")
    parser.add_argument("--exact", action="store_true",
                        help="every rollout exactly --lags old (default: spread over 0..2*lag)")
    parser.add_argument("--jobs", type=int, default=None, help="processes at once (cores)")
    parser.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    """``labkit bench staleness``."""
    base = StalenessConfig("none", args.exp_lambda)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    rows = sweep(methods, _ints(args.lags, "--lags"), _ints(args.seeds, "--seeds"), args.steps,
                 base, jobs=args.jobs, spread=not args.exact, drop_max_lag=args.max_lag)
    table = summarize(rows)
    if args.json:
        print(json.dumps({"summary": table, "runs": rows}, indent=2))
    else:
        for row in table:
            print(json.dumps(row))
    return 0


def _one(text: str) -> None:
    raw = json.loads(text)
    raw["staleness"] = StalenessConfig(**raw["staleness"])
    raw["hyper"] = Hyper(**raw["hyper"])
    print(json.dumps(simulate(LagRun(**raw))))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        _one(sys.argv[2])
    else:
        parser = argparse.ArgumentParser(prog="labkit bench staleness")
        add_arguments(parser)
        sys.exit(run(parser.parse_args()))
