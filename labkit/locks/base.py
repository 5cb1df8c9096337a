"""What every part of ``labkit.locks`` shares: errors, connecting, parameter checks, keys.

Agents get the Redis URL from the environment (``LABKIT_REDIS_URL``), never from argv,
where ``ps`` would show its password. Every experiment works under a fresh key prefix
(``labkit:locks:<hex>``) and deletes it afterwards, so it can run on a shared Redis.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from labkit.errors import LabkitError, ParameterError, ServiceError
from labkit.services.base import scrub_secrets

if TYPE_CHECKING:
    import redis

LOCK_METHODS = ("none", "redis_lock", "fenced", "lua", "watch")
"""How a race agent increments the shared counter (see ``labkit.locks.agent``)."""
SOCKET_TIMEOUT_S = 60.0  # longer than any blocking call we make, so a dead server still errors


class LockTimeoutError(LabkitError):
    """A lock was not acquired within its blocking timeout; the message names the locks."""


class StaleTokenError(LabkitError):
    """The store refused an access whose fencing token is older than one it has already seen:
    the caller's lock expired and someone else has held it since."""


class LockExperimentError(LabkitError):
    """An agent process of a lock experiment failed, hung or printed no result."""


def connect(url: str, timeout_s: float = 5.0) -> redis.Redis:
    """A ``redis.Redis`` for ``url`` that answered PING; :class:`ServiceError` if it did not."""
    import redis

    from labkit.services.base import redact

    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=timeout_s,
                                      socket_timeout=SOCKET_TIMEOUT_S)
    except ValueError as exc:
        raise ServiceError(f"not a Redis URL: {redact(url)} ({exc})") from None
    try:
        client.ping()
    except redis.RedisError as exc:
        client.close()
        detail = scrub_secrets(f"{type(exc).__name__}: {exc}", url)
        raise ServiceError(
            f"Redis at {redact(url)} is unreachable ({detail}); start one with "
            "labkit.services.redis_server.RedisServer() or set REDIS_URL to a running Redis"
        ) from None
    return client


def new_namespace() -> str:
    """A fresh key prefix for one experiment."""
    return f"labkit:locks:{uuid.uuid4().hex[:10]}"


def delete_namespace(client: redis.Redis, namespace: str) -> None:
    """Deletes every key under ``namespace`` (SCAN, so it never blocks the server)."""
    keys = list(client.scan_iter(match=f"{namespace}:*", count=1000))
    for start in range(0, len(keys), 500):
        client.delete(*keys[start:start + 500])


def check_int(name: str, value: int, low: int, high: int | None = None) -> int:
    """``value`` if it is an int in [low, high]; ParameterError otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParameterError(f"{name} must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise ParameterError(f"{name} must be {bound}, got {value}")
    return value


def check_seconds(name: str, value: float, *, allow_zero: bool = False) -> float:
    """``value`` as float if it is a finite positive number (or 0 with ``allow_zero``)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise ParameterError(f"{name} must be a number of seconds, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero) or value == float("inf"):
        raise ParameterError(f"{name} must be {'>= 0' if allow_zero else '> 0'} s, got {value}")
    return float(value)
