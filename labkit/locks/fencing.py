"""The correct lock for long or cross-service work: a Redis lock with a TTL, plus fencing.

``redis-py``'s ``Lock`` is ``SET name <random token> NX PX ttl`` to acquire and a Lua
compare-and-delete to release, so only the holder can release it and a crashed holder's lock
expires. But a TTL lock is only safe *within* its TTL: a holder paused longer than that (GC,
swap, a slow GPU step) wakes up believing it still holds the lock while another agent does.

Fencing closes that hole. :class:`FencedLock` hands out a monotonic token with each
acquisition (INCR, issued atomically with a check that we still hold the lock), and
:class:`FencedStore` checks that token atomically (Lua) on every read and write of the
resource: anything with a token lower than the highest one the resource has seen is refused
with :class:`StaleTokenError`. Reads are fenced too, so a read-modify-write by a stale holder
cannot slip its write in between a newer holder's read and write.

Fencing buys safety, not progress: if the TTL is routinely shorter than the work, holders keep
refusing each other's writes and redoing them. Size the TTL for the normal case; fencing is for
the pause nobody planned for.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from labkit.locks.base import LockTimeoutError, StaleTokenError

if TYPE_CHECKING:
    import redis

# KEYS[1] lock key, KEYS[2] token counter; ARGV[1] our lock token.
# A token is issued only to the current holder, so token order follows holder order.
_ISSUE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('INCR', KEYS[2])
end
return nil
"""

# KEYS[1] resource, KEYS[2] highest token seen for it; ARGV[1] token, ARGV[2] 'r' or 'w',
# ARGV[3] value to write. Returns {1, value} when accepted, {0, highest} when refused.
_FENCED = """
local token = tonumber(ARGV[1])
local highest = tonumber(redis.call('GET', KEYS[2]) or '-1')
if token < highest then return {0, tostring(highest)} end
redis.call('SET', KEYS[2], token)
if ARGV[2] == 'w' then redis.call('SET', KEYS[1], ARGV[3]) return {1, ARGV[3]} end
return {1, redis.call('GET', KEYS[1])}
"""


# KEYS[1] highest token seen for the resource, KEYS[2..] keys to set; ARGV[1] token, ARGV[2..]
# their values. All or nothing: returns {1} when written, {0, highest} when refused.
_FENCED_MANY = """
local token = tonumber(ARGV[1])
local highest = tonumber(redis.call('GET', KEYS[1]) or '-1')
if token < highest then return {0, tostring(highest)} end
redis.call('SET', KEYS[1], token)
for i = 2, #KEYS do redis.call('SET', KEYS[i], ARGV[i]) end
return {1}
"""


class FencedLock:
    """A ``redis-py`` Lock (random token, TTL) that also issues a fencing token per acquire.

    ``with FencedLock(client, "job:7", ttl_s=5) as token: store.write(key, value, token)``.
    The lock key and its token counter (``name:fence``) must live on one node (Redis Cluster:
    use a hash tag such as ``{job7}:lock``).
    """

    def __init__(self, client: redis.Redis, name: str, ttl_s: float = 10.0,
                 wait_s: float = 30.0, poll_s: float = 0.002) -> None:
        self.client = client
        self.name = name
        self.ttl_s = ttl_s
        self.wait_s = wait_s
        self.lock = client.lock(name, timeout=ttl_s, sleep=poll_s, blocking_timeout=wait_s,
                                thread_local=False)
        self._issue = client.register_script(_ISSUE)
        self.token: int | None = None

    @property
    def counter_key(self) -> str:
        return f"{self.name}:fence"

    def acquire(self) -> int:
        """Blocks up to ``wait_s`` for the lock; returns this holding's fencing token."""
        deadline = time.monotonic() + self.wait_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self.lock.acquire(blocking_timeout=left):
                raise LockTimeoutError(f"lock {self.name!r} not acquired within "
                                       f"{self.wait_s:g} s: another agent holds it "
                                       f"(TTL {self.ttl_s:g} s)")
            token = self._issue(keys=[self.name, self.counter_key], args=[self.lock.local.token])
            if token is not None:
                self.token = int(token)
                return self.token
            # The TTL ran out between SET NX and the script (a pause, or a tiny TTL): we did
            # nothing under that holding and have no token, so just try again.
            self.lock.local.token = None

    def release(self) -> bool:
        """Releases the lock; False when it had expired already (someone may hold it now)."""
        from redis.exceptions import LockError

        self.token = None
        try:
            self.lock.release()
        except LockError:  # LockNotOwnedError: our TTL ran out while we "held" it
            return False
        return True

    def __enter__(self) -> int:
        return self.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self.release()


class FencedStore:
    """Reads and writes of a resource, checked against fencing tokens inside Redis (Lua).

    Each resource key ``k`` has its highest token seen in ``k:fence-seen``. Both keys must be
    on one node (Redis Cluster: put a hash tag in the resource name, e.g. ``{job7}:state``).
    """

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self._script = client.register_script(_FENCED)
        self._many = client.register_script(_FENCED_MANY)

    @staticmethod
    def seen_key(key: str) -> str:
        return f"{key}:fence-seen"

    def _call(self, key: str, token: int, mode: str, value: bytes | str = b"") -> bytes | None:
        ok, got = self._script(keys=[key, self.seen_key(key)], args=[int(token), mode, value])
        if not ok:
            raise StaleTokenError(
                f"{'write to' if mode == 'w' else 'read of'} {key!r} with fencing token {token} "
                f"refused: token {got.decode()} was seen already (our lock expired)"
            )
        return got

    def read(self, key: str, token: int) -> bytes | None:
        """The value of ``key`` (None if unset); StaleTokenError if ``token`` is stale."""
        return self._call(key, token, "r")

    def write(self, key: str, value: bytes | str | int, token: int) -> None:
        """Sets ``key`` to ``value``; StaleTokenError (nothing written) if ``token`` is stale."""
        self._call(key, token, "w", str(value) if isinstance(value, int) else value)

    def write_many(self, resource: str, values: dict[str, bytes | str | int], token: int) -> None:
        """Sets every key in ``values`` at once, fenced as one ``resource`` (its highest token
        lives in ``resource:fence-seen``): all written, or StaleTokenError and none. All keys
        on one node (Redis Cluster: one hash tag)."""
        keys = list(values)
        args = [str(v) if isinstance(v, int) else v for v in values.values()]
        reply = self._many(keys=[self.seen_key(resource), *keys], args=[int(token), *args])
        if not reply[0]:
            raise StaleTokenError(
                f"write to {resource!r} with fencing token {token} refused: token "
                f"{reply[1].decode()} was seen already (our lock expired)")
