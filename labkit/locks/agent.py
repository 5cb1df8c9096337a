"""One agent process of a lock experiment: ``python -m labkit.locks.agent SPEC_JSON``.

The Redis URL comes from ``$LABKIT_REDIS_URL`` (not argv: ``ps`` shows argv). The agent
connects, says ready (RPUSH ``<ns>:ready``), waits for the start signal (BLPOP ``<ns>:go``) so
all agents start together, runs its role and prints one JSON line: the role's counts, or
``{"ok": false, "error": ...}`` (exit 1) when something unexpected failed. Nothing is pickled.

Roles: ``race`` (``increments`` read-modify-writes of one counter with ``method``),
``stale_slow`` / ``stale_fast`` (a holder paused past its TTL vs the next holder), ``deadlock``
(take ``locks`` in the given order).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from redis.exceptions import LockError

from labkit.locks.base import LockTimeoutError, StaleTokenError, connect
from labkit.locks.fencing import FencedLock, FencedStore
from labkit.locks.lockfree import AtomicAdd, watch_update
from labkit.services.base import CHILD_REDIS_URL_ENV

Counts = dict[str, int]
Step = Callable[[Counts, float], None]
POLL_S = 0.002  # how often a blocked lock acquire retries SET NX


def _think(seconds: float) -> None:
    if seconds > 0:
        time.sleep(seconds)


def increment_step(method: str, client: Any, spec: dict[str, Any]) -> Step:
    """One increment of ``<ns>:counter`` done the ``method`` way; updates ``counts``. The
    second argument is a pause (seconds) a lock holder takes inside its critical section on
    its first try, as a GC pause would; only the lock methods take it."""
    ns, think = spec["ns"], float(spec["think_s"])
    ttl, wait = float(spec["ttl_s"]), float(spec["wait_s"])
    key, lock_name = f"{ns}:counter", f"{ns}:lock"

    def unlocked(counts: Counts, pause_s: float = 0.0) -> None:  # the race: GET, work, SET
        value = int(client.get(key) or 0)
        _think(think + pause_s)
        client.set(key, value + 1)

    lock = client.lock(lock_name, timeout=ttl, sleep=POLL_S, blocking_timeout=wait,
                       thread_local=False)

    def redis_lock(counts: Counts, pause_s: float) -> None:
        if not lock.acquire():
            raise LockTimeoutError(f"lock {lock_name!r} not acquired within {wait:g} s")
        try:
            unlocked(counts, pause_s)
        finally:
            try:
                lock.release()
            except LockError:  # LockNotOwnedError: the TTL ran out while we held it
                counts["expired"] += 1

    fenced_lock, store = FencedLock(client, lock_name, ttl, wait, POLL_S), FencedStore(client)

    def fenced(counts: Counts, pause_s: float) -> None:
        while True:
            token = fenced_lock.acquire()
            try:
                value = int(store.read(key, token) or 0)
                _think(think + pause_s)
                store.write(key, value + 1, token)
                return
            except StaleTokenError:
                counts["rejected"] += 1  # our lock expired meanwhile: redo the increment
                pause_s = 0.0  # the redo is not paused again
            finally:
                if not fenced_lock.release():
                    counts["expired"] += 1

    atomic = AtomicAdd(client)

    def lua(counts: Counts, pause_s: float) -> None:
        _think(think)  # the work computes the change; the change itself is one atomic step
        atomic.add(key, 1)

    def watch(counts: Counts, pause_s: float) -> None:
        counts["retries"] += watch_update(client, key, lambda old: int(old or 0) + 1, think)

    steps = {"none": unlocked, "redis_lock": redis_lock, "fenced": fenced, "lua": lua,
             "watch": watch}
    return steps[method]


def race(client: Any, spec: dict[str, Any]) -> dict[str, Any]:
    step = increment_step(spec["method"], client, spec)
    counts: Counts = {"retries": 0, "rejected": 0, "expired": 0}
    every, pause = int(spec.get("pause_every", 0)), float(spec.get("pause_s", 0.0))
    started = time.monotonic()
    for i in range(int(spec["increments"])):
        step(counts, pause if every and (i + 1) % every == 0 else 0.0)
    return {"ok": True, **counts, "seconds": time.monotonic() - started}


def stale_slow(client: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """Holds the lock, pauses past its TTL, then writes late: fenced (must be refused) and
    plain (shows the corruption fencing prevents)."""
    ns, wait = spec["ns"], float(spec["wait_s"])
    lock = FencedLock(client, f"{ns}:lock", float(spec["ttl_s"]), wait, POLL_S)
    store = FencedStore(client)
    counts = {"attempted": 0, "rejected": 0, "accepted": 0, "plain_overwrote_new": 0,
              "fenced_kept_new": 0, "release_failed": 0}
    for r in range(int(spec["rounds"])):
        token = lock.acquire()
        store.read(f"{ns}:fenced", token)
        client.rpush(f"{ns}:holding", r)
        time.sleep(float(spec["pause_s"]))  # a GC pause, a swap storm, a slow step ...
        if client.blpop([f"{ns}:wrote"], timeout=wait) is None:  # the next holder wrote
            raise TimeoutError(f"round {r}: the next holder did not write within {wait:g} s")
        counts["attempted"] += 1
        try:
            store.write(f"{ns}:fenced", f"stale-{r}", token)
            counts["accepted"] += 1
        except StaleTokenError:
            counts["rejected"] += 1
        client.set(f"{ns}:plain", f"stale-{r}")  # the same late write without fencing
        counts["plain_overwrote_new"] += client.get(f"{ns}:plain") == f"stale-{r}".encode()
        counts["fenced_kept_new"] += client.get(f"{ns}:fenced") == f"new-{r}".encode()
        counts["release_failed"] += not lock.release()
    return {"ok": True, **counts}


def stale_fast(client: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """Waits for the slow holder's lock to expire, takes it and writes (must succeed)."""
    ns, wait = spec["ns"], float(spec["wait_s"])
    lock = FencedLock(client, f"{ns}:lock", float(spec["ttl_s"]), wait, POLL_S)
    store = FencedStore(client)
    counts = {"writes": 0, "accepted": 0, "refused": 0}
    for r in range(int(spec["rounds"])):
        if client.blpop([f"{ns}:holding"], timeout=wait) is None:
            raise TimeoutError(f"round {r}: the slow holder did not take the lock in {wait:g} s")
        token = lock.acquire()  # blocks until the slow holder's TTL runs out
        counts["writes"] += 1
        try:
            store.write(f"{ns}:fenced", f"new-{r}", token)
            counts["accepted"] += 1
        except StaleTokenError:
            counts["refused"] += 1
        client.set(f"{ns}:plain", f"new-{r}")
        lock.release()
        client.rpush(f"{ns}:wrote", r)
    return {"ok": True, **counts}


def deadlock(client: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """Takes ``locks`` in order. With ``hold_s`` > 0 (opposite orders), it keeps its first lock
    until every agent holds one, so the orders deadlock every time instead of by chance, however
    late an agent starts; ``hold_s`` only bounds that wait. Reports when it took its first lock
    and whether it saw every agent holding one."""
    ns, agents, wait = spec["ns"], int(spec["agents"]), float(spec["wait_s"])
    held: list[tuple[str, Any]] = []
    started = time.monotonic()
    report: dict[str, Any] = {"first_lock_at": None, "saw_all_holding": False}
    try:
        for name in spec["locks"]:
            lock = client.lock(f"{ns}:{name}", timeout=float(spec["ttl_s"]), sleep=POLL_S,
                               blocking_timeout=wait, thread_local=False)
            if not lock.acquire():
                mine = ", ".join(repr(n) for n, _ in held) or "nothing"
                raise LockTimeoutError(
                    f"agent {spec['index']} holds {mine} and waited {wait:g} s for {name!r}, "
                    f"which another agent holds: a deadlock (order {spec['locks']}); take "
                    "locks in one global order (sorted names)")
            held.append((name, lock))
            if len(held) == 1:
                report["first_lock_at"] = time.time()
                client.rpush(f"{ns}:holding", spec["index"])
                report["saw_all_holding"] = _until_all_hold(client, f"{ns}:holding", agents,
                                                            float(spec["hold_s"]))
        return {"ok": True, **report, "seconds": time.monotonic() - started}
    except LockTimeoutError as exc:
        return {"ok": False, "error": str(exc), "error_type": type(exc).__name__, **report,
                "seconds": time.monotonic() - started}
    finally:
        for _, lock in reversed(held):
            try:
                lock.release()
            except LockError:  # expired: nothing left to release
                pass


def _until_all_hold(client: Any, key: str, agents: int, limit_s: float) -> bool:
    """Waits until ``agents`` agents have said they hold a lock (at most ``limit_s``)."""
    until = time.monotonic() + limit_s
    while client.llen(key) < agents:
        if time.monotonic() >= until:
            return False
        time.sleep(0.005)
    return True


ROLES = {"race": race, "stale_slow": stale_slow, "stale_fast": stale_fast,
         "deadlock": deadlock}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    spec = json.loads(args[0])
    try:
        client = connect(os.environ[CHILD_REDIS_URL_ENV])
        ns = spec["ns"]
        client.rpush(f"{ns}:ready", spec["index"])
        if client.blpop([f"{ns}:go"], timeout=float(spec["start_timeout_s"])) is None:
            raise TimeoutError("no start signal")
        reply = ROLES[spec["role"]](client, spec)
    except Exception as exc:  # noqa: BLE001 (reported to the parent, which raises)
        print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}",
                          "error_type": type(exc).__name__}), flush=True)
        return 1
    print(json.dumps(reply), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
