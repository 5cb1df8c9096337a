"""Is a Redis or NATS at this URL answering? For the doctor: these never raise, they say why not."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

if TYPE_CHECKING:
    pass
from labkit.services.base import HOST, redact, scrub_secrets
from labkit.services.nats_server import nats_handshake
from labkit.services.redis_server import no_retry


@dataclass
class ServiceStatus:
    """Whether a service answered. ``url`` is redacted: safe to show."""

    name: str
    url: str
    ok: bool
    detail: str = ""
    version: str = ""

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "url": self.url, "ok": self.ok, "detail": self.detail,
                "version": self.version}  # fmt: skip


def check_redis(url: str, timeout: float = 2.0) -> ServiceStatus:
    """PINGs the Redis at ``url`` and reads its version; never raises."""
    import redis

    shown = redact(url)
    try:
        client = redis.Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout, retry=no_retry()
        )
        try:
            client.ping()
            version = str(client.info("server").get("redis_version", ""))
        finally:
            client.close()
    except Exception as exc:  # noqa: BLE001 (a probe reports, it does not raise)
        detail = scrub_secrets(f"{type(exc).__name__}: {exc}", url)
        return ServiceStatus("redis", shown, False, detail)
    return ServiceStatus("redis", shown, True, "PING ok", version)


def check_nats(url: str, timeout: float = 2.0) -> ServiceStatus:
    """Connects to the NATS server at ``url`` (first of a comma-separated list), authenticates
    with the URL's token or user/password and PINGs it; never raises."""
    first = url.split(",")[0].strip()
    shown = redact(first)
    try:
        parts = urlsplit(first if "://" in first else f"nats://{first}")
        host, port = parts.hostname or HOST, parts.port or 4222
        auth: dict[str, str] = {}
        if parts.username and parts.password is not None:
            auth = {"user": unquote(parts.username), "pass": unquote(parts.password)}
        elif parts.username:
            auth = {"auth_token": unquote(parts.username)}
        info = nats_handshake(host, port, auth, timeout)
    except Exception as exc:  # noqa: BLE001 (a probe reports, it does not raise)
        detail = scrub_secrets(f"{type(exc).__name__}: {exc}", first)
        return ServiceStatus("nats", shown, False, detail)
    detail = "JetStream on" if info.get("jetstream") else "JetStream off"
    if info.get("_tls_unchecked"):
        detail += "; TLS required, credentials not checked"
    else:
        detail = "PING ok, " + detail
    return ServiceStatus("nats", shown, True, detail, str(info.get("version", "")))
