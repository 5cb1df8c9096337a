"""The rank side of ``labkit.capstone.run``: ``python -m labkit.runtime.worker run_rank.py CONFIG_JSON``.

Roles follow the simulated node, not the rank number, so they stay put when torchrun restarts
the group: slot ``node * ranks_per_node + local_rank``; slot 0 (node 0, next to the rendezvous
store) is the learner, every other slot an actor whose agent id is its slot.

- The learner holds a fenced lease in Redis (``labkit.locks.FencedLock``): one learner at a
  time, and every policy it publishes is written with its fencing token, so a learner that lost
  its lease (paused past the TTL, a zombie of an old group) cannot overwrite a newer one's.
- It checkpoints model, optimizer, progress and policy version on its cadence (every
  ``checkpoint_every_updates`` updates, or ``checkpoint_every_s`` seconds), and acks the stream entries it trained on only after the checkpoint that includes
  them is on disk. A learner that dies leaves them pending; the next one resumes from the
  checkpoint and reclaims them (XAUTOCLAIM), so the updates it lost are redone on the same data.
- Version numbers never repeat: a resumed learner continues from the highest version any
  learner published, so rollouts made by a lost policy count as stale, never as "from the
  future", and an actor never mistakes new weights for ones it has.
- An actor takes its rollout sequence number from Redis (INCR) before pushing, so a restarted
  actor never reuses one (the learner de-duplicates on (agent, seq)). Counters that many ranks
  add to are single atomic commands (INCR, HINCRBY): no lock needed.
- Every rank serves Prometheus metrics on its slot's fixed port, so the same scrape target
  comes back after a restart.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from labkit.buffers.frame import Experience, encode
from labkit.buffers.redis_stream import StreamBuffer
from labkit.capstone.config import LOG_FILE, PIDS_DIR, PORTS_ENV, CapstoneConfig, redis_keys
from labkit.errors import LabkitError
from labkit.locks.fencing import FencedLock, FencedStore
from labkit.observability.exporter import RankMetrics
from labkit.reliability.cadence import cadence_of
from labkit.reliability.checkpoint import CheckpointManager, model_fingerprint, params_sha256
from labkit.reliability.rng import agent_seed
from labkit.rl.agents import ActorCritic, EnvPool, Rollout, collect, evaluate, seed_everything
from labkit.rl.learner import actor_critic_loss, apply_update
from labkit.rl.progress import Progress, progress_from_state, progress_state
from labkit.runtime.dist import RankInfo, setup, teardown
from labkit.runtime.publish import RUN_DIR_ENV, publish
from labkit.runtime.runlog import append_record, read_records
from labkit.services.base import CHILD_REDIS_URL_ENV
from labkit.training.actor_learner import HEARTBEAT_EVERY_S, POLL_S, PolicyStore, wait_for_turn


class FencedPolicyStore(PolicyStore):
    """The async trainer's Redis keys, with policy writes fenced by the learner's lease token."""

    def __init__(self, url: str, namespace: str, heartbeat_ttl_s: float) -> None:
        super().__init__(url, namespace, heartbeat_ttl_s)
        self.fenced = FencedStore(self.redis)
        self.token: int | None = None

    def publish(self, model: ActorCritic, version: int) -> None:
        if self.token is None:
            raise LabkitError("the learner publishes only while it holds the lease")
        tensors = {k: v.detach().cpu() for k, v in model.state_dict().items()}
        frame = encode(Experience(-1, version, version, time.time(), tensors))
        self.fenced.write_many(f"{self.ns}:policy-fence",
                               {f"{self.ns}:policy": frame, f"{self.ns}:version": version},
                               self.token)

    def published_version(self) -> int:
        return int(self.redis.get(f"{self.ns}:version") or -1)


def main(argv: list[str]) -> None:
    cfg = CapstoneConfig.from_json(argv[0])
    torch.set_num_threads(1)
    info = setup()
    node = info.node
    slot = node * cfg.ranks_per_node + info.local_rank
    keys = redis_keys(info.run_id)
    url = os.environ[CHILD_REDIS_URL_ENV]
    store = FencedPolicyStore(url, keys.namespace, cfg.learner_timeout_s)
    start = int(store.redis.incr(keys.starts(slot)))  # this slot's incarnation, 1 = first
    metrics = RankMetrics(slot, info.world_size)
    metrics.set_restarts(start - 1)
    ports = [int(p) for p in os.environ[PORTS_ENV].split(",")]
    metrics.serve(ports[slot])
    run_dir = Path(os.environ[RUN_DIR_ENV])
    pids = run_dir / PIDS_DIR
    pids.mkdir(exist_ok=True)
    (pids / f"slot{slot}.json").write_text(json.dumps({"pid": os.getpid(), "start": start,
                                                       "node": node, "rank": info.rank}))
    try:
        if slot == 0:
            _learn(cfg, info, store, metrics, keys, url)
        else:
            _act(cfg, info, store, metrics, keys, url, slot, start)
    finally:
        metrics.close()
        teardown()


def _learn(cfg: CapstoneConfig, info: RankInfo, store: FencedPolicyStore, metrics: RankMetrics,
           keys: Any, url: str) -> None:
    h = cfg.hyper
    log = Path(cfg.workdir) / LOG_FILE
    generation = int(store.redis.incr(keys.generation))
    asked = time.monotonic()
    lease = FencedLock(store.redis, keys.lease, ttl_s=cfg.lease_ttl_s, wait_s=cfg.lease_ttl_s * 3)
    store.token = lease.acquire()
    lease_wait = time.monotonic() - asked
    metrics.observe_lock_wait(lease_wait, "learner-lease")

    seed_everything(cfg.seed)
    model = ActorCritic(h.hidden).to(cfg.learner_device or info.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=h.lr)
    checkpoints = CheckpointManager(Path(cfg.workdir) / "checkpoints", rank=0, world_size=1,
                                    keep=3, fingerprint=model_fingerprint(model))
    began = time.perf_counter()
    resumed = checkpoints.latest()
    progress, updates, version = Progress(), 0, 0
    if resumed is not None:
        metrics.observe_checkpoint(time.perf_counter() - began, "load")
        model.load_state_dict(resumed.state["model"])
        optimizer.load_state_dict(resumed.state["optimizer"])
        progress = progress_from_state(resumed.state["progress"])
        updates = resumed.step
    if generation > 1:  # never reuse a version: the lost policies' numbers stay theirs
        version = max(int(resumed.state["version"]) if resumed else 0,
                      store.published_version()) + 1
    actors = list(range(1, cfg.world_size))
    buffer = StreamBuffer(url, agent_id=-1, agents=actors, namespace=keys.namespace,
                          consumer="learner")
    replayed = buffer.reclaim(0)  # what a dead learner pulled but no checkpoint covered
    store.publish(model, version)
    store.heartbeat(force=True)
    # What the previous learner had done past the checkpoint we resumed from is lost work.
    reached = max((r["update"] for r in read_records(log)
                   if "update" in r and r["generation"] == generation - 1), default=updates)
    append_record(log, {"event": "start", "t": time.time(), "generation": generation,
                        "rank": info.rank, "world": info.world_size, "from_update": updates,
                        "reached": reached, "lost_updates": max(0, reached - updates),
                        "version": version, "lease_wait_s": round(lease_wait, 4),
                        "replayed": replayed})
    dist.barrier()  # the actors start once this learner's first version is there

    batch: list[Rollout] = []
    unacked: list[Experience] = []  # trained on, not yet covered by a checkpoint
    last_data = last_renew = last_save = time.monotonic()
    cadence = cadence_of(cfg)
    while progress.env_steps < cfg.steps:
        if time.monotonic() - last_renew >= HEARTBEAT_EVERY_S:
            lease.lock.reacquire()  # LockNotOwnedError if our lease ran out: stop, loudly
            store.heartbeat(force=True)
            last_renew = time.monotonic()
        replays_before = buffer.stats().redelivered
        experiences = buffer.pull(cfg.batch_rollouts - len(batch))
        if experiences:
            last_data = time.monotonic()
            unacked += experiences
            arrived = [Rollout.from_experience(e) for e in experiences]
            replays = buffer.stats().redelivered - replays_before  # a pull returns them first
            store.consumed(arrived[replays:])  # credit: each rollout frees its actor once
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
        lags = [version - r.policy_version for r in rollouts]
        loss, loss_info = actor_critic_loss(model, rollouts, version, cfg.staleness, h)
        if loss is not None:
            apply_update(model, optimizer, loss, h.max_grad_norm)
            version += 1
            store.publish(model, version)
        returns = [x for r in rollouts for x in r.episode_returns.tolist()]
        steps = sum(r.steps for r in rollouts)
        progress.record(returns, steps, updated=loss is not None)
        updates += 1
        metrics.add_env_steps(steps)
        metrics.add_update()
        metrics.set_policy_lag(sum(lags) / len(lags))
        metrics.observe_buffer(_backlog(store, keys, actors), items=len(rollouts))
        append_record(log, {"t": now, "update": updates, "version": version,
                            "generation": generation, "env_steps": progress.env_steps,
                            "mean_return": progress.mean_return, "lags": lags,
                            "ages": [round(now - r.timestamp, 4) for r in rollouts],
                            "dropped": loss_info.rollouts - loss_info.used})
        if cadence.due(updates, last_save):
            _checkpoint(checkpoints, model, optimizer, progress, updates, version, metrics,
                        generation, log)
            last_save = time.monotonic()
            buffer.ack(unacked)  # only now: a crash before this replays them
            unacked = []
    _checkpoint(checkpoints, model, optimizer, progress, updates, version, metrics, generation,
                log)
    buffer.ack(unacked)
    store.stop()
    pushed = store.redis.hgetall(keys.collected)
    starts = {k.decode().rsplit(":", 1)[-1]: int(store.redis.get(k) or 0)
              for k in store.redis.scan_iter(match=keys.starts("*"))}
    stats = buffer.stats()
    result = {
        "updates": updates, "version": version, "generation": generation,
        "env_steps_trained": progress.env_steps,
        "env_steps_collected": sum(int(v) for v in pushed.values()),
        "episodes": progress.episodes,
        "final_mean_return": (None if progress.mean_return is None
                              else round(progress.mean_return, 2)),
        "eval_return": evaluate(model),
        "steps_to_solved": progress.solved_steps,
        "starts": {int(k): v for k, v in starts.items()},
        "duplicates_skipped": stats.duplicates,
        "params_sha256": params_sha256(model),
    }
    buffer.close()
    lease.release()
    publish(result, any_rank=True)
    dist.barrier()  # the actors have seen the stop flag; leave together


def _backlog(store: PolicyStore, keys: Any, actors: list[int]) -> int:
    """Rollouts pushed and not yet taken by the learner, over all actors (one round trip)."""
    pipe = store.redis.pipeline(transaction=False)
    for slot in actors:
        pipe.get(keys.seq(slot))
    pipe.hgetall(f"{store.ns}:consumed")
    *pushed, consumed = pipe.execute()
    taken = {int(k): int(v) for k, v in consumed.items()}
    return sum(max(0, int(p or 0) - taken.get(s, 0)) for s, p in zip(actors, pushed, strict=True))


def _checkpoint(checkpoints: CheckpointManager, model: ActorCritic, optimizer: Any,
                progress: Progress, updates: int, version: int, metrics: RankMetrics,
                generation: int, log: Path) -> None:
    began = time.perf_counter()
    checkpoints.save(updates, {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                               "progress": progress_state(progress), "version": version},
                     {"version": version, "generation": generation})
    seconds = time.perf_counter() - began
    metrics.observe_checkpoint(seconds, "save")
    append_record(log, {"event": "checkpoint", "t": time.time(), "at_update": updates,
                        "version": version, "generation": generation, "seconds": round(seconds, 4)})


def _act(cfg: CapstoneConfig, info: RankInfo, store: PolicyStore, metrics: RankMetrics,
         keys: Any, url: str, slot: int, start: int) -> None:
    h = cfg.hyper
    model = ActorCritic(h.hidden)  # actors act on CPU; only the learner needs a device
    seed = agent_seed(cfg.seed + 7919 * (start - 1), slot, h.envs_per_agent)  # new episodes
    pool = EnvPool(h.envs_per_agent, seed)
    generator = torch.Generator().manual_seed(seed)
    buffer = StreamBuffer(url, agent_id=slot, namespace=keys.namespace)
    dist.barrier()
    have = -1
    pushed = int(store.redis.get(keys.seq(slot)) or 0)
    who = f"actor {slot} (rank {info.rank})"
    while turn := wait_for_turn(store, slot, pushed, cfg.max_inflight, who, cfg.learner_timeout_s):
        newest, consumed = turn
        if newest != have:
            have = store.fetch(model)
        rollout = collect(model, pool, h.rollout_len, generator=generator, policy_version=have,
                          agent_id=slot, seq=0)
        rollout.seq = int(store.redis.incr(keys.seq(slot))) - 1  # before the push: never reused
        buffer.push([rollout.to_experience()])
        store.redis.hincrby(keys.collected, str(slot), rollout.steps)
        pushed = rollout.seq + 1
        metrics.add_env_steps(rollout.steps)
        metrics.observe_buffer(pushed - consumed, items=1, buffer="actor")
    buffer.close()
    pool.close()
    dist.barrier()


if __name__ == "__main__":
    main(sys.argv[1:])
