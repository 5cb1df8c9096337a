"""Lock-free alternatives: often better than any lock.

- **Atomic operation** (``INCRBY``, or a Lua script for anything a bit richer): the whole
  read-modify-write runs inside Redis, one command, no lock, no retries. Best for short
  critical sections on one key (counters, "append if absent", "take the max"). The work that
  computes the change happens outside; only the change is sent.
- **Optimistic transaction** (``WATCH`` / ``MULTI`` / ``EXEC``): read, compute, then commit
  only if nothing you WATCHed changed meanwhile, else retry. Best for multi-key
  read-modify-write with low contention; under high contention the retries pile up (counted
  here), and every retry redoes the work.
- **Lock + fencing** (:mod:`labkit.locks.fencing`): for long or cross-service work that cannot
  be redone cheaply or does not live in one Redis.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import redis

# KEYS[1] counter; ARGV[1] delta. The GET, add and SET run as one atomic step.
_ADD = """
local value = tonumber(redis.call('GET', KEYS[1]) or '0') + tonumber(ARGV[1])
redis.call('SET', KEYS[1], value)
return value
"""

MAX_WATCH_RETRIES = 100_000  # a bound, so a pathological livelock ends with an error


class AtomicAdd:
    """``add(key, delta)`` as one Lua script: a read-modify-write nobody can interleave with.

    (For a plain counter ``INCRBY`` does the same; the script shows the pattern that also
    works for richer updates.)
    """

    def __init__(self, client: redis.Redis) -> None:
        self._script = client.register_script(_ADD)

    def add(self, key: str, delta: int = 1) -> int:
        """Adds ``delta`` to the integer at ``key`` (0 if unset); returns the new value."""
        return int(self._script(keys=[key], args=[delta]))


def watch_update(client: redis.Redis, key: str, update: Callable[[bytes | None], str | int],
                 think_s: float = 0.0) -> int:
    """Optimistic read-modify-write of ``key``: WATCH, GET, ``update(old)`` (taking ``think_s``
    of "work"), MULTI/SET/EXEC; retried whenever another client changed ``key`` in between.
    Returns the number of retries.
    """
    from redis.exceptions import WatchError

    retries = 0
    with client.pipeline() as pipe:
        while True:
            try:
                pipe.watch(key)
                old = pipe.get(key)
                if think_s:
                    time.sleep(think_s)
                new = update(old)
                pipe.multi()
                pipe.set(key, new)
                pipe.execute()
                return retries
            except WatchError:
                retries += 1
                if retries >= MAX_WATCH_RETRIES:
                    raise RuntimeError(f"gave up on {key!r} after {retries} WATCH retries") \
                        from None
