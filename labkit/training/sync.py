"""Synchronous training on every rank: collect a rollout, DDP averages the gradients, step.

The guide's MPI style done right: one launcher (torchrun), DDP with
``gradient_as_bucket_view=True``, gradient clipping after ``backward`` (DDP has already
averaged the gradients by then, so every rank clips the same numbers), no manual sync.
A straggler holds every rank back: the gradient all-reduce waits for its rollout.

With ``ckpt_dir`` every rank checkpoints everything that decides what comes next (model,
optimizer, environments, every random generator, progress) on rank 0's clock, and a job that
torchrun restarts resumes from the newest verified checkpoint: the final parameters equal an
uninterrupted run's, bit for bit.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from labkit.errors import ParameterError
from labkit.reliability.cadence import cadence_of
from labkit.reliability.checkpoint import CheckpointManager, model_fingerprint
from labkit.reliability.faults import maybe_inject, parse_faults, save_hook
from labkit.reliability.rng import agent_seed, capture_rng, restore_rng
from labkit.rl.agents import ActorCritic, EnvPool, collect, seed_everything
from labkit.rl.hyper import Hyper
from labkit.rl.learner import actor_critic_loss, apply_update
from labkit.rl.progress import Progress, progress_from_state, progress_state
from labkit.rl.staleness import StalenessConfig
from labkit.runtime.dist import RankInfo
from labkit.training.result import summarize
from labkit.training.run import TrainConfig, sync_iterations

MIN_EPISODE_STEPS = 8  # no CartPole episode is shorter: bounds the episodes one rollout ends
REACHED_FILE = "reached.json"  # rank 0's last finished update: what a restart has to redo


PIECES = ("model", "optimizer", "envs", "generator", "rng")
"""What a sync checkpoint restores, each of which decides what the next update does."""


@dataclass
class SyncAgent:
    """One sync rank's learning state: the policy, its optimizer, its environments and the
    generator its actions are drawn from. ``capture`` is what a checkpoint holds (tensors,
    numbers and strings: no pickle), ``restore`` puts it back, and ``step_locally`` continues it
    in this process (no group): lesson 10 uses it to show what each piece is for."""

    hyper: Hyper
    model: ActorCritic
    optimizer: torch.optim.Optimizer
    pool: EnvPool
    generator: torch.Generator

    @classmethod
    def fresh(cls, hyper: Hyper, seed: int, rank: int = 0, delay_factor: float = 1.0,
              device: str = "cpu") -> SyncAgent:
        """The agent ``rank`` starts as (the model's initial weights come from torch's global
        RNG: seed it first, as ``run_sync`` does)."""
        model = ActorCritic(hyper.hidden).to(device)
        return cls(hyper, model, torch.optim.Adam(model.parameters(), lr=hyper.lr),
                   EnvPool(hyper.envs_per_agent, agent_seed(seed, rank, hyper.envs_per_agent),
                           delay_factor),
                   torch.Generator().manual_seed(agent_seed(seed, rank, 1)))

    def capture(self, progress: Progress) -> dict[str, Any]:
        """Everything the next step depends on, plus the learning curve so far."""
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "envs": self.pool.state_dict(), "generator": self.generator.get_state(),
                "rng": capture_rng(), "progress": progress_state(progress)}

    def restore(self, state: dict[str, Any], leave_out: Iterable[str] = ()) -> None:
        """Back to ``state`` (what ``capture`` made), except the pieces in ``leave_out``."""
        skip = set(leave_out)
        if skip - set(PIECES):
            raise ParameterError(f"leave_out takes pieces of {PIECES}, got {sorted(skip)}")
        if "model" not in skip:
            self.model.load_state_dict(state["model"])
        if "optimizer" not in skip:
            self.optimizer.load_state_dict(state["optimizer"])
        if "envs" not in skip:
            self.pool.load_state_dict(state["envs"])
        if "generator" not in skip:
            self.generator.set_state(state["generator"])
        if "rng" not in skip:
            restore_rng(state["rng"])

    def step_locally(self, start: int, updates: int) -> None:
        """``updates`` updates from policy version ``start``, in this process alone: the same
        arithmetic one sync rank does, without the gradient all-reduce."""
        for version in range(start, start + updates):
            rollout = collect(self.model, self.pool, self.hyper.rollout_len,
                              generator=self.generator, policy_version=version)
            loss, _ = actor_critic_loss(self.model, [rollout], version, StalenessConfig(),
                                        self.hyper)
            apply_update(self.model, self.optimizer, loss, self.hyper.max_grad_norm)


def run_sync(cfg: TrainConfig, info: RankInfo) -> dict[str, Any]:
    """This rank's part of a synchronous run; every rank returns the same summary."""
    h = cfg.hyper
    seed_everything(cfg.seed)  # the same initial weights everywhere (DDP broadcasts them too)
    slow = info.rank == cfg.straggler_rank
    agent = SyncAgent.fresh(h, cfg.seed, info.rank, cfg.straggler_factor if slow else 1.0,
                            info.device)
    model, optimizer, pool, generator = agent.model, agent.optimizer, agent.pool, agent.generator
    ddp = DistributedDataParallel(
        model, device_ids=None if info.device == "cpu" else [torch.device(info.device)],
        gradient_as_bucket_view=True,
    )
    slots = h.envs_per_agent * h.rollout_len // MIN_EPISODE_STEPS + 1
    fresh, faults = StalenessConfig(), parse_faults(cfg.faults)
    checkpoints = resumed = None
    if cfg.ckpt_dir:
        os.makedirs(cfg.ckpt_dir, exist_ok=True)
        checkpoints = CheckpointManager(
            cfg.ckpt_dir, rank=info.rank, world_size=info.world_size, keep=cfg.keep_checkpoints,
            fingerprint=model_fingerprint(model),
            before_replace=save_hook(faults, rank=info.rank, node=info.node_rank))
        resumed = checkpoints.latest()
    start, progress = 0, None
    if resumed is not None:
        agent.restore(resumed.state)
        start, progress = resumed.step, progress_from_state(resumed.state["progress"])
    reached = _reached(cfg, start)
    dist.barrier()
    progress = progress or Progress()
    cadence, last_save = cadence_of(cfg), time.monotonic()
    for version in range(start, sync_iterations(cfg)):
        maybe_inject(faults, rank=info.rank, node=info.node_rank, step=version)
        rollout = collect(model, pool, h.rollout_len, generator=generator,
                          policy_version=version, agent_id=info.rank, seq=version)
        loss, _ = actor_critic_loss(ddp, [rollout], version, fresh, h)
        apply_update(model, optimizer, loss, h.max_grad_norm)  # DDP averages in backward()
        # Everyone's finished episodes in rank order, and rank 0's "checkpoint now": one small
        # all-reduce of a table, so every rank decides the same thing at the same step.
        table = torch.zeros(info.world_size, slots + 2, device=info.device)
        ended = rollout.episode_returns
        table[info.rank, 0] = len(ended)
        table[info.rank, 1:1 + len(ended)] = ended.to(info.device)
        due = checkpoints is not None and cadence.due(version + 1, last_save)
        table[info.rank, -1] = float(info.rank == 0 and due)
        dist.all_reduce(table)
        rows = table.cpu().tolist()
        progress.record([x for row in rows for x in row[1:1 + int(row[0])]], cfg.rollout_steps)
        if checkpoints is not None:
            if rows[0][-1] > 0:
                checkpoints.save(version + 1, agent.capture(progress),
                                 {"env_steps": progress.env_steps})
                last_save = time.monotonic()
            if info.rank == 0:  # a progress marker, not state: replaced, not fsynced, per update
                marker = checkpoints.directory / REACHED_FILE
                marker.with_suffix(".tmp").write_text(json.dumps({"step": version + 1}))
                os.replace(marker.with_suffix(".tmp"), marker)
        if cfg.stop_when_solved and progress.solved:
            break  # every rank saw the same table: all stop at the same step
    delayed = torch.tensor([pool.delayed_s], device=info.device)
    dist.all_reduce(delayed)
    pool.close()
    restarts = info.restart_count
    return summarize(
        cfg, progress, model, env_steps=progress.env_steps, straggler_delay_s=float(delayed),
        lag=None, restarts=restarts, resumed_from_step=start if resumed else None,
        lost_steps=(reached - start) * cfg.rollout_steps,  # redone since the last checkpoint
        skipped_checkpoints=resumed.skipped if resumed else [],
    )


def _reached(cfg: TrainConfig, start: int) -> int:
    """The last update the previous attempt finished (``start`` when there was none)."""
    path = os.path.join(cfg.ckpt_dir, REACHED_FILE) if cfg.ckpt_dir else ""
    try:
        with open(path) as file:
            return max(start, int(json.load(file)["step"]))
    except (OSError, ValueError, KeyError, TypeError):
        return start
