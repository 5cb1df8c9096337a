"""The rank side of ``labkit.locks.guide``: the field guide's all_reduce "lock", run as written.

``python -m labkit.runtime.worker guide_rank.py CONFIG_JSON`` (mode, namespace, rounds, think_s, skip_rank) under torchrun
(labkit's launcher). The only change to the guide's class: ``torch.zeros(1)`` stays on the CPU
(gloo) instead of ``.cuda()``.

- ``overlap``: every rank, ``ROUNDS`` times, "acquires", then does a read-modify-write of a
  Redis counter (``$LABKIT_REDIS_URL``, key ``NAMESPACE:counter``) taking ``THINK_S``,
  and records when it entered and left. Rank 0 publishes the intervals, how many ranks were
  inside at once, and the lost updates.
- ``skip``: rank ``SKIP_RANK`` does its write without calling ``acquire()`` and goes on with
  other work; every other rank prints (``LABKIT_LOCKS {json}``) how long ``acquire()`` blocked
  and what it raised, then re-raises.
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch
import torch.distributed as dist

from labkit.locks.guide import max_inside
from labkit.runtime import publish
from labkit.runtime.dist import collective_timeout, join_timeout, setup, teardown

MARK = "LABKIT_LOCKS"


class LockedBuffer:
    """The guide's code, verbatim but for ``.cuda()``."""

    def __init__(self, rank, world_size):  # noqa: ANN001 (as the guide wrote it)
        self.rank = rank
        self.world_size = world_size
        self.lock_tensor = torch.zeros(1)

    def acquire(self):  # noqa: ANN201
        # Simple spin lock using allreduce
        for _ in range(1000):
            self.lock_tensor[0] = 1.0
            dist.all_reduce(self.lock_tensor, op=dist.ReduceOp.SUM)
            if self.lock_tensor[0].item() == self.world_size:
                return  # All agents ready
            time.sleep(0.001)
        raise TimeoutError("Could not acquire distributed lock")


def _client():  # noqa: ANN202 (redis.Redis)
    from labkit.locks.base import connect
    from labkit.services.base import CHILD_REDIS_URL_ENV

    return connect(os.environ[CHILD_REDIS_URL_ENV])


def overlap(rank: int, world: int, ns: str, rounds: int, think_s: float) -> None:
    client, key = _client(), f"{ns}:counter"
    lock = LockedBuffer(rank, world)
    dist.barrier()
    spans = torch.zeros(rounds, 2, dtype=torch.float64)
    for r in range(rounds):
        lock.acquire()
        spans[r, 0] = time.time()
        value = int(client.get(key) or 0)  # the "protected" read-modify-write
        time.sleep(think_s)
        client.set(key, value + 1)
        spans[r, 1] = time.time()
    gathered = [torch.zeros_like(spans) for _ in range(world)]
    dist.all_gather(gathered, spans)  # tensors, not pickled objects
    if rank == 0:
        per_round = [max_inside([tuple(g[r].tolist()) for g in gathered]) for r in range(rounds)]
        everyone = [tuple(s) for g in gathered for s in g.tolist()]
        final = int(client.get(key) or 0)
        publish({"ranks": world, "rounds": rounds, "max_inside": max_inside(everyone),
                        "max_inside_per_round": per_round,
                        "rounds_all_inside": sum(n == world for n in per_round),
                        "expected": world * rounds, "final": final,
                        "lost_updates": world * rounds - final,
                        "intervals": [g.tolist() for g in gathered]})
    client.close()


def _line_up() -> None:
    """Every rank here before the experiment starts, under the long join limit rather than the
    short collective timeout being demonstrated: ranks of a busy machine leave ``setup()`` some
    time apart, and that is start-up, not the hang this run shows."""
    limit = join_timeout(collective_timeout())
    dist.monitored_barrier(timeout=limit)  # gloo's barrier that takes its own timeout


def skip(rank: int, world: int, ns: str, skip_rank: int) -> None:
    lock = LockedBuffer(rank, world)
    _line_up()
    if rank == skip_rank:  # "my write is tiny, I don't need the lock"
        client = _client()
        client.incr(f"{ns}:counter")
        print(f"{MARK} {json.dumps({'rank': rank, 'skipped': True})}", flush=True)
        time.sleep(3600)  # on to other work; ended by torchrun when the others fail
        return
    started = time.monotonic()
    try:
        lock.acquire()
    except Exception as exc:
        report = {"rank": rank, "skipped": False, "seconds": time.monotonic() - started,
                  "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        print(f"{MARK} {json.dumps(report)}", flush=True)
        raise
    report = {"rank": rank, "skipped": False, "seconds": time.monotonic() - started,
              "error": None}
    print(f"{MARK} {json.dumps(report)}", flush=True)


def main(argv: list[str]) -> None:
    cfg = json.loads(argv[0])  # what labkit.locks.guide._config wrote
    mode, ns, rounds = cfg["mode"], cfg["namespace"], int(cfg["rounds"])
    think_s, skip_rank = float(cfg["think_s"]), int(cfg["skip_rank"])
    info = setup()
    try:
        if mode == "overlap":
            overlap(info.rank, info.world_size, ns, rounds, think_s)
        else:
            skip(info.rank, info.world_size, ns, skip_rank)
    finally:
        if mode == "overlap":
            teardown()


if __name__ == "__main__":
    main(sys.argv[1:])
