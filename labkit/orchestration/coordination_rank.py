"""The rank side of ``labkit.orchestration.coordination``: rank 0 pings, rank 1 answers.

``python -m labkit.runtime.worker coordination_rank.py CONFIG_JSON`` (``{"transports", "samples", "warmup"}``) on two ranks. For each
transport in turn both ranks connect, meet at a barrier, run ``WARMUP`` untimed and ``SAMPLES``
timed round trips (rank 0 times each with ``perf_counter_ns``), meet again and disconnect.
Every ping carries its sequence number; a reply must bring it back. Rank 0 publishes the raw
round-trip times (ns) and whether both ranks saw every message, in order.
Redis and NATS URLs come from the environment (``LABKIT_REDIS_URL``,
``LABKIT_NATS_URL``).
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
import time
from collections.abc import Callable
from datetime import timedelta

import torch
import torch.distributed as dist

import labkit.runtime.dist
from labkit.runtime import publish
from labkit.services.base import CHILD_NATS_URL_ENV, CHILD_REDIS_URL_ENV

WAIT_S = 30.0  # longest wait for one reply: a lost message fails the run, it does not hang it
_PREFIX = "labkit:coordination:"


class Timer:
    """Rank 0's loop: ``total`` round trips of ``step(i)``, the last ``samples`` timed."""

    def __init__(self, samples: int, warmup: int) -> None:
        self.samples, self.warmup = samples, warmup
        self.ns: list[int] = []

    def run(self, step: Callable[[int], bool]) -> bool:
        ok = True
        for i in range(self.warmup):
            ok = step(i) and ok
        gc.collect()
        gc.disable()  # as timeit does: no collector pauses inside the timed loop
        try:
            for i in range(self.warmup, self.warmup + self.samples):
                start = time.perf_counter_ns()
                matched = step(i)
                self.ns.append(time.perf_counter_ns() - start)
                ok = matched and ok
        finally:
            gc.enable()
        return ok


def _answer_all(total: int, step: Callable[[int], bool]) -> bool:
    """Rank 1's loop: answer ``total`` pings."""
    ok = True
    gc.collect()
    gc.disable()
    try:
        for i in range(total):
            ok = step(i) and ok
    finally:
        gc.enable()
    return ok


# --------------------------------------------------------------------------------------------
# Transports: each returns (ok, ns) on rank 0 and (ok, []) on rank 1


def tcpstore(rank: int, timer: Timer) -> tuple[bool, list[int]]:
    port = torch.zeros(1, dtype=torch.int64)
    store = None
    if rank == 0:
        store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                              timeout=timedelta(seconds=WAIT_S))
        port[0] = store.port
    dist.broadcast(port, src=0)
    if rank == 1:
        store = dist.TCPStore("127.0.0.1", int(port[0]), is_master=False,
                              timeout=timedelta(seconds=WAIT_S))
    assert store is not None
    dist.barrier()
    total = timer.warmup + timer.samples

    def ping(i: int) -> bool:
        store.set(f"ping{i}", str(i))
        return store.get(f"pong{i}") == str(i).encode()

    def pong(i: int) -> bool:
        got = store.get(f"ping{i}")
        store.set(f"pong{i}", got)
        return got == str(i).encode()

    ok = timer.run(ping) if rank == 0 else _answer_all(total, pong)
    dist.barrier()  # rank 1 is done with the store before its host goes away
    return ok, timer.ns


def barrier(rank: int, timer: Timer) -> tuple[bool, list[int]]:
    dist.barrier()

    def step(_: int) -> bool:
        dist.barrier()
        return True  # a barrier carries no payload: completing is all it can confirm

    ok = timer.run(step) if rank == 0 else _answer_all(timer.warmup + timer.samples, step)
    dist.barrier()
    return ok, timer.ns


def _redis_client():  # noqa: ANN202 (redis.Redis; redis is imported lazily)
    import redis

    return redis.Redis.from_url(os.environ[CHILD_REDIS_URL_ENV], socket_timeout=WAIT_S + 5,
                                socket_connect_timeout=WAIT_S)


def redis_blpop(rank: int, timer: Timer) -> tuple[bool, list[int]]:
    client = _redis_client()
    ping_key, pong_key = _PREFIX + "ping", _PREFIX + "pong"
    if rank == 0:
        client.delete(ping_key, pong_key)
    client.ping()
    dist.barrier()

    def ping(i: int) -> bool:
        client.rpush(ping_key, i)
        got = client.blpop([pong_key], timeout=WAIT_S)
        return got is not None and got[1] == str(i).encode()

    def pong(i: int) -> bool:
        got = client.blpop([ping_key], timeout=WAIT_S)
        if got is None:
            return False
        client.rpush(pong_key, got[1])
        return got[1] == str(i).encode()

    try:
        ok = timer.run(ping) if rank == 0 else _answer_all(timer.warmup + timer.samples, pong)
        dist.barrier()
        if rank == 0:
            ok = ok and client.llen(ping_key) == 0 and client.llen(pong_key) == 0
            client.delete(ping_key, pong_key)
    finally:
        client.close()
    return ok, timer.ns


def _next_message(pubsub, deadline_s: float = WAIT_S) -> dict | None:  # noqa: ANN001
    """The next ``message`` (not a subscribe confirmation) on ``pubsub``, None on timeout."""
    deadline = time.monotonic() + deadline_s
    while (left := deadline - time.monotonic()) > 0:
        msg = pubsub.get_message(timeout=left)
        if msg is not None and msg["type"] == "message":
            return msg
    return None


def redis_pubsub(rank: int, timer: Timer) -> tuple[bool, list[int]]:
    client = _redis_client()
    pubsub = client.pubsub()
    ping_ch, pong_ch = _PREFIX + "ping", _PREFIX + "pong"
    listen, send = (pong_ch, ping_ch) if rank == 0 else (ping_ch, pong_ch)
    received = 0
    try:
        pubsub.subscribe(listen)
        confirm = pubsub.get_message(timeout=WAIT_S)  # the server confirms the subscription
        if confirm is None or confirm["type"] != "subscribe":
            raise RuntimeError(f"rank {rank}: no subscribe confirmation on {listen}: {confirm}")
        dist.barrier()  # both subscribed before the first ping

        def ping(i: int) -> bool:
            nonlocal received
            receivers = client.publish(send, i)
            msg = _next_message(pubsub)
            if msg is None:
                return False
            received += 1
            return receivers == 1 and msg["data"] == str(i).encode()

        def pong(i: int) -> bool:
            nonlocal received
            msg = _next_message(pubsub)
            if msg is None:
                return False
            received += 1
            receivers = client.publish(send, msg["data"])
            return receivers == 1 and msg["data"] == str(i).encode()

        total = timer.warmup + timer.samples
        ok = timer.run(ping) if rank == 0 else _answer_all(total, pong)
        ok = ok and received == total
        dist.barrier()
        ok = ok and pubsub.get_message(timeout=0.01) is None  # nothing extra arrived
        pubsub.unsubscribe()
    finally:
        pubsub.close()
        client.close()
    return ok, timer.ns


def nats_request(rank: int, timer: Timer) -> tuple[bool, list[int]]:
    import nats

    subject = "labkit.coordination.ping"
    total = timer.warmup + timer.samples

    async def main() -> bool:
        nc = await nats.connect(os.environ[CHILD_NATS_URL_ENV], connect_timeout=WAIT_S,
                                allow_reconnect=False)
        try:
            if rank == 1:
                sub = await nc.subscribe(subject)
                await nc.flush()  # the server has the subscription before any request
                dist.barrier()
                ok = True
                for i in range(total):
                    msg = await sub.next_msg(timeout=WAIT_S)
                    ok = ok and msg.data == str(i).encode()
                    await msg.respond(msg.data)
                await nc.flush()
                return ok
            await nc.flush()
            dist.barrier()
            ok = True

            async def ping(i: int) -> bool:
                reply = await nc.request(subject, str(i).encode(), timeout=WAIT_S)
                return reply.data == str(i).encode()

            for i in range(timer.warmup):
                ok = await ping(i) and ok
            gc.collect()
            gc.disable()
            try:
                for i in range(timer.warmup, total):
                    start = time.perf_counter_ns()
                    matched = await ping(i)
                    timer.ns.append(time.perf_counter_ns() - start)
                    ok = matched and ok
            finally:
                gc.enable()
            return ok
        finally:
            await nc.close()

    ok = asyncio.run(main())
    dist.barrier()
    return ok, timer.ns


RUNNERS = {"tcpstore": tcpstore, "barrier": barrier, "redis_blpop": redis_blpop,
           "redis_pubsub": redis_pubsub, "nats_request": nats_request}


def main() -> None:
    cfg = json.loads(sys.argv[1])  # {"transports": [...], "samples": N, "warmup": N}
    names, samples, warmup = list(cfg["transports"]), int(cfg["samples"]), int(cfg["warmup"])
    info = labkit.runtime.dist.setup("gloo")
    if info.world_size != 2:
        raise SystemExit(f"coordination needs exactly 2 ranks, got {info.world_size}")
    rank = info.rank
    found: dict[str, dict] = {}
    for name in names:
        ok, ns = RUNNERS[name](rank, Timer(samples, warmup))
        both = torch.tensor([int(ok)], dtype=torch.int64)
        dist.all_reduce(both, op=dist.ReduceOp.MIN)  # ok only when both ranks saw it right
        found[name] = {"ok": bool(both.item()), "ns": ns}
    if rank == 0:
        publish({"transports": found})
    labkit.runtime.dist.teardown()


if __name__ == "__main__":
    main()
