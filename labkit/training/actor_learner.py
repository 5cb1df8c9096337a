"""Asynchronous training: actor ranks push rollouts, the learner (rank 0) trains on arrivals.

Everything between them goes through Redis, as in the guide's actor model: rollouts through an
experience buffer (``labkit.buffers``), policy weights as a versioned frame under one key, a
learner heartbeat with a TTL, a stop flag, and a per-actor count of consumed rollouts that keeps
each actor at most ``max_inflight`` rollouts ahead (flow control, so nothing piles up unseen).
The process group is only used to start together and to add up the actors' counts at the end.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

import redis
import torch
import torch.distributed as dist

from labkit.buffers.frame import Experience, decode, encode
from labkit.buffers.kinds import open_buffer
from labkit.errors import LabkitError, ServiceError
from labkit.reliability.faults import maybe_inject, parse_faults
from labkit.reliability.rng import agent_seed
from labkit.rl.agents import ActorCritic, EnvPool, Rollout, collect, seed_everything
from labkit.rl.learner import actor_critic_loss, apply_update
from labkit.rl.progress import Progress
from labkit.runtime.dist import RankInfo
from labkit.services.base import CHILD_REDIS_URL_ENV, redact
from labkit.training.result import lag_stats, summarize
from labkit.training.run import TrainConfig

HEARTBEAT_EVERY_S = 0.25
POLL_S = 0.002


class LearnerLostError(LabkitError):
    """An actor stopped because the learner's heartbeat expired."""


class PolicyStore:
    """The Redis keys the learner and its actors share, under one namespace per run."""

    def __init__(self, url: str, namespace: str, heartbeat_ttl_s: float) -> None:
        self.redis = redis.Redis.from_url(url, socket_timeout=30)
        self.ns = namespace
        self.ttl_ms = max(1, int(heartbeat_ttl_s * 1000))
        self._last_beat = 0.0

    def publish(self, model: ActorCritic, version: int) -> None:
        """The learner's new weights, as one frame (no pickle), and their version."""
        tensors = {k: v.detach().cpu() for k, v in model.state_dict().items()}
        frame = encode(Experience(-1, version, version, time.time(), tensors))
        pipe = self.redis.pipeline(transaction=True)
        pipe.set(f"{self.ns}:policy", frame).set(f"{self.ns}:version", version)
        pipe.execute()

    def fetch(self, model: ActorCritic) -> int:
        """Loads the newest weights into ``model``; returns their version."""
        exp = decode(self.redis.get(f"{self.ns}:policy"))
        model.load_state_dict(exp.tensors)
        return exp.policy_version

    def heartbeat(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last_beat >= HEARTBEAT_EVERY_S:
            self.redis.set(f"{self.ns}:learner", "alive", px=self.ttl_ms)
            self._last_beat = now

    def consumed(self, rollouts: list[Rollout]) -> None:
        pipe = self.redis.pipeline(transaction=False)
        for r in rollouts:
            pipe.hincrby(f"{self.ns}:consumed", str(r.agent_id), 1)
        pipe.execute()

    def poll(self, agent_id: int) -> tuple[bool, bool, int, int]:
        """(stop, learner alive, newest version, rollouts of this actor consumed): one trip."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.exists(f"{self.ns}:stop").exists(f"{self.ns}:learner").get(f"{self.ns}:version")
        pipe.hget(f"{self.ns}:consumed", str(agent_id))
        stop, alive, version, consumed = pipe.execute()
        return bool(stop), bool(alive), int(version or 0), int(consumed or 0)

    def stop(self) -> None:
        self.redis.set(f"{self.ns}:stop", 1)

    def clear(self) -> None:
        """Deletes every key of this run (buffer streams included)."""
        keys = list(self.redis.scan_iter(match=f"{self.ns}:*", count=1000))
        if keys:
            self.redis.delete(*keys)


def wait_for_turn(store: PolicyStore, agent: int, pushed: int, max_inflight: int, who: str,
                  timeout_s: float, learner: str = "the learner") -> tuple[int, int] | None:
    """Blocks until actor ``agent`` may push another rollout (fewer than ``max_inflight`` of its
    ``pushed`` not yet taken by the learner). Returns (newest policy version, rollouts taken),
    or None once the learner said stop; raises LearnerLostError when its heartbeat expired."""
    while True:
        stop, alive, newest, consumed = store.poll(agent)
        if stop:
            return None
        if not alive:
            raise LearnerLostError(f"{who}: {learner} sent no heartbeat for {timeout_s:g} s; "
                                   "stopping instead of acting for nobody")
        if pushed - consumed < max_inflight:
            return newest, consumed
        time.sleep(POLL_S)  # the learner has not caught up with this actor yet


def run_async(cfg: TrainConfig, info: RankInfo) -> dict[str, Any] | None:
    """Rank 0 learns, ranks 1..agents act (agent ``rank - 1``)."""
    url = os.environ.get(CHILD_REDIS_URL_ENV)
    if not url:
        raise LabkitError(f"async training needs ${CHILD_REDIS_URL_ENV} (labkit.training.run sets it)")
    namespace = f"train:{info.run_id}"
    store = PolicyStore(url, namespace, cfg.learner_timeout_s)
    role = "the learner" if info.rank == 0 else f"actor {info.rank - 1}"
    try:
        if info.rank == 0:
            return _learn(cfg, info, store, url)
        _act(cfg, info, store, url, agent=info.rank - 1)
        return None
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
        raise ServiceError(
            f"{role} (rank {info.rank}) lost Redis at {redact(url)} mid-run: {exc}. The run "
            "stops here; every policy version it published was complete (one MULTI each), so "
            "a new run can start from a checkpoint or from scratch.") from None
    finally:
        if info.rank == 0:  # this run's keys go with it (a shared $REDIS_URL stays tidy)
            with contextlib.suppress(redis.exceptions.RedisError):
                store.clear()


def _learn(cfg: TrainConfig, info: RankInfo, store: PolicyStore, url: str) -> dict[str, Any]:
    h = cfg.hyper
    seed_everything(cfg.seed)
    model = ActorCritic(h.hidden).to(info.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=h.lr)
    buffer = open_buffer(cfg.buffer, url, agent_id=-1, agents=list(range(cfg.agents)),
                         namespace=store.ns)
    version, faults = 0, parse_faults(cfg.faults)
    store.publish(model, version)
    store.heartbeat(force=True)
    dist.barrier()  # actors start once version 0 is there
    progress, lags, ages = Progress(), [], []
    last_data, dropped, batch = time.monotonic(), 0, []
    while progress.env_steps < cfg.steps and not (cfg.stop_when_solved and progress.solved):
        maybe_inject(faults, rank=info.rank, node=info.node_rank, step=version)
        store.heartbeat()
        experiences = buffer.pull(cfg.batch_rollouts - len(batch))
        if experiences:
            last_data = time.monotonic()
            buffer.ack(experiences)
            arrived = [Rollout.from_experience(e) for e in experiences]
            store.consumed(arrived)  # frees the actors' flow-control credit
            batch += arrived
        if len(batch) < cfg.batch_rollouts:
            if time.monotonic() - last_data > cfg.learner_timeout_s:
                raise LabkitError(f"no rollout arrived for {cfg.learner_timeout_s:g} s: are the "
                                  "actors alive?")
            if not experiences:
                time.sleep(POLL_S)
            continue
        rollouts, batch = batch, []
        now = time.time()
        lags += [version - r.policy_version for r in rollouts]
        ages += [now - r.timestamp for r in rollouts]
        loss, loss_info = actor_critic_loss(model, rollouts, version, cfg.staleness, h)
        if loss is not None:
            apply_update(model, optimizer, loss, h.max_grad_norm)
            version += 1
            store.publish(model, version)
        dropped += loss_info.rollouts - loss_info.used
        returns = [x for r in rollouts for x in r.episode_returns.tolist()]
        progress.record(returns, sum(r.steps for r in rollouts), updated=loss is not None)
    seconds = progress.seconds
    store.stop()
    buffer.close()
    totals = torch.zeros(3, device=info.device)
    dist.all_reduce(totals)  # the actors' env steps, straggler delay, rollouts pushed
    result = summarize(cfg, progress, model, env_steps=int(totals[0]),
                       straggler_delay_s=float(totals[1]), lag=lag_stats(lags, ages),
                       rollouts_pushed=int(totals[2]), rollouts_dropped=dropped)
    result["seconds"] = round(seconds, 3)  # until the learner stopped, not the final sums
    result["env_steps_per_s"] = round(int(totals[0]) / seconds, 1)
    result["updates_per_s"] = round(progress.updates / seconds, 2)
    return result


def _act(cfg: TrainConfig, info: RankInfo, store: PolicyStore, url: str, agent: int) -> None:
    h = cfg.hyper
    model = ActorCritic(h.hidden)  # actors act on CPU; only the learner needs a device
    factor = cfg.straggler_factor if agent == cfg.straggler_rank else 1.0
    pool = EnvPool(h.envs_per_agent, agent_seed(cfg.seed, agent, h.envs_per_agent), factor)
    generator = torch.Generator().manual_seed(agent_seed(cfg.seed, agent, 1))
    buffer = open_buffer(cfg.buffer, url, agent_id=agent, namespace=store.ns)
    dist.barrier()
    have, pushed, steps = -1, 0, 0
    who = f"actor {agent} (rank {info.rank})"
    while (turn := wait_for_turn(store, agent, pushed, cfg.max_inflight, who,
                                 cfg.learner_timeout_s, learner="the learner (rank 0)")):
        newest, _ = turn
        if newest != have:
            have = store.fetch(model)
        rollout = collect(model, pool, h.rollout_len, generator=generator, policy_version=have,
                          agent_id=agent, seq=pushed)
        buffer.push([rollout.to_experience()])
        pushed, steps = pushed + 1, steps + rollout.steps
    buffer.close()
    pool.close()
    dist.all_reduce(torch.tensor([float(steps), pool.delayed_s, float(pushed)], device=info.device))
