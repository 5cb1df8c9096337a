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

from typing import TYPE_CHECKING

from labkit.runtime.lazy import lazy_surface

if TYPE_CHECKING:  # what each name is, for readers and type checkers
    from labkit.services.base import (
        CHILD_NATS_URL_ENV,
        CHILD_REDIS_URL_ENV,
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

# name -> the module that defines it: a name is imported when first used,
# so importing one module of the folder (a rank script, a child process) imports no other
_HOME = {
    "BUS_OFFSET": "labkit.services.redis_cluster",
    "can_bind": "labkit.services.base",
    "check_nats": "labkit.services.probes",
    "check_redis": "labkit.services.probes",
    "CHILD_NATS_URL_ENV": "labkit.services.base",
    "CHILD_REDIS_URL_ENV": "labkit.services.base",
    "config_quote": "labkit.services.base",
    "find_redis_cli": "labkit.services.redis_cluster",
    "HOST": "labkit.services.base",
    "JOB_NAME": "labkit.services.prometheus",
    "ManagedServer": "labkit.services.base",
    "NATS_FIX": "labkit.services.nats_server",
    "nats_handshake": "labkit.services.nats_server",
    "nats_url": "labkit.services.shared",
    "NATS_URL_ENV": "labkit.services.nats_server",
    "NatsServer": "labkit.services.nats_server",
    "no_retry": "labkit.services.redis_server",
    "parent_death_signal": "labkit.services.base",
    "prometheus_duration": "labkit.services.prometheus",
    "PROMETHEUS_FIX": "labkit.services.prometheus",
    "PrometheusServer": "labkit.services.prometheus",
    "redact": "labkit.services.base",
    "redis_client": "labkit.services.shared",
    "REDIS_FIX": "labkit.services.redis_server",
    "redis_url": "labkit.services.shared",
    "REDIS_URL_ENV": "labkit.services.redis_server",
    "RedisClusterServer": "labkit.services.redis_cluster",
    "RedisServer": "labkit.services.redis_server",
    "ScrapeTarget": "labkit.services.prometheus",
    "scrub_secrets": "labkit.services.base",
    "ServiceStatus": "labkit.services.probes",
    "stop_all": "labkit.services.shared",
}
__all__ = sorted(_HOME)
__getattr__, __dir__ = lazy_surface(__name__, _HOME)
