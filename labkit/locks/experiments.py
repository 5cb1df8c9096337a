"""The lock experiments, each with real agent processes on a real Redis; counts, not claims.

- :func:`race_experiment`: ``agents`` processes x ``increments`` read-modify-writes of one
  counter (GET, ``think_s`` of work, SET). ``lost_updates = expected - final``.
- :func:`stale_write_experiment`: a holder paused past its TTL writes late; fencing must
  refuse every such write while the next holder's writes succeed.
- :func:`deadlock_experiment`: two agents take two locks in opposite (or in sorted) order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from labkit.errors import ParameterError
from labkit.locks.base import (
    METHODS,
    LockTimeoutError,
    check_int,
    check_seconds,
    connect,
    delete_namespace,
    new_namespace,
)
from labkit.locks.runner import run_agents

MAX_AGENTS = 64


@dataclass
class RaceResult:
    """One method's run: how many increments were asked for, how many survived."""

    method: str
    agents: int
    increments: int  # per agent
    think_s: float
    expected: int
    final: int
    lost_updates: int
    retries: int  # WATCH transactions that had to start over
    rejected_writes: int  # fenced accesses refused (the lock had expired): redone
    expired_locks: int  # releases that found the lock already expired
    seconds: float  # from the start signal to the last agent's result


@dataclass
class StaleWriteResult:
    """A holder paused past its TTL writes late, ``rounds`` times."""

    rounds: int
    ttl_s: float
    pause_s: float
    stale_writes_attempted: int
    stale_writes_rejected: int  # by the fenced store: should be all of them
    stale_writes_accepted: int
    new_holder_writes: int
    new_holder_writes_accepted: int  # should be all of them
    fenced_kept_new_value: int  # rounds after which the fenced key still held the new value
    unfenced_stale_overwrites: int  # the same late write without fencing clobbered new data
    late_releases_failed: int  # redis-py noticed the expiry only at release, after the harm
    seconds: float

    @property
    def rejected_fraction(self) -> float:
        return self.stale_writes_rejected / max(1, self.stale_writes_attempted)


@dataclass
class DeadlockResult:
    """Two (or more) agents taking the same locks, in opposite or in one sorted order."""

    ordered: bool
    locks: list[str]
    finished: bool  # every agent got all its locks
    timed_out: bool  # at least one agent gave up with LockTimeoutError
    wait_s: float
    agents: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def check(self) -> DeadlockResult:
        """Raise the first agent's LockTimeoutError (it names the locks), if any."""
        for agent in self.agents:
            if not agent["ok"]:
                raise LockTimeoutError(agent["error"])
        return self


def _timeout(timeout_s: float | None, work_s: float) -> float:
    return check_seconds("timeout_s", timeout_s) if timeout_s is not None else 60.0 + 3 * work_s


def race_experiment(url: str, method: str, agents: int = 4, increments: int = 200,
                    think_s: float = 0.002, ttl_s: float = 10.0, wait_s: float | None = None,
                    timeout_s: float | None = None) -> RaceResult:
    """``agents`` processes each increment one Redis counter ``increments`` times with
    ``method``: ``none`` (GET, think, SET: the race), ``redis_lock`` (redis-py Lock around it),
    ``fenced`` (lock + fencing token checked by the store), ``lua`` (atomic script) or
    ``watch`` (optimistic WATCH/MULTI, retried). ``ttl_s`` is the lock TTL, ``wait_s`` how long
    an agent may wait for the lock (default: the timeout)."""
    if method not in METHODS:
        raise ParameterError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    check_int("agents", agents, 1, MAX_AGENTS)
    check_int("increments", increments, 1, 1_000_000)
    check_seconds("think_s", think_s, allow_zero=True)
    check_seconds("ttl_s", ttl_s)
    timeout = _timeout(timeout_s, agents * increments * (think_s + 0.005))
    wait = check_seconds("wait_s", wait_s) if wait_s is not None else timeout
    spec = {"role": "race", "method": method, "increments": increments, "think_s": think_s,
            "ttl_s": ttl_s, "wait_s": wait}
    client, ns = connect(url), new_namespace()
    try:
        replies, seconds = run_agents(url, ns, [spec] * agents, timeout)
        final = int(client.get(f"{ns}:counter") or 0)
    finally:
        delete_namespace(client, ns)
        client.close()
    expected = agents * increments
    return RaceResult(method, agents, increments, think_s, expected, final, expected - final,
                      sum(r["retries"] for r in replies), sum(r["rejected"] for r in replies),
                      sum(r["expired"] for r in replies), round(seconds, 3))


def stale_write_experiment(url: str, rounds: int = 3, ttl_s: float = 0.2, pause_s: float = 0.5,
                           wait_s: float = 10.0, timeout_s: float | None = None
                           ) -> StaleWriteResult:
    """Two agents, ``rounds`` times: the slow one takes the fenced lock and pauses ``pause_s``
    (> ``ttl_s``); the fast one gets the lock when it expires and writes; then the slow one
    writes late, fenced (refused?) and unfenced (clobbers the new value?)."""
    check_int("rounds", rounds, 1, 10_000)
    check_seconds("ttl_s", ttl_s)
    check_seconds("pause_s", pause_s)
    check_seconds("wait_s", wait_s)
    if pause_s <= ttl_s:
        raise ParameterError(f"pause_s ({pause_s:g}) must exceed ttl_s ({ttl_s:g}): the point "
                             "is a holder paused past its lock's TTL")
    if wait_s <= pause_s:
        raise ParameterError(f"wait_s ({wait_s:g}) must exceed pause_s ({pause_s:g})")
    spec = {"rounds": rounds, "ttl_s": ttl_s, "pause_s": pause_s, "wait_s": wait_s}
    client, ns = connect(url), new_namespace()
    try:
        (slow, fast), seconds = run_agents(
            url, ns, [{**spec, "role": "stale_slow"}, {**spec, "role": "stale_fast"}],
            _timeout(timeout_s, rounds * (pause_s + ttl_s)))
    finally:
        delete_namespace(client, ns)
        client.close()
    return StaleWriteResult(
        rounds, ttl_s, pause_s, slow["attempted"], slow["rejected"], slow["accepted"],
        fast["writes"], fast["accepted"], slow["fenced_kept_new"], slow["plain_overwrote_new"],
        slow["release_failed"], round(seconds, 3))


def deadlock_experiment(url: str, ordered: bool, locks: tuple[str, ...] = ("a", "b"),
                        hold_s: float = 0.5, wait_s: float = 2.0, ttl_s: float = 30.0,
                        timeout_s: float | None = None) -> DeadlockResult:
    """One agent per lock; agent ``i`` takes the locks starting at ``locks[i]`` (opposite
    orders for two locks), or all in sorted order with ``ordered=True``. Each holds its first
    lock until all do (at most ``hold_s``), then waits at most ``wait_s`` for the next one:
    unordered, that ends in a LockTimeoutError naming the locks instead of hanging forever."""
    names = [check_name(n) for n in locks]
    if len(set(names)) < 2:
        raise ParameterError(f"need at least two distinct lock names, got {list(locks)}")
    check_seconds("hold_s", hold_s)
    check_seconds("wait_s", wait_s)
    check_seconds("ttl_s", ttl_s)
    if ttl_s <= wait_s + hold_s:
        raise ParameterError(f"ttl_s ({ttl_s:g}) must exceed wait_s + hold_s: an expiring lock "
                             "would end the deadlock by breaking mutual exclusion instead")
    orders = [sorted(names) if ordered else names[i:] + names[:i] for i in range(len(names))]
    specs = [{"role": "deadlock", "locks": order, "agents": len(names), "hold_s": hold_s,
              "wait_s": wait_s, "ttl_s": ttl_s} for order in orders]
    client, ns = connect(url), new_namespace()
    try:
        replies, seconds = run_agents(url, ns, specs,
                                      _timeout(timeout_s, len(names) * (hold_s + wait_s)))
    finally:
        delete_namespace(client, ns)
        client.close()
    agents = [{"agent": i, "order": order, "ok": r["ok"], "error": r.get("error"),
               "seconds": round(r["seconds"], 3)}
              for i, (order, r) in enumerate(zip(orders, replies, strict=True))]
    return DeadlockResult(ordered, names, all(a["ok"] for a in agents),
                          any(not a["ok"] for a in agents), wait_s, agents, round(seconds, 3))


def check_name(name: str) -> str:
    if not isinstance(name, str) or not name or any(c.isspace() for c in name):
        raise ParameterError(f"lock names must be non-empty strings without spaces: {name!r}")
    return name
