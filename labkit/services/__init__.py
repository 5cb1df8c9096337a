"""The servers labkit owns, real ones on loopback, started and stopped from Python.

The lab's agents talk through Redis (state, queues) and NATS (messages, JetStream); lesson 13
scrapes them with Prometheus. Nobody has to install or run them: ``redis_url()`` and
``nats_url()`` give the URL of ``$REDIS_URL`` / ``$NATS_URL`` when set, else of a server this
process starts on 127.0.0.1 (a free port, a random password, a temporary directory) and stops
when the process exits. A killed notebook kernel takes its servers with it (Linux: parent-death
signal).

- ``base``: ``ManagedServer``, what every server has in common; ``redact``, ``scrub_secrets``.
- ``redis_server``, ``nats_server``, ``prometheus``, ``redis_cluster``: one server each.
- ``probes``: ``check_redis`` / ``check_nats`` for the doctor; they never raise.
- ``shared``: the servers a notebook shares (``redis_url``, ``nats_url``, ``stop_all``).

Passwords live in the URLs: show URLs with ``redact(url)``.
"""

from __future__ import annotations

from labkit.services.base import (
    HOST,
    ManagedServer,
    can_bind,
    config_quote,
    parent_death_signal,
    redact,
    scrub_secrets,
)
from labkit.services.nats_server import (
    NATS_FIX,
    NATS_URL_ENV,
    NatsServer,
    nats_handshake,
)
from labkit.services.probes import (
    ServiceStatus,
    check_nats,
    check_redis,
)
from labkit.services.prometheus import (
    JOB_NAME,
    PROMETHEUS_FIX,
    PrometheusServer,
    ScrapeTarget,
    prometheus_duration,
)
from labkit.services.redis_cluster import (
    BUS_OFFSET,
    RedisClusterServer,
    find_redis_cli,
)
from labkit.services.redis_server import (
    REDIS_FIX,
    REDIS_URL_ENV,
    RedisServer,
    no_retry,
)
from labkit.services.shared import (
    nats_url,
    redis_client,
    redis_url,
    stop_all,
)

__all__ = [
    "BUS_OFFSET",
    "can_bind",
    "check_nats",
    "check_redis",
    "config_quote",
    "find_redis_cli",
    "HOST",
    "JOB_NAME",
    "ManagedServer",
    "NATS_FIX",
    "nats_handshake",
    "nats_url",
    "NATS_URL_ENV",
    "NatsServer",
    "no_retry",
    "parent_death_signal",
    "prometheus_duration",
    "PROMETHEUS_FIX",
    "PrometheusServer",
    "redact",
    "redis_client",
    "REDIS_FIX",
    "redis_url",
    "REDIS_URL_ENV",
    "RedisClusterServer",
    "RedisServer",
    "ScrapeTarget",
    "scrub_secrets",
    "ServiceStatus",
    "stop_all",
]
