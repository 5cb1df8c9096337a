"""Locks and races between agents: lost updates, why all_reduce is no lock, what works.

The field guide (Myth 4) "adds locks" with an all_reduce spin lock. A collective is entered by
every rank in the same order: a barrier, not mutual exclusion. Every rank "acquires" at once,
and a rank that skips the call hangs the others until the collective timeout
(:mod:`labkit.locks.guide`). What to use instead, in order of preference:

- one key, short update: an atomic operation (INCRBY, a Lua script) (:mod:`.lockfree`);
- a few keys, low contention: an optimistic WATCH/MULTI transaction, retried (:mod:`.lockfree`);
- long or cross-service work: a Redis lock with a TTL *and* fencing tokens checked by the store
  (:mod:`.fencing`), because a TTL lock alone is only safe while its holder is never paused
  past the TTL.
- several locks: take them in one global order (sorted names), with a blocking timeout.

Modules: ``base`` (errors, connect), ``fencing``, ``lockfree``, ``agent`` (one agent process),
``runner`` (start and reap agents), ``experiments`` (race, stale writes, deadlock), ``guide`` /
``guide_rank`` (the guide's lock in torchrun ranks), ``cli`` (``labkit bench locks``).
"""

from __future__ import annotations

from labkit.locks.base import (
    LOCK_METHODS,
    LockExperimentError,
    LockTimeoutError,
    StaleTokenError,
    connect,
)
from labkit.locks.cli import add_arguments, compare, run
from labkit.locks.experiments import (
    DeadlockResult,
    RaceResult,
    StaleWriteResult,
    deadlock_experiment,
    race_experiment,
    stale_write_experiment,
)
from labkit.locks.fencing import FencedLock, FencedStore
from labkit.locks.guide import (
    GuideOverlapResult,
    GuideSkipResult,
    guide_lock_overlap,
    guide_lock_skip,
)
from labkit.locks.lockfree import AtomicAdd, watch_update

__all__ = [
    "LOCK_METHODS",
    "AtomicAdd",
    "DeadlockResult",
    "FencedLock",
    "FencedStore",
    "GuideOverlapResult",
    "GuideSkipResult",
    "LockExperimentError",
    "LockTimeoutError",
    "RaceResult",
    "StaleTokenError",
    "StaleWriteResult",
    "add_arguments",
    "compare",
    "connect",
    "deadlock_experiment",
    "guide_lock_overlap",
    "guide_lock_skip",
    "race_experiment",
    "run",
    "stale_write_experiment",
    "watch_update",
]
