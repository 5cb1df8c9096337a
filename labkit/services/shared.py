"""The servers a notebook shares: ``redis_url()`` and ``nats_url()`` give ``$REDIS_URL`` /
``$NATS_URL`` when set, else the URL of a server this process starts once and stops at exit.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import redis
from labkit.services.base import ManagedServer
from labkit.services.nats_server import NATS_URL_ENV, NatsServer
from labkit.services.redis_server import REDIS_URL_ENV, RedisServer

_shared: dict[str, ManagedServer] = {}

_shared_lock = threading.Lock()


def _shared_url(env: str, kind: type[ManagedServer]) -> str:
    from_env = os.environ.get(env, "").strip()
    if from_env:
        return from_env
    with _shared_lock:
        server = _shared.get(env)
        if server is None or not server.is_running:  # first call, or the server died
            if server is not None:
                server.stop()
            server = kind().start()
            _shared[env] = server
        return server.url  # type: ignore[attr-defined]


def redis_url() -> str:
    """``$REDIS_URL`` if set, else the URL of this process's embedded Redis (started once)."""
    return _shared_url(REDIS_URL_ENV, RedisServer)


def nats_url() -> str:
    """``$NATS_URL`` if set, else the URL of this process's embedded NATS (started once)."""
    return _shared_url(NATS_URL_ENV, NatsServer)


def redis_client(**kwargs: object) -> redis.Redis:
    """``redis.Redis.from_url(redis_url())``; ``kwargs`` go to ``from_url``."""
    import redis

    return redis.Redis.from_url(redis_url(), **kwargs)


def stop_all() -> None:
    """Stops the shared servers ``redis_url()`` / ``nats_url()`` started (not $REDIS_URL ones)."""
    with _shared_lock:
        while _shared:
            _, server = _shared.popitem()
            server.stop()
