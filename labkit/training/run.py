"""Train CartPole agents on N ranks, synchronously (DDP) or asynchronously (actors + learner).

    labkit train --mode sync --agents 4 --steps 100000 --json
    labkit train --mode async --agents 4 --steps 100000 --staleness vtrace --json
    labkit train --mode sync --agents 4 --straggler-rank 3 --straggler-factor 4 --json

``sync``: every agent is a rank that steps its environments, computes gradients on its own
rollout, and DDP averages them (the guide's MPI style: everyone waits for the slowest).
``async``: ``agents`` actor ranks push rollouts into a Redis experience buffer and fetch the
newest policy weights from Redis; one more rank, the learner (rank 0), trains on whatever has
arrived and publishes each new version. The world is ``agents`` ranks in sync mode and
``agents + 1`` in async mode. Same seed, same world size: the same sync run, bit for bit, on
CPU; an async run depends on timing and is not repeatable.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labkit.errors import LaunchError, ParameterError
from labkit.reliability.cadence import add_cadence_arguments, cadence_fields, cadence_of
from labkit.rl.hyper import Hyper
from labkit.rl.staleness import METHODS, StalenessConfig
from labkit.runtime.config import add_config_arguments, from_json, to_json
from labkit.runtime.config import config_from_args as config_from_args_of
from labkit.runtime.rank_script import rank_script
from labkit.services.base import CHILD_REDIS_URL_ENV

MODES = ("sync", "async")
BUFFERS = ("list", "stream")
RANK_SCRIPT = rank_script(__name__)


@dataclass
class TrainConfig:
    """One training run. ``steps`` is the budget of environment steps over all agents."""

    mode: str = "sync"  # sync (DDP, lockstep) or async (actors and a learner)
    agents: int = 2  # agents that step environments (async adds one learner rank)
    steps: int = 50_000  # env steps, all agents together
    seed: int = 0  # seeds every agent's environments and the model
    straggler_rank: int | None = None  # which agent (0-based) is slow
    straggler_factor: float = 1.0  # how many times slower that agent steps
    staleness: StalenessConfig = field(default_factory=StalenessConfig)
    hyper: Hyper = field(default_factory=Hyper)
    buffer: str = "stream"  # async: the experience buffer kind
    max_inflight: int = 2  # async: rollouts an actor may be ahead of the learner
    learner_batch: int = 0  # async: rollouts per update; 0 = one per agent, as in sync
    learner_timeout_s: float = 10.0  # async: actors stop when the learner is silent this long
    stop_when_solved: bool = False  # end the run when the mean return reaches CartPole's 475
    nnodes: int = 1  # simulated nodes the ranks are spread over
    timeout_s: float = 900.0  # the whole launch
    ckpt_dir: str = ""  # sync: where checkpoints go (and a restarted job resumes from)
    checkpoint_every_updates: int | None = None  # sync: checkpoint after every N-th update
    checkpoint_every_s: float | None = None  # sync: ... or every S seconds; neither: resume only
    keep_checkpoints: int = 3  # sync: how many complete checkpoints to keep
    max_restarts: int = 0  # torchrun restarts after a rank or node dies
    faults: str = ""  # injected faults, labkit.reliability.faults syntax: "kill:rank=1,step=30"

    @property
    def world_size(self) -> int:
        return self.agents + (1 if self.mode == "async" else 0)

    def validate(self) -> None:
        """Raises ParameterError for a run that cannot work, before anything starts."""
        if self.mode not in MODES:
            raise ParameterError(f"mode must be sync or async, got {self.mode!r}")
        if self.agents < 1:
            raise ParameterError(f"need at least one agent, got --agents {self.agents}")
        if self.mode == "sync" and self.staleness.method != "none":
            raise ParameterError(
                "--staleness only applies to --mode async: synchronous agents always train on "
                "fresh experience (lag 0)")
        if self.mode == "async" and self.world_size < 2:
            raise ParameterError("async mode needs a learner and at least one actor")
        if self.straggler_rank is not None and not 0 <= self.straggler_rank < self.agents:
            raise ParameterError(
                f"--straggler-rank {self.straggler_rank} is outside the agents 0..{self.agents - 1}")
        if self.straggler_factor < 1:
            raise ParameterError(f"--straggler-factor must be >= 1, got {self.straggler_factor}")
        if self.steps < self.rollout_steps:
            raise ParameterError(
                f"--steps {self.steps} is less than one rollout of every agent "
                f"({self.rollout_steps} steps)")
        if self.buffer not in BUFFERS:
            raise ParameterError(f"--buffer must be one of {', '.join(BUFFERS)}")
        if self.max_inflight < 1 or self.learner_batch < 0:
            raise ParameterError("need max_inflight >= 1 and learner_batch >= 0")
        if self.learner_timeout_s <= 0 or self.timeout_s <= 0:
            raise ParameterError("timeouts must be positive")
        if self.keep_checkpoints < 1 or self.max_restarts < 0:
            raise ParameterError("need keep_checkpoints >= 1 and max_restarts >= 0")
        cadence = cadence_of(self)
        cadence.validate()
        if cadence.periodic and not self.ckpt_dir:
            raise ParameterError(f"checkpoints {cadence.describe()} need --ckpt-dir "
                                 "(where checkpoints go)")
        if self.ckpt_dir and self.mode != "sync":
            raise ParameterError("checkpoints and resume are implemented for --mode sync only")
        from labkit.reliability.faults import parse_faults

        parse_faults(self.faults)  # a typo fails here, not in the middle of the job
        if not 1 <= self.nnodes <= self.world_size:
            raise ParameterError(f"nnodes must be between 1 and the world size {self.world_size}")
        if self.world_size % self.nnodes:
            raise ParameterError(
                f"{self.world_size} ranks do not split evenly over {self.nnodes} nodes")
        self.hyper.validate()
        self.staleness.validate()

    @property
    def batch_rollouts(self) -> int:
        """Rollouts per learner update (sync: always one per agent)."""
        return self.learner_batch or self.agents

    @property
    def rollout_steps(self) -> int:
        """Env steps in one rollout of every agent."""
        return self.agents * self.hyper.envs_per_agent * self.hyper.rollout_len

    def to_json(self) -> str:
        return to_json(self)

    @classmethod
    def from_json(cls, text: str) -> TrainConfig:
        return from_json(cls, text)


def train(cfg: TrainConfig, *, echo: Any = None, run_dir: str | Path | None = None
          ) -> dict[str, Any]:
    """Runs ``cfg`` as a real torchrun job and returns rank 0's result (a JSON-able dict).

    Async mode talks through Redis: ``$REDIS_URL`` when set, else a redis-server started for
    this run and stopped after it."""
    from labkit.runtime.launch import launch_local

    cfg.validate()
    env: dict[str, str] = {}
    server = None
    try:
        if cfg.mode == "async":
            import os

            from labkit.services.redis_server import REDIS_URL_ENV, RedisServer

            url = os.environ.get(REDIS_URL_ENV)
            if not url:
                server = RedisServer().start()
                url = server.url
            env[CHILD_REDIS_URL_ENV] = url
        result = launch_local(
            RANK_SCRIPT, cfg.to_json(), nnodes=cfg.nnodes,
            nproc_per_node=cfg.world_size // cfg.nnodes, timeout_s=cfg.timeout_s, env=env,
            echo=echo, run_dir=run_dir, check=True, max_restarts=cfg.max_restarts,
        )
    finally:
        if server is not None:
            server.stop()
    if not isinstance(result.published, dict):
        raise LaunchError("the training ranks published no result; last output:\n"
                          + "\n".join(result.output[-20:]))
    published = result.published
    if note := recovery_note(cfg, published):
        published["recovery_note"] = note
    return published


def recovery_note(cfg: TrainConfig, result: dict[str, Any]) -> str | None:
    """Why a restarted run began at update 0 although it was asked to checkpoint, or None."""
    cadence = cadence_of(cfg)
    if not result.get("restarts") or result.get("resumed_from_step") is not None:
        return None
    if not cadence.periodic:
        return ("restarted from update 0: no checkpoint cadence was set "
                "(--checkpoint-every-updates N with --ckpt-dir)")
    reached = result.get("lost_steps", 0) // max(1, cfg.rollout_steps)
    if cadence.updates is not None:
        return (f"restarted from update 0: the first checkpoint comes after update "
                f"{cadence.updates}, and the failure came after {reached}")
    pace = result["seconds"] / max(1, result["updates"])
    return (f"restarted from update 0: the failure came after {reached} updates, before "
            f"{cadence.seconds:g} s had passed ({1000 * pace:.0f} ms per update here), so the "
            f"cadence in seconds had written nothing; --checkpoint-every-updates N checkpoints "
            f"after fixed updates on any machine")


SUMMARY_KEYS = ("mode", "agents", "world_size", "env_steps", "seconds", "env_steps_per_s",
                "updates", "updates_per_s", "final_mean_return", "eval_return",
                "time_to_solved_s", "steps_to_solved", "mean_lag", "restarts",
                "resumed_from_step", "lost_steps", "params_sha256")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``labkit train``: one per ``TrainConfig`` field (nested ``StalenessConfig``
    and ``Hyper`` included), with its default and its comment as help."""
    add_config_arguments(parser, TrainConfig,
                         skip=("checkpoint_every_updates", "checkpoint_every_s"),
                         flags={"timeout_s": "--timeout", "method": "--staleness"},
                         choices={"mode": MODES, "method": METHODS, "buffer": BUFFERS})
    add_cadence_arguments(parser)
    parser.add_argument("--kill-rank", type=int, default=None, help="SIGKILL this rank once...")
    parser.add_argument("--kill-at-step", type=int, default=None, help="...at this update")
    parser.add_argument("--json", action="store_true", help="print the whole result as JSON")


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    faults = [args.faults] if args.faults else []
    if (args.kill_rank is None) != (args.kill_at_step is None):
        raise ParameterError("--kill-rank and --kill-at-step go together")
    if args.kill_rank is not None:
        faults.append(f"kill:rank={args.kill_rank},step={args.kill_at_step}")
    return config_from_args_of(TrainConfig, args, faults=";".join(faults), **cadence_fields(args))


def run(args: argparse.Namespace) -> int:
    """``labkit train``."""
    result = train(config_from_args(args))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key in SUMMARY_KEYS:
            print(f"{key:>18}: {result.get(key)}")
        if "recovery_note" in result:
            print(f"\nnote: {result['recovery_note']}")
    return 0


def sync_iterations(cfg: TrainConfig) -> int:
    return math.ceil(cfg.steps / cfg.rollout_steps)


__all__ = ["MODES", "TrainConfig", "add_arguments", "config_from_args", "run", "train"]
