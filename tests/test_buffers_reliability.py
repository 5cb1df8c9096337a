"""The typed buffers when things break, on real servers: Redis restarted or SIGKILLed (with AOF),
a learner SIGKILLed mid-batch, a wrong password, a port that is not Redis.

What the buffers do today (redis-py 8): a buffer opened from a URL has *no* command retry
(``Redis.from_url`` builds connections with ``Retry(NoBackoff(), 0)``), but the pool drops a
connection the server closed, so once the server is back the next call simply works; while it is
down, the call raises ``redis.exceptions.ConnectionError`` (host:port, "Connection refused") at
once. A buffer given a ``redis.Redis`` client with a ``Retry`` rides out a short outage.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
import torch
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from labkit.buffers.base import ExperienceBuffer
from labkit.buffers.frame import Experience
from labkit.buffers.kinds import open_buffer
from labkit.buffers.redis_stream import StreamBuffer, stream_key
from labkit.runtime.ports import free_port
from labkit.services import NatsServer, RedisServer, config_quote


@dataclass(eq=False)
class PinnedRedis(RedisServer):
    """A RedisServer with a fixed password and, with ``data_dir``, an AOF (fsync always) kept
    there across restarts. (The fix in labkit would be a ``config=`` option on RedisServer.)"""

    pinned_password: str = "pinned-test-password"
    data_dir: Path | None = None

    def _write_config(self, tmpdir: Path, port: int) -> list[str]:
        self._secret = self.pinned_password
        args = super()._write_config(tmpdir, port)
        if self.data_dir is not None:
            with open(tmpdir / "redis.conf", "a") as config:  # later lines win
                config.write(f"dir {config_quote(self.data_dir)}\nappendonly yes\nappendfsync always\n")
        return args


def exp(agent: int, seq: int) -> Experience:
    return Experience(agent, seq, policy_version=1, timestamp=float(seq), tensors={
        "obs": torch.arange(3, dtype=torch.float64) + 10 * agent + seq,
    })  # fmt: skip


def drain(buf: ExperienceBuffer, batch: int = 8) -> list[tuple[int, int]]:
    got: list[tuple[int, int]] = []
    while items := buf.pull(batch):
        got += [(e.agent_id, e.seq) for e in items]
        buf.ack(items)
    return got


def sigkill(server: RedisServer) -> None:
    assert server.pid is not None
    os.kill(server.pid, signal.SIGKILL)
    server.stop()  # reaps it and removes its temp dir (the AOF is in data_dir)


@pytest.fixture
def server() -> Iterator[PinnedRedis]:
    with PinnedRedis(port=free_port()) as srv:  # a fixed port: restarts come back on it
        yield srv


# --------------------------------------------------------------------------------------------
# Redis restarted mid-run


@pytest.mark.parametrize("kind", ["list", "stream"])
def test_next_call_after_a_restart_on_the_same_port_works(server, kind):
    buf = open_buffer(kind, server.url, agent_id=0)  # from a URL: no retry at all
    buf.push([exp(0, 0)])
    server.stop()
    with pytest.raises(redis.exceptions.ConnectionError, match=f"{server.host}:.*refused"):
        buf.push([exp(0, 1)])  # down: the refusal itself, not a timeout or a retry loop
    server.start()  # same port and password, no persistence: what was there is gone
    assert buf.push([exp(0, 2), exp(0, 3)]) == 2  # the pool reconnects by itself
    assert [e.seq for e in buf.pull(10)] == [2, 3]  # stream: the lost group is recreated
    buf.close()


def test_a_client_with_retry_rides_out_a_restart(server):
    # Retries for up to about a minute: far longer than a redis-server takes to start anywhere.
    client = server.client(retry=Retry(ExponentialBackoff(cap=0.2, base=0.02), 300),
                           retry_on_error=[redis.exceptions.ConnectionError])  # fmt: skip
    buf = open_buffer("stream", client, agent_id=0)
    buf.push([exp(0, 0)])
    server.stop()
    restarter = threading.Timer(0.3, server.start)
    restarter.start()
    assert buf.push([exp(0, 1)]) == 1  # called while down: retried until the server was back
    restarter.join()
    assert [e.seq for e in buf.pull(10)] == [1]
    client.close()


@pytest.mark.parametrize("kind", ["list", "stream"])
def test_acknowledged_pushes_and_pending_entries_survive_sigkill_with_aof(tmp_path, kind):
    n = 60
    server = PinnedRedis(data_dir=tmp_path).start()
    port = server.port
    try:
        producer = open_buffer(kind, server.url, agent_id=0)
        for start in range(0, n, 10):
            assert producer.push([exp(0, s) for s in range(start, start + 10)]) == 10
        consumed: list[tuple[int, int]] = []
        if kind == "stream":
            first = open_buffer(kind, server.url, agent_id=0, consumer="first")
            batch = first.pull(15)
            first.ack(batch[:5])  # trained on 5; 10 still pending when the server dies
            consumed += [(e.agent_id, e.seq) for e in batch[:5]]
        sigkill(server)

        server = PinnedRedis(port=port, data_dir=tmp_path).start()  # same dir, same port
        client = server.client()
        if kind == "list":
            assert client.llen("lab:exp:{0}") == n
            assert drain(open_buffer(kind, server.url, agent_id=0)) == [(0, s) for s in range(n)]
            return
        key = stream_key("lab", 0)
        assert client.xlen(key) == n
        assert client.xpending(key, "learners")["pending"] == 10  # the PEL survived
        heir = StreamBuffer(server.url, agent_id=0, consumer="heir")
        assert heir.reclaim(min_idle_ms=0) == 10
        consumed += drain(heir)
        assert sorted(consumed) == [(0, s) for s in range(n)]  # pushed == consumed, once each
        assert heir.pending() == 0
        assert producer.push([exp(0, n)]) == 1  # the old producer reconnects by itself
    finally:
        server.stop()


# --------------------------------------------------------------------------------------------
# A learner killed mid-batch

_LEARNER = """
import json, os, sys, time
from labkit.buffers.redis_stream import StreamBuffer
buf = StreamBuffer(os.environ["TEST_REDIS_URL"], agent_id=0, agents=[0, 1, 2], consumer="doomed")
for _ in range(2):
    batch = buf.pull(7)
    buf.ack(batch)
    print(json.dumps([[e.agent_id, e.seq] for e in batch]), flush=True)
buf.pull(7)  # mid-batch: pulled, not acked yet
print("PULLED", flush=True)
time.sleep(60)
"""


def test_learner_sigkilled_mid_batch_then_another_reclaims(server):
    agents, n = [0, 1, 2], 20
    for a in agents:
        open_buffer("stream", server.url, agent_id=a).push([exp(a, s) for s in range(n)])
    env = {**os.environ, "TEST_REDIS_URL": server.url}
    proc = subprocess.Popen([sys.executable, "-c", _LEARNER], env=env, stdout=subprocess.PIPE,
                            text=True)  # fmt: skip
    consumed: list[tuple[int, int]] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("PULLED"):
                break
            consumed += [tuple(pair) for pair in json.loads(line)]
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL and len(consumed) == 14

    heir = StreamBuffer(server.url, agent_id=0, agents=agents, consumer="heir")
    assert heir.pending() == 7
    assert heir.reclaim(min_idle_ms=0) == 7
    consumed += drain(heir)
    assert len(consumed) == len(set(consumed)) == len(agents) * n  # no duplicates, none lost
    assert set(consumed) == {(a, s) for a in agents for s in range(n)}
    assert heir.stats().redelivered == 7 and heir.pending() == 0


# --------------------------------------------------------------------------------------------
# Wrong password, not Redis at all


@pytest.mark.parametrize("kind", ["list", "stream"])
def test_wrong_or_missing_password_is_an_authentication_error(server, kind):
    wrong = server.url.replace(server.password, "not-the-password")
    buf = open_buffer(kind, wrong, agent_id=0)  # lazy: nothing is sent yet
    with pytest.raises(redis.exceptions.AuthenticationError, match="invalid username-password"):
        buf.push([exp(0, 0)])
    missing = server.url.replace(f":{server.password}@", "")
    with pytest.raises(redis.exceptions.AuthenticationError, match="authenticated"):
        open_buffer(kind, missing, agent_id=0).pull(1)


def _tcp_server(greeting: bytes) -> tuple[socket.socket, int]:
    """A loopback TCP server that sends ``greeting`` to each client, then says nothing."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            held.append(conn)
            conn.sendall(greeting)

    threading.Thread(target=serve, daemon=True).start()
    return listener, listener.getsockname()[1]


def _bounded(call, limit: float) -> BaseException:
    """Runs ``call`` in a thread; returns what it raised, failing if it takes over ``limit`` s."""
    box: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001
            box.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit)
    assert not thread.is_alive(), f"hung for more than {limit} s"
    assert box, "did not raise"
    return box[0]


def test_a_port_that_is_not_redis_fails_fast_and_clearly():
    listener, port = _tcp_server(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    try:
        buf = open_buffer("list", f"redis://:pw@127.0.0.1:{port}/0", agent_id=0)
        exc = _bounded(lambda: buf.push([exp(0, 0)]), 2.0)
        assert isinstance(exc, redis.exceptions.InvalidResponse)
        assert "protocol error" in str(exc).lower()  # either parser: redis-py's or hiredis
    finally:
        listener.close()
    with NatsServer() as nats:  # the lab's other server: greets with INFO {...}
        buf = open_buffer("stream", f"redis://:pw@127.0.0.1:{nats.port}/0", agent_id=0)
        exc = _bounded(lambda: buf.pull(1), 2.0)
        # redis-py's parser quotes the greeting; hiredis names its first byte
        assert isinstance(exc, redis.RedisError)
        assert "INFO" in str(exc) or 'got "I"' in str(exc)


def test_a_silent_port_times_out_instead_of_hanging():
    listener, port = _tcp_server(b"")
    try:
        buf = open_buffer("stream", f"redis://:pw@127.0.0.1:{port}/0?socket_timeout=0.5", agent_id=0)
        exc = _bounded(lambda: buf.pull(1), 3.0)
        assert isinstance(exc, redis.exceptions.TimeoutError)
        default = open_buffer("list", f"redis://:pw@127.0.0.1:{port}/0", agent_id=0)
        exc = _bounded(lambda: default.pull(1), 8.0)  # redis-py 8's default socket_timeout: 5 s
        assert isinstance(exc, redis.exceptions.TimeoutError)
    finally:
        listener.close()
