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
    LOCK_METHODS,
    LockTimeoutError,
    check_int,
    check_seconds,
    connect,
    delete_namespace,
    new_namespace,
)
from labkit.locks.runner import run_agents

PAUSED_METHODS = ("redis_lock", "fenced")  # methods with a lock holder that can be paused

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
    all_held_one: bool = False  # opposite orders: every agent held its first lock at once
    first_lock_spread_s: float | None = None  # first to last agent taking its first lock

    def check(self) -> DeadlockResult:
        """Raise the first agent's LockTimeoutError (it names the locks), if any."""
        for agent in self.agents:
            if not agent["ok"]:
                raise LockTimeoutError(agent["error"])
        return self

    def describe(self) -> str:
        """What happened and why, in a sentence or two, including the outcomes that show
        nothing (no deadlock formed, or a sorted order that still gave up)."""
        quit = [a for a in self.agents if not a["ok"]]
        done = [a for a in self.agents if a["ok"]]
        if self.ordered:
            if not quit:
                return (f"sorted order: every agent got every lock; the slowest took "
                        f"{max(a['seconds'] for a in self.agents)} s, waiting its turn")
            turn = max((a["seconds"] for a in done), default=0.0)
            return (f"sorted order, yet {len(quit)} agent(s) gave up after {self.wait_s:g} s: "
                    "not a deadlock (one order cannot form one) but a wait shorter than "
                    "another agent's turn on this machine now (an agent that finished took "
                    f"{turn} s, its turn plus the time a busy machine took to run it); raise "
                    "wait_s")
        if not self.all_held_one:
            apart = ("" if self.first_lock_spread_s is None
                     else f" (first locks taken {self.first_lock_spread_s} s apart)")
            return (f"no deadlock formed this time: an agent started so late{apart} that "
                    "another had stopped waiting for it and taken every lock first; "
                    f"{len(quit)} agent(s) gave up. Run it again on a quieter machine")
        if quit:
            return (f"deadlock: every agent held its first lock and waited for another's; "
                    f"{len(quit)} of {len(self.agents)} gave up after {self.wait_s:g} s and "
                    f"released what they held, {len(done)} then finished")
        return "every agent finished: the opposite orders did not deadlock"


HOLD_LIMIT_S = 60.0
"""How long an agent of the opposite-order run keeps its first lock waiting for the others to
take theirs: only a bound for an agent that never starts, since the wait ends when they do."""
TTL_MARGIN_S = 30.0


def _timeout(timeout_s: float | None, work_s: float) -> float:
    return check_seconds("timeout_s", timeout_s) if timeout_s is not None else 60.0 + 3 * work_s


def race_experiment(url: str, method: str, agents: int = 4, increments: int = 200,
                    think_s: float = 0.002, ttl_s: float = 10.0, wait_s: float | None = None,
                    timeout_s: float | None = None, pause_every: int = 0,
                    pause_s: float = 0.0) -> RaceResult:
    """``agents`` processes each increment one Redis counter ``increments`` times with
    ``method``: ``none`` (GET, think, SET: the race), ``redis_lock`` (redis-py Lock around it),
    ``fenced`` (lock + fencing token checked by the store), ``lua`` (atomic script) or
    ``watch`` (optimistic WATCH/MULTI, retried). ``ttl_s`` is the lock TTL, ``wait_s`` how long
    an agent may wait for the lock (default: the timeout). With ``pause_every`` N > 0 (lock
    methods only), every N-th increment's holder pauses ``pause_s`` more inside its critical
    section, on its first try only: a pause past the TTL that the other holdings do not share."""
    if method not in LOCK_METHODS:
        raise ParameterError(f"method must be one of {', '.join(LOCK_METHODS)}, got {method!r}")
    check_int("agents", agents, 1, MAX_AGENTS)
    check_int("increments", increments, 1, 1_000_000)
    check_seconds("think_s", think_s, allow_zero=True)
    check_seconds("ttl_s", ttl_s)
    check_int("pause_every", pause_every, 0)
    check_seconds("pause_s", pause_s, allow_zero=True)
    if pause_every and method not in PAUSED_METHODS:
        raise ParameterError(f"pause_every needs a lock holder to pause: method "
                             f"{' or '.join(PAUSED_METHODS)}, got {method!r}")
    paused = increments // pause_every if pause_every else 0
    timeout = _timeout(timeout_s, agents * (increments * (think_s + 0.005) + paused * pause_s))
    wait = check_seconds("wait_s", wait_s) if wait_s is not None else timeout
    spec = {"role": "race", "method": method, "increments": increments, "think_s": think_s,
            "ttl_s": ttl_s, "wait_s": wait, "pause_every": pause_every, "pause_s": pause_s}
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
                        hold_s: float = HOLD_LIMIT_S, wait_s: float = 2.0,
                        ttl_s: float | None = None, timeout_s: float | None = None
                        ) -> DeadlockResult:
    """One agent per lock; agent ``i`` takes the locks starting at ``locks[i]`` (opposite
    orders for two locks), or all in sorted order with ``ordered=True``. With opposite orders
    each keeps its first lock until every agent holds one (``hold_s`` bounds that wait for a
    late agent), then waits at most ``wait_s`` for the next one: a deadlock, ended by a
    LockTimeoutError naming the locks instead of hanging forever. In sorted order nobody waits
    for the others: whoever holds the first lock can always take the rest. ``ttl_s`` (default:
    longer than any holding) keeps an expiring lock from ending the deadlock instead."""
    names = [check_name(n) for n in locks]
    if len(set(names)) < 2:
        raise ParameterError(f"need at least two distinct lock names, got {list(locks)}")
    check_seconds("hold_s", hold_s)
    check_seconds("wait_s", wait_s)
    hold = 0.0 if ordered else hold_s
    ttl = check_seconds("ttl_s", ttl_s) if ttl_s is not None else hold + wait_s + TTL_MARGIN_S
    if ttl <= wait_s + hold:
        raise ParameterError(f"ttl_s ({ttl:g}) must exceed wait_s + hold_s: an expiring lock "
                             "would end the deadlock by breaking mutual exclusion instead")
    orders = [sorted(names) if ordered else names[i:] + names[:i] for i in range(len(names))]
    specs = [{"role": "deadlock", "locks": order, "agents": len(names), "hold_s": hold,
              "wait_s": wait_s, "ttl_s": ttl} for order in orders]
    client, ns = connect(url), new_namespace()
    try:
        replies, seconds = run_agents(url, ns, specs,
                                      _timeout(timeout_s, len(names) * (hold + wait_s)))
    finally:
        delete_namespace(client, ns)
        client.close()
    agents = [{"agent": i, "order": order, "ok": r["ok"], "error": r.get("error"),
               "seconds": round(r["seconds"], 3)}
              for i, (order, r) in enumerate(zip(orders, replies, strict=True))]
    firsts = [r["first_lock_at"] for r in replies if r.get("first_lock_at") is not None]
    spread = round(max(firsts) - min(firsts), 3) if len(firsts) == len(replies) else None
    return DeadlockResult(ordered, names, all(a["ok"] for a in agents),
                          any(not a["ok"] for a in agents), wait_s, agents, round(seconds, 3),
                          all_held_one=not ordered and all(r["saw_all_holding"] for r in replies),
                          first_lock_spread_s=spread)


def check_name(name: str) -> str:
    if not isinstance(name, str) or not name or any(c.isspace() for c in name):
        raise ParameterError(f"lock names must be non-empty strings without spaces: {name!r}")
    return name
