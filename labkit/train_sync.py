"""Synchronous training on every rank: collect a rollout, DDP averages the gradients, step.

The guide's MPI style done right: one launcher (torchrun), DDP with
``gradient_as_bucket_view=True``, gradient clipping after ``backward`` (DDP has already
averaged the gradients by then, so every rank clips the same numbers), no manual sync.
A straggler holds every rank back: the gradient all-reduce waits for its rollout.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from labkit.agents import ActorCritic, EnvPool, collect, seed_everything
from labkit.dist import RankInfo
from labkit.learner import actor_critic_loss
from labkit.progress import Progress
from labkit.staleness import StalenessConfig
from labkit.train import TrainConfig, sync_iterations
from labkit.train_result import agent_seed, summarize

MIN_EPISODE_STEPS = 8  # no CartPole episode is shorter: bounds the episodes one rollout ends


def run_sync(cfg: TrainConfig, info: RankInfo) -> dict[str, Any]:
    """This rank's part of a synchronous run; every rank returns the same summary."""
    h = cfg.hyper
    seed_everything(cfg.seed)  # the same initial weights everywhere (DDP broadcasts them too)
    model = ActorCritic(h.hidden).to(info.device)
    ddp = DistributedDataParallel(
        model, device_ids=None if info.device == "cpu" else [torch.device(info.device)],
        gradient_as_bucket_view=True,
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=h.lr)
    slow = info.rank == cfg.straggler_rank
    pool = EnvPool(h.envs_per_agent, agent_seed(cfg.seed, info.rank, h.envs_per_agent),
                   cfg.straggler_factor if slow else 1.0)
    generator = torch.Generator().manual_seed(agent_seed(cfg.seed, info.rank, 1))
    slots = h.envs_per_agent * h.rollout_len // MIN_EPISODE_STEPS + 1
    fresh = StalenessConfig()
    dist.barrier()
    progress = Progress()
    for version in range(sync_iterations(cfg)):
        rollout = collect(model, pool, h.rollout_len, generator=generator,
                          policy_version=version, agent_id=info.rank, seq=version)
        loss, _ = actor_critic_loss(ddp, [rollout], version, fresh, h)
        optimizer.zero_grad()
        loss.backward()  # DDP all-reduces (averages) the gradients here
        torch.nn.utils.clip_grad_norm_(model.parameters(), h.max_grad_norm)
        optimizer.step()
        # Everyone's finished episodes, in rank order: one small all-reduce of a table.
        table = torch.zeros(info.world_size, slots + 1, device=info.device)
        ended = rollout.episode_returns
        table[info.rank, 0] = len(ended)
        table[info.rank, 1:1 + len(ended)] = ended.to(info.device)
        dist.all_reduce(table)
        rows = table.cpu().tolist()
        progress.record([x for row in rows for x in row[1:1 + int(row[0])]], cfg.rollout_steps)
        if cfg.stop_when_solved and progress.solved:
            break  # every rank saw the same table: all stop at the same step
    delayed = torch.tensor([pool.delayed_s], device=info.device)
    dist.all_reduce(delayed)
    pool.close()
    return summarize(cfg, progress, model, env_steps=progress.env_steps,
                     straggler_delay_s=float(delayed), lag=None)
