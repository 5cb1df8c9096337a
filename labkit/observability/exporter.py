"""One rank's metrics, served to Prometheus (lesson 13; every capstone rank uses it too).

:class:`RankMetrics` holds one rank's metrics in its own ``CollectorRegistry``, served over HTTP
on loopback by ``prometheus_client``: collective latency (a histogram by op and size), the pair
latency matrix ``labkit_pair_latency_seconds{src,dst}`` from send/recv ping-pong, and what later
lessons feed (buffer depth and items, policy lag, restarts, lock waits, checkpoint durations).
"""

from __future__ import annotations

import errno
import os
import threading
from typing import Any

from labkit.errors import ServiceError
from labkit.runtime.ports import PORT_RANGE_ENV, free_port
from labkit.services.base import HOST

PORTS_FILE = "metrics_ports.json"  # rank 0 writes every rank's exporter port here
STOP_FILE = "stop"  # the parent creates it in the run dir: the ranks finish their loop

# Histogram buckets (seconds): loopback collectives are tens of microseconds, cross-node ones
# milliseconds; lock waits and checkpoints are slower.
LATENCY_BUCKETS = (1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025,
                   0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

LOCK_BUCKETS = (1e-4, 1e-3, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

CHECKPOINT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)

_SERVE_ATTEMPTS = 8  # a port from free_port may be taken before we bind it: retry


class RankMetrics:
    """One rank's metrics: its own registry (nothing global), served with ``serve()``.

    Prometheus adds the rank as a target label when it scrapes, so the series here carry only
    what distinguishes them within a rank (op, size, src/dst, ...).
    """

    def __init__(self, rank: int, world: int, registry: Any = None) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

        self.rank, self.world = rank, world
        self.registry = registry if registry is not None else CollectorRegistry()
        reg = self.registry
        self.info = Info("labkit_rank", "Who this process is in the job", registry=reg)
        self.info.info({"world": str(world), "pid": str(os.getpid())})
        self.collective_latency = Histogram(
            "labkit_collective_latency_seconds", "Seconds one collective call took on this rank",
            ["op", "size_bytes"], buckets=LATENCY_BUCKETS, registry=reg)
        self.collectives_started = Counter(
            "labkit_collectives_started", "Collective calls this rank entered (the latency "
            "histogram counts those that returned)", ["op"], registry=reg)
        self.calls_failed = Counter("labkit_calls_failed", "Collectives or lock waits that "
                                    "raised on this rank (a timeout, a lost peer, a mismatch)",
                                    ["kind", "op"], registry=reg)
        self.in_flight = Gauge("labkit_in_flight", "Calls this rank is inside now: a "
                               "collective or a lock wait", ["kind", "op"], registry=reg)
        self.step_seconds = Histogram("labkit_step_seconds", "Seconds one agent step took "
                                      "on this rank", buckets=LATENCY_BUCKETS, registry=reg)
        self.pair_latency = Gauge(
            "labkit_pair_latency_seconds",
            "One-way latency src->dst: median of ping-pong round trips / 2, measured by src",
            ["src", "dst"], registry=reg)
        self.pingpong_sweeps = Counter(
            "labkit_pingpong_sweeps", "Ping-pong sweeps over every pair this rank took part in",
            registry=reg)
        self.buffer_depth = Gauge("labkit_buffer_depth", "Items waiting in a buffer",
                                  ["buffer"], registry=reg)
        self.buffer_items = Counter(
            "labkit_buffer_items", "Items that went through a buffer (throughput: rate())",
            ["buffer"], registry=reg)
        self.policy_lag = Gauge("labkit_policy_lag_steps",
                                "How many learner versions behind the acting policy is",
                                registry=reg)
        self.restarts = Gauge("labkit_restart_count",
                              "Times this rank's process was restarted",
                              registry=reg)
        self.lock_wait = Histogram("labkit_lock_wait_seconds", "Seconds spent waiting for a lock",
                                   ["lock"], buckets=LOCK_BUCKETS, registry=reg)
        self.checkpoint = Histogram("labkit_checkpoint_seconds",
                                    "Seconds a checkpoint save or load took",
                                    ["kind"], buckets=CHECKPOINT_BUCKETS, registry=reg)
        self.env_steps = Counter("labkit_env_steps", "Environment steps this rank took or "
                                 "trained on (throughput: rate())", registry=reg)
        self.updates = Counter("labkit_learner_updates", "Policy updates this rank made",
                               registry=reg)
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.port: int | None = None

    # What the lessons call.
    def observe_collective(self, op: str, size_bytes: int, seconds: float) -> None:
        self.collective_latency.labels(op=op, size_bytes=str(size_bytes)).observe(seconds)

    def enter(self, kind: str, op: str) -> None:
        """A collective (``kind="collective"``) or lock wait begins: counted and in flight."""
        if kind == "collective":
            self.collectives_started.labels(op=op).inc()
        self.in_flight.labels(kind=kind, op=op).inc()

    def leave(self, kind: str, op: str, failed: bool = False) -> None:
        """It returned, or raised (``failed``): no longer in flight."""
        self.in_flight.labels(kind=kind, op=op).dec()
        if failed:
            self.calls_failed.labels(kind=kind, op=op).inc()

    def observe_step(self, seconds: float) -> None:
        self.step_seconds.observe(seconds)

    def set_pair_latency(self, src: int, dst: int, seconds: float) -> None:
        self.pair_latency.labels(src=str(src), dst=str(dst)).set(seconds)

    def observe_buffer(self, depth: int, items: int = 0, buffer: str = "experience") -> None:
        """Current depth, plus ``items`` that went through since the last call."""
        self.buffer_depth.labels(buffer=buffer).set(depth)
        if items:
            self.buffer_items.labels(buffer=buffer).inc(items)

    def set_policy_lag(self, steps: float) -> None:
        self.policy_lag.set(steps)

    def set_restarts(self, count: int) -> None:
        self.restarts.set(count)

    def observe_lock_wait(self, seconds: float, lock: str = "default") -> None:
        self.lock_wait.labels(lock=lock).observe(seconds)

    def observe_checkpoint(self, seconds: float, kind: str = "save") -> None:
        self.checkpoint.labels(kind=kind).observe(seconds)

    def add_env_steps(self, steps: int) -> None:
        self.env_steps.inc(steps)

    def add_update(self) -> None:
        self.updates.inc()

    # Serving.
    def text(self) -> str:
        """The exposition text a scrape gets (``prometheus_client.generate_latest``)."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry).decode()

    def serve(self, port: int = 0) -> int:
        """Serve ``/metrics`` on 127.0.0.1 and return the bound port. ``port=0``: a free one
        (the kernel's choice, or ``labkit.runtime.ports.free_port`` inside ``$LABKIT_PORT_RANGE``)."""
        from prometheus_client import start_http_server

        if self._server is not None:
            return int(self.port or 0)
        attempts = _SERVE_ATTEMPTS if port == 0 and os.environ.get(PORT_RANGE_ENV) else 1
        for attempt in range(attempts):
            chosen = free_port(HOST) if attempts > 1 else port
            try:
                self._server, self._thread = start_http_server(chosen, addr=HOST,
                                                               registry=self.registry)
                break
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE or attempt == attempts - 1:
                    raise ServiceError(f"rank {self.rank}: cannot serve metrics on "
                                       f"{HOST}:{chosen}: {exc}") from exc
        self.port = int(self._server.server_port)
        return self.port

    @property
    def url(self) -> str:
        if self.port is None:
            raise ServiceError("metrics are not served yet: call serve()")
        return f"http://{HOST}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving (safe to call twice)."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
