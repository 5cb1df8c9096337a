"""Observability for a distributed job: every rank exports Prometheus metrics, a real
Prometheus scrapes them and fires an alert when one link between two ranks gets slow.

The guide's team ran "Prometheus + Grafana with a custom NCCL metrics exporter" that "alerts
when communication latencies exceed 500us". This module is that setup at lab size:

- :class:`RankMetrics`: one rank's metrics in its own ``CollectorRegistry``, served over HTTP
  on loopback by ``prometheus_client``: collective latency (histogram by op and size), the
  pair latency matrix ``labkit_pair_latency_seconds{src,dst}`` from send/recv ping-pong, and
  what later lessons feed (buffer depth and items, policy lag, restarts, lock waits,
  checkpoint durations).
- :func:`alert_rules` / ``labkit/alerts/labkit.rules.yml``: ``PairLatencyHigh`` and
  ``RankDown`` in Prometheus 2.x rule format (``promtool check rules`` accepts them).
- :class:`PrometheusServer`: the real ``prometheus`` binary on 127.0.0.1 (free port, temp dir,
  generated config), with ``query``, ``alerts`` and ``targets`` over its HTTP API.
- :func:`observe_job`: launches gloo ranks (``labkit/observability/observe_rank.py``) that run collectives
  and ping-pong, optionally with one rank delaying every send (a slowed link), scrapes them
  and reports the matrix, collective summaries, alerts and target health. Its watch starts
  when every rank has been scraped with a finished sweep and lasts at least ``for:`` plus a
  few rule evaluations, so "the rule never fired" is a result, not a window that was too short.
- :func:`plan_slow_link`: the slow-link run's threshold and injected delay, derived from the
  healthy latencies measured in the same run, so the lesson holds on a faster or slower machine.
"""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from labkit.errors import LabkitError, LaunchError, ServiceError
from labkit.runtime.pace import startup_allowance_s
from labkit.runtime.ports import PORT_RANGE_ENV, free_port
from labkit.runtime.rank_script import rank_script
from labkit.services.servers import HOST, ManagedServer

RANK_SCRIPT = rank_script(__name__)
RULES_FILE = Path(__file__).parent / "alerts" / "labkit.rules.yml"
"""The shipped rules: :func:`alert_rules` with its defaults (a test keeps them equal)."""
PORTS_FILE = "metrics_ports.json"  # rank 0 writes every rank's exporter port here
STOP_FILE = "stop"  # the parent creates it in the run dir: the ranks finish their loop
JOB_NAME = "labkit"  # the scrape job; RankDown watches up{job="labkit"}

PAIR_LATENCY_THRESHOLD_S = 0.0005
"""The guide's alert threshold: communication latency above 500 us."""
ALERT_FOR_S = 5.0
"""How long a condition must hold before the alert fires: short for the lab (production: minutes)."""
PROMETHEUS_FIX = ("install it with `apt-get install prometheus` (Debian/Ubuntu; ships prometheus "
                  "and promtool) or put a Prometheus 2.x release's binary on PATH")

# Histogram buckets (seconds): loopback collectives are tens of microseconds, cross-node ones
# milliseconds; lock waits and checkpoints are slower.
LATENCY_BUCKETS = (1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025,
                   0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
LOCK_BUCKETS = (1e-4, 1e-3, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
CHECKPOINT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
_SERVE_ATTEMPTS = 8  # a port from free_port may be taken before we bind it: retry
MIN_EVALUATIONS = 5
"""A watch with rules lasts at least ``for:`` plus this many rule evaluations after every rank
was scraped: enough chances for a condition to fire, so "never fired" means something."""
PICKUP_TIMEOUT_S = 300.0
"""Bounds the wait for every rank to be scraped with a finished sweep (a hang bound: Prometheus
picks up new targets on a 5 s tick, and a sweep takes well under a second on an idle machine)."""
STARTUP_FLOOR_S = 90.0  # the ranks' start-up bound is never below this (see observe_job)
_POLL_S = 0.25  # how often the watch reads the alerts and the targets


# --------------------------------------------------------------------------------------------
# The exporter


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


# --------------------------------------------------------------------------------------------
# Alert rules

_RULES_TEMPLATE = """\
# labkit's alert rules, Prometheus 2.x rule format (`promtool check rules` accepts them).
# Written by labkit.observability.observe.alert_rules(); this file is its output with the defaults.
# The `for:` windows are seconds so the lab sees an alert fire while the job runs; in
# production use minutes (for: 5m) so that one slow sample does not page anyone.
groups:
  - name: labkit
    rules:
      # The guide: "alerts when communication latencies exceed 500us" per GPU pair.
      # labkit_pair_latency_seconds{src,dst} is the one-way ping-pong latency src -> dst.
      - alert: PairLatencyHigh
        expr: labkit_pair_latency_seconds > @THRESHOLD@
        for: @FOR@
        labels:
          severity: warning
        annotations:
          summary: "Slow link: rank {{ $labels.src }} -> rank {{ $labels.dst }}"
          description: "One-way latency from rank {{ $labels.src }} to rank {{ $labels.dst }} is {{ $value | humanizeDuration }}, above @HUMAN@ for @FOR@."
      # A rank whose exporter stops answering: crashed, hung or cut off.
      - alert: RankDown
        expr: up{job="@JOB@"} == 0
        for: @FOR@
        labels:
          severity: critical
        annotations:
          summary: "Rank {{ $labels.rank }} ({{ $labels.instance }}) does not answer scrapes"
          description: "Prometheus could not scrape {{ $labels.instance }} for @FOR@."
"""


def _duration(seconds: float) -> str:
    """A Prometheus duration: whole milliseconds ("5s", "1500ms")."""
    ms = round(seconds * 1000)
    if ms <= 0:
        raise LabkitError(f"a Prometheus duration must be positive, got {seconds} s")
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def alert_rules(threshold_s: float = PAIR_LATENCY_THRESHOLD_S,
                for_s: float = ALERT_FOR_S) -> str:
    """The rules file text: ``PairLatencyHigh`` above ``threshold_s`` and ``RankDown``, each
    after ``for_s``. A parameter because the right threshold depends on the fabric."""
    if threshold_s <= 0:
        raise LabkitError(f"threshold must be positive, got {threshold_s} s")
    human = f"{threshold_s * 1e6:g}us" if threshold_s < 1e-3 else f"{threshold_s * 1e3:g}ms"
    return (_RULES_TEMPLATE.replace("@THRESHOLD@", f"{threshold_s:g}")
            .replace("@FOR@", _duration(for_s)).replace("@HUMAN@", human)
            .replace("@JOB@", JOB_NAME))


def check_rules(path: str | os.PathLike[str] = RULES_FILE) -> str:
    """Run ``promtool check rules PATH``; its output, or LabkitError saying what is wrong."""
    promtool = shutil.which("promtool")
    if promtool is None:
        raise ServiceError(f"promtool not found: {PROMETHEUS_FIX}")
    done = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True,
                          text=True, timeout=60)
    output = (done.stdout + done.stderr).strip()
    if done.returncode != 0:
        raise LabkitError(f"promtool rejects {path}:\n{output}")
    return output


# --------------------------------------------------------------------------------------------
# Prometheus


@dataclass(frozen=True)
class ScrapeTarget:
    """One endpoint Prometheus scrapes, with the labels it adds to every series from it."""

    address: str  # "127.0.0.1:PORT"
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(eq=False)
class PrometheusServer(ManagedServer):
    """A private ``prometheus`` on 127.0.0.1: free port, generated config, TSDB in a temp dir.

    ``with PrometheusServer(targets=[...]) as prom: prom.query("up")``. Scrapes and evaluates
    rules every second (the lab's pace), stores nothing outside its temp dir, talks to no
    remote storage or Alertmanager: alerts are read from its own API (``alerts()``).
    """

    targets: Sequence[ScrapeTarget | str] = ()
    rule_files: Sequence[str | os.PathLike[str]] = (RULES_FILE,)
    scrape_interval_s: float = 1.0
    evaluation_interval_s: float = 1.0
    startup_timeout: float = 30.0

    name = "prometheus"
    fix = PROMETHEUS_FIX
    _tmp_prefix = "labkit-prometheus-"
    _log_name = "prometheus.log"  # it logs to stderr: stdout.log has it

    @staticmethod
    def available() -> tuple[bool, str]:
        """(True, binary path) when a prometheus binary is on PATH, else (False, how to get
        one)."""
        found = shutil.which("prometheus")
        return (True, found) if found else (False, f"prometheus not found: {PROMETHEUS_FIX}")

    def start(self) -> PrometheusServer:
        super().start()
        return self

    def __enter__(self) -> PrometheusServer:
        return self.start()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (the web UI and API; no credentials)."""
        return f"http://{HOST}:{self._port}"

    def config(self) -> dict[str, Any]:
        """The prometheus.yml this server runs with (as a dict)."""
        targets = [t if isinstance(t, ScrapeTarget) else ScrapeTarget(t) for t in self.targets]
        interval = _duration(self.scrape_interval_s)
        return {
            "global": {"scrape_interval": interval, "scrape_timeout": interval,
                       "evaluation_interval": _duration(self.evaluation_interval_s)},
            "rule_files": [str(Path(p).resolve()) for p in self.rule_files],
            "scrape_configs": [{
                "job_name": JOB_NAME,
                "static_configs": [{"targets": [t.address], "labels": dict(t.labels)}
                                   for t in targets],
            }],
        }

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Evaluate PromQL now (``/api/v1/query``): the result list (``metric``, ``value``)."""
        return self._api("query", {"query": expr})["result"]

    def query_range(self, expr: str, start: float, end: float, step_s: float = 1.0
                    ) -> list[dict[str, Any]]:
        """Evaluate PromQL over ``[start, end]`` (unix seconds) every ``step_s``
        (``/api/v1/query_range``): the result list (``metric``, ``values`` as [t, "v"] pairs)."""
        return self._api("query_range", {"query": expr, "start": f"{start:.3f}",
                                         "end": f"{end:.3f}", "step": f"{step_s:g}"})["result"]

    def alerts(self) -> list[dict[str, Any]]:
        """Pending and firing alerts (``/api/v1/alerts``): labels, annotations, state, ..."""
        return self._api("alerts")["alerts"]

    def targets_health(self) -> list[dict[str, Any]]:
        """Active scrape targets (``/api/v1/targets``): labels, scrapeUrl, health, lastError."""
        return self._api("targets")["activeTargets"]

    def rule_evaluations(self) -> int:
        """Rule group evaluations done so far, over all groups (from the server's own
        ``/metrics``: scheduled iterations minus missed ones). Each rule in a group is
        evaluated once per group evaluation."""
        samples = samples_from_text(scrape(f"{self.url}/metrics", timeout=10))
        total = sum(s.value for s in samples
                    if s.name == "prometheus_rule_group_iterations_total")
        missed = sum(s.value for s in samples
                     if s.name == "prometheus_rule_group_iterations_missed_total")
        return int(total - missed)

    # Internals.
    def _api(self, path: str, params: dict[str, str] | None = None) -> Any:
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=10) as reply:
                body = json.loads(reply.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            raise ServiceError(f"prometheus {path}: HTTP {exc.code}: {detail}") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise ServiceError(f"prometheus at {self.url} did not answer: {exc}") from exc
        if body.get("status") != "success":
            raise ServiceError(f"prometheus {path}: {body.get('error', body)}")
        return body["data"]

    def _default_binary(self) -> Path | None:
        found = shutil.which("prometheus")
        return Path(found) if found else None

    def _write_config(self, tmpdir: Path, port: int) -> list[str]:
        import yaml

        config = tmpdir / "prometheus.yml"
        config.write_text(yaml.safe_dump(self.config(), sort_keys=False))
        return [f"--config.file={config}", f"--storage.tsdb.path={tmpdir / 'data'}",
                f"--web.listen-address={HOST}:{port}", "--storage.tsdb.retention.time=1h",
                "--log.level=warn"]

    def _ping(self, port: int) -> bool:
        try:
            with urllib.request.urlopen(f"http://{HOST}:{port}/-/ready", timeout=0.5) as reply:
                return reply.status == 200
        except (urllib.error.URLError, OSError):
            return False


# --------------------------------------------------------------------------------------------
# Reading metrics back: the same code for Prometheus query results and raw /metrics text


@dataclass(frozen=True)
class Sample:
    """One series' current value: metric name, labels, value."""

    name: str
    labels: dict[str, str]
    value: float


def samples_from_text(text: str, extra: dict[str, str] | None = None) -> list[Sample]:
    """Parse exposition text (``prometheus_client.parser``); ``extra`` labels are added (the
    rank of the endpoint, as Prometheus would add it)."""
    from prometheus_client.parser import text_string_to_metric_families

    return [Sample(s.name, {**s.labels, **(extra or {})}, float(s.value))
            for family in text_string_to_metric_families(text) for s in family.samples]


def samples_from_query(result: Iterable[dict[str, Any]]) -> list[Sample]:
    """A Prometheus instant-vector result as samples."""
    out = []
    for series in result:
        labels = dict(series["metric"])
        name = labels.pop("__name__", "")
        out.append(Sample(name, labels, float(series["value"][1])))
    return out


def scrape(url: str, timeout: float = 5.0) -> str:
    """GET an exporter's /metrics text."""
    with urllib.request.urlopen(url, timeout=timeout) as reply:
        return reply.read().decode()


def pair_matrix(samples: Iterable[Sample], world: int) -> list[list[float | None]]:
    """``labkit_pair_latency_seconds`` as a world x world list: [src][dst] seconds, None on
    the diagonal and where nothing was measured (``np.array(m, dtype=float)`` makes it NaN)."""
    matrix: list[list[float | None]] = [[None] * world for _ in range(world)]
    for s in samples:
        if s.name == "labkit_pair_latency_seconds":
            src, dst = int(s.labels["src"]), int(s.labels["dst"])
            if 0 <= src < world and 0 <= dst < world and src != dst:
                matrix[src][dst] = s.value
    return matrix


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """Prometheus's ``histogram_quantile`` on cumulative ``(le, count)`` buckets: linear
    interpolation inside the bucket that holds the rank; the +Inf bucket answers with the
    highest finite bound. Like PromQL, ``q`` below 0 gives -Inf and above 1 gives +Inf."""
    if q < 0 or q > 1:
        return float("-inf") if q < 0 else float("inf")
    buckets = sorted(buckets)
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    prev_le, prev_count = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if le == float("inf"):
                return prev_le
            if count == prev_count:
                return le
            return prev_le + (le - prev_le) * (rank - prev_count) / (count - prev_count)
        prev_le, prev_count = le, count
    return prev_le


@dataclass(frozen=True)
class CollectiveSummary:
    """One (op, size) of the collective latency histogram, summed over every rank."""

    op: str
    size_bytes: int
    count: int
    mean_s: float
    p50_s: float | None
    p99_s: float | None


def collective_summaries(samples: Iterable[Sample]) -> list[CollectiveSummary]:
    """Count, mean and p50/p99 (bucket-interpolated) per (op, size), over all ranks."""
    base = "labkit_collective_latency_seconds"
    buckets: dict[tuple[str, int], dict[float, float]] = {}
    sums: dict[tuple[str, int], float] = {}
    counts: dict[tuple[str, int], float] = {}
    for s in samples:
        if not s.name.startswith(base):
            continue
        key = (s.labels.get("op", ""), int(s.labels.get("size_bytes", "0")))
        if s.name == base + "_bucket":
            le = float(s.labels["le"])
            buckets.setdefault(key, {})
            buckets[key][le] = buckets[key].get(le, 0.0) + s.value
        elif s.name == base + "_sum":
            sums[key] = sums.get(key, 0.0) + s.value
        elif s.name == base + "_count":
            counts[key] = counts.get(key, 0.0) + s.value
    rows = []
    for key in sorted(counts):
        n = counts[key]
        cumulative = list(buckets.get(key, {}).items())
        rows.append(CollectiveSummary(
            key[0], key[1], int(n), sums.get(key, 0.0) / n if n else 0.0,
            histogram_quantile(0.5, cumulative), histogram_quantile(0.99, cumulative)))
    return rows


# --------------------------------------------------------------------------------------------
# The experiment


@dataclass(frozen=True)
class AlertState:
    """One alert instance as Prometheus reports it."""

    name: str
    state: str  # "pending" or "firing"
    labels: dict[str, str]
    active_at: str = ""

    @property
    def pair(self) -> tuple[int, int] | None:
        """(src, dst) for a PairLatencyHigh alert."""
        if "src" in self.labels and "dst" in self.labels:
            return int(self.labels["src"]), int(self.labels["dst"])
        return None


@dataclass(frozen=True)
class TargetHealth:
    """One rank's exporter as the scraper saw it."""

    rank: int
    url: str
    health: str  # "up", "down" or "unknown"
    last_error: str = ""


@dataclass
class ObservedJob:
    """What :func:`observe_job` saw: where the numbers came from, the pair latency matrix,
    collective summaries, alerts, target health, and when the first alert fired.

    Times (``targets_up_s``, ``first_pending_s``, ``first_firing_s``) count from the start of
    the watch: when the server started (or, without one, when the ranks published their
    ports). The window (``observed_s``) starts at ``targets_up_s``."""

    world: int
    source: str  # "prometheus" (queried from a real server) or "exporters" (read /metrics)
    note: str  # why the source is what it is
    threshold_s: float
    delay_rank: int | None
    delay_s: float
    pair_latency: list[list[float | None]]  # [src][dst] seconds, None on the diagonal
    collectives: list[CollectiveSummary]
    alerts: list[AlertState]  # pending and firing at the end (empty without Prometheus)
    targets: list[TargetHealth]
    first_pending_s: float | None  # seconds from the watch's start to the first pending alert
    first_firing_s: float | None  # ... and to the first firing one (pending + for_s, or more)
    observed_s: float  # how long the window lasted (from targets_up_s to the end)
    sweeps: int  # ping-pong sweeps the ranks completed
    endpoints: list[str]
    prometheus_url: str = ""  # where the server answered (stopped by the time this returns)
    for_s: float = ALERT_FOR_S
    targets_up_s: float | None = None  # every rank scraped with a finished sweep; None: not
    # within the pickup limit (the window then started at that limit)
    evaluations: int | None = None  # rule evaluations in the window (None: no server, or
    # its count could not be read)
    evaluation_interval_s: float = 1.0
    window_s: float = 0.0  # the window asked for; stop_after_firing_s can end it earlier

    @property
    def fired(self) -> bool:
        return self.first_firing_s is not None

    @property
    def firing(self) -> list[AlertState]:
        return [a for a in self.alerts if a.state == "firing"]

    @property
    def firing_pairs(self) -> list[tuple[int, int]]:
        """(src, dst) of every firing PairLatencyHigh alert, sorted."""
        return sorted(a.pair for a in self.firing
                      if a.name == "PairLatencyHigh" and a.pair is not None)

    @property
    def pending_pairs(self) -> list[tuple[int, int]]:
        """(src, dst) of every PairLatencyHigh alert still pending when the watch ended."""
        return sorted(a.pair for a in self.alerts if a.state == "pending"
                      and a.name == "PairLatencyHigh" and a.pair is not None)

    @property
    def over_threshold(self) -> list[tuple[int, int]]:
        """(src, dst) whose latest latency is above the threshold (what the rule tests)."""
        return [(i, j) for i, row in enumerate(self.pair_latency)
                for j, v in enumerate(row) if v is not None and v > self.threshold_s]

    @property
    def evaluations_to_fire(self) -> int:
        """Consecutive evaluations a condition needs to go pending and then firing."""
        return evaluations_to_fire(self.for_s, self.evaluation_interval_s)

    def healthy_latencies(self) -> list[float]:
        """Latencies of the pairs that do not involve the delayed rank."""
        return [v for i, row in enumerate(self.pair_latency) for j, v in enumerate(row)
                if v is not None and self.delay_rank not in (i, j)]

    def alert_timeline(self) -> str:
        """When the ranks were scraped, when the first alert went pending and firing, and how
        many evaluations the rule had: one line, for a run that fired and one that did not."""
        if self.source != "prometheus":
            return f"no rule was evaluated: {self.note}"
        return "; ".join([self._pickup_text(), self._state_text(), self._evaluations_text()])

    def no_fire_reason(self) -> str:
        """Why a job that should have fired did not, and what to change ("" if it fired)."""
        if self.fired:
            return ""
        if self.source != "prometheus":
            return f"no alerts without a server: {self.note}"
        threshold = _human_seconds(self.threshold_s)
        if self.targets_up_s is None:
            return ("Prometheus had not scraped every rank with a finished sweep by the end of "
                    "the pickup limit: look at the targets' health and lastError")
        if self.evaluations is not None and self.evaluations < self.evaluations_to_fire:
            return (f"the window held {self.evaluations} evaluations, fewer than the "
                    f"{self.evaluations_to_fire} that `for: {self.for_s:g}s` needs: lengthen "
                    "the window (duration_s) or shorten for_s")
        if not self.over_threshold:
            return (f"no pair was above {threshold} in the latest values: the slowdown is "
                    "below the threshold (raise the delay or lower the threshold)")
        return (f"pairs {sorted(self.over_threshold)} were above {threshold} at the end but not "
                f"at every evaluation for {self.for_s:g} s: they crossed late or dipped below; "
                "a longer window (duration_s) shows whether they stay")

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(firing_pairs=[list(p) for p in self.firing_pairs],
                   over_threshold=[list(p) for p in self.over_threshold])
        return out

    def _pickup_text(self) -> str:
        if self.targets_up_s is None:
            return ("not every rank had been scraped with a finished sweep within the pickup "
                    f"limit; the window after it: {self.observed_s:.1f} s")
        return (f"every rank scraped with a finished sweep {self.targets_up_s:.1f} s after the "
                f"start, then watched {self.observed_s:.1f} s")

    def _state_text(self) -> str:
        pending = (f"pending after {self.first_pending_s:.1f} s" if self.first_pending_s is not None
                   else "never pending")
        firing = (f"firing after {self.first_firing_s:.1f} s" if self.first_firing_s is not None
                  else "never firing")
        return f"{pending}, {firing}"

    def _evaluations_text(self) -> str:
        need = (f"firing needs {self.evaluations_to_fire} in a row above "
                f"{_human_seconds(self.threshold_s)} (for: {self.for_s:g} s, one every "
                f"{self.evaluation_interval_s:g} s)")
        if self.evaluations is None:
            return f"the evaluation count could not be read; {need}"
        times = "once" if self.evaluations == 1 else f"{self.evaluations} times"
        return f"the rule was evaluated {times} in the window; {need}"


def evaluations_to_fire(for_s: float, evaluation_interval_s: float = 1.0) -> int:
    """Consecutive rule evaluations a condition needs to fire: one that makes it pending, then
    enough to cover ``for_s``."""
    return 1 + max(1, math.ceil(for_s / evaluation_interval_s - 1e-9))


def rule_window_s(for_s: float, evaluations: int = MIN_EVALUATIONS,
                  evaluation_interval_s: float = 1.0) -> float:
    """The shortest watch that gives a rule with ``for: for_s`` a fair chance: the evaluations
    it needs to fire, plus ``evaluations`` more."""
    return (evaluations_to_fire(for_s, evaluation_interval_s) + evaluations) * evaluation_interval_s


def _human_seconds(seconds: float) -> str:
    return f"{seconds * 1e6:.0f} us" if seconds < 1e-3 else f"{seconds * 1e3:.3g} ms"


@dataclass(frozen=True)
class SlowLinkPlan:
    """The slow-link run's rule threshold and injected delay, and where they came from."""

    threshold_s: float
    delay_s: float
    healthy_p99_s: float | None  # p99 of the healthy latencies it was derived from
    healthy_samples: int
    reason: str  # one line: which floor or measurement set each number


SLOW_LINK_MARGIN = 3.0
"""The slowed pairs' one-way latency is planned at least this many thresholds."""


def plan_slow_link(healthy_s: Sequence[float], threshold_floor_s: float,
                   threshold_factor: float = 3.0, delay_floor_s: float = 0.0,
                   margin: float = SLOW_LINK_MARGIN) -> SlowLinkPlan:
    """Threshold = max(``threshold_floor_s``, p99 of ``healthy_s`` x ``threshold_factor``): the
    rule stays above the healthy tail this machine measured. Delay = max(``delay_floor_s``,
    2 x ``margin`` x threshold): a rank that sleeps d before each send adds d / 2 to a pair's
    one-way latency (median round trip / 2), so its pairs land ``margin`` thresholds up."""
    if threshold_floor_s <= 0 or threshold_factor <= 0 or margin <= 1:
        raise LabkitError("need threshold_floor_s > 0, threshold_factor > 0 and margin > 1")
    import numpy as np

    p99 = float(np.percentile(healthy_s, 99)) if len(healthy_s) else None
    derived = p99 * threshold_factor if p99 is not None else 0.0
    threshold = max(threshold_floor_s, derived)
    if p99 is None:
        why = (f"threshold {_human_seconds(threshold)}: the floor (no healthy sample to derive "
               "from)")
    elif derived > threshold_floor_s:
        why = (f"threshold {_human_seconds(threshold)} = healthy p99 {_human_seconds(p99)} x "
               f"{threshold_factor:g} (above the {_human_seconds(threshold_floor_s)} floor)")
    else:
        why = (f"threshold {_human_seconds(threshold)}: the floor (healthy p99 "
               f"{_human_seconds(p99)} x {threshold_factor:g} = {_human_seconds(derived)} is "
               "below it)")
    needed = 2 * margin * threshold
    delay = max(delay_floor_s, needed)
    why += (f"; delay {_human_seconds(delay)} per send: "
            + (f"2 x {margin:g} x the threshold, above the {_human_seconds(delay_floor_s)} asked for"
               if needed > delay_floor_s * (1 + 1e-9) else
               f"as asked (at least 2 x {margin:g} x the threshold = {_human_seconds(needed)})"))
    return SlowLinkPlan(threshold, delay, p99, len(healthy_s), why)


class _LaunchThread(threading.Thread):
    """launch_local in the background: the parent scrapes while the ranks run."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(daemon=True, name="labkit-observe-launch")
        self.args, self.kwargs = args, kwargs
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        from labkit.runtime.launch import launch_local

        try:
            self.result = launch_local(*self.args, **self.kwargs)
        except BaseException as exc:  # handed to the parent thread
            self.error = exc

    def raise_failure(self) -> None:
        """Raise what went wrong: the launcher's exception, or the failed launch's error."""
        if self.error is not None:
            raise self.error
        if self.result is not None:
            self.result.check()


def _wait_for_ports(run_dir: Path, launch: _LaunchThread, timeout_s: float) -> list[int]:
    path = run_dir / PORTS_FILE
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            return [int(p) for p in json.loads(path.read_text())["ports"]]
        if not launch.is_alive():
            launch.raise_failure()
            raise LaunchError("the ranks ended before they published their metrics ports")
        time.sleep(0.1)
    raise LaunchError(f"the ranks did not publish their metrics ports within {timeout_s:g} s")


def _alert_states(raw: list[dict[str, Any]]) -> list[AlertState]:
    return [AlertState(a["labels"].get("alertname", ""), a.get("state", ""),
                       {k: v for k, v in a["labels"].items() if k != "alertname"},
                       a.get("activeAt", "")) for a in raw]


def _sweeps_in(samples: Iterable[Sample]) -> int:
    return int(next((s.value for s in samples if s.name == "labkit_pingpong_sweeps_total"), 0))


def _every_rank_swept(prom: PrometheusServer | None, endpoints: Sequence[str]) -> bool:
    """True once every rank has a finished ping-pong sweep where the watch reads it: scraped
    by Prometheus (its target up and its sweep counter stored), or on its own /metrics."""
    if prom is None:
        for endpoint in endpoints:
            try:
                if _sweeps_in(samples_from_text(scrape(f"http://{endpoint}/metrics"))) < 1:
                    return False
            except (urllib.error.URLError, OSError, ValueError):
                return False
        return True
    targets = prom.targets_health()
    swept = prom.query("labkit_pingpong_sweeps_total > 0")
    return (len(targets) == len(endpoints) and all(t["health"] == "up" for t in targets)
            and len(swept) == len(endpoints))


def _rule_evaluations(prom: PrometheusServer | None) -> int | None:
    if prom is None:
        return None
    try:
        return prom.rule_evaluations()
    except (ServiceError, urllib.error.URLError, OSError, ValueError):
        return None


@dataclass
class _Watch:
    """The watch loop's clock and what it saw; times from ``began`` (monotonic seconds)."""

    began: float
    window_s: float
    pickup_timeout_s: float
    stop_after_firing_s: float | None
    targets_up_s: float | None = None
    window_from_s: float | None = None
    first_pending_s: float | None = None
    first_firing_s: float | None = None
    evaluations_before: int | None = None
    ended_s: float = 0.0

    def now(self) -> float:
        return time.monotonic() - self.began

    def done(self, now: float) -> bool:
        if self.window_from_s is not None and now - self.window_from_s >= self.window_s:
            return True
        return (self.first_firing_s is not None and self.stop_after_firing_s is not None
                and now >= self.first_firing_s + self.stop_after_firing_s)


def _watch(prom: PrometheusServer | None, endpoints: Sequence[str], launch: _LaunchThread,
           watch: _Watch) -> _Watch:
    """Wait until every rank is scraped with a finished sweep (or the pickup limit), then
    watch the window; meanwhile note when the first alert went pending and firing."""
    while True:
        now = watch.now()
        if watch.done(now):
            watch.ended_s = now
            return watch
        if not launch.is_alive():
            launch.raise_failure()
            raise LaunchError("the ranks ended before the observation did")
        if watch.window_from_s is None:
            if _every_rank_swept(prom, endpoints):
                watch.targets_up_s = watch.window_from_s = now
                watch.evaluations_before = _rule_evaluations(prom)
            elif now >= watch.pickup_timeout_s:
                watch.window_from_s = now
                watch.evaluations_before = _rule_evaluations(prom)
        if prom is not None and watch.first_firing_s is None:
            states = {a.get("state") for a in prom.alerts()}
            if states and watch.first_pending_s is None:
                watch.first_pending_s = now
            if "firing" in states:
                watch.first_firing_s = now
        time.sleep(_POLL_S)


def _read_back(prom: PrometheusServer | None, endpoints: Sequence[str]
               ) -> tuple[list[Sample], list[AlertState], list[TargetHealth]]:
    """The latest samples, alerts and target health: from the server, or from each exporter."""
    if prom is not None:
        samples = samples_from_query(prom.query('{__name__=~"labkit_.+"}'))
        targets = sorted((TargetHealth(int(t["labels"].get("rank", -1)), t["scrapeUrl"],
                                       t["health"], t.get("lastError", ""))
                          for t in prom.targets_health()), key=lambda t: t.rank)
        return samples, _alert_states(prom.alerts()), targets
    samples, targets = [], []
    for rank, endpoint in enumerate(endpoints):
        url = f"http://{endpoint}/metrics"
        try:
            samples += samples_from_text(scrape(url), {"rank": str(rank)})
            targets.append(TargetHealth(rank, url, "up"))
        except (urllib.error.URLError, OSError, ValueError) as exc:
            targets.append(TargetHealth(rank, url, "down", str(exc)))
    return samples, [], targets


def observe_job(
    world: int = 4,
    rounds: int = 10,
    delay_rank: int | None = None,
    delay_s: float = 0.005,
    with_prometheus: bool = True,
    duration_s: float = 12.0,
    threshold_s: float = PAIR_LATENCY_THRESHOLD_S,
    for_s: float = ALERT_FOR_S,
    nnodes: int = 1,
    interval_s: float = 0.2,
    sizes: Sequence[int] = (4096, 262144),
    ops: Sequence[str] = ("all_reduce", "all_gather", "broadcast"),
    startup_timeout_s: float | None = None,
    stop_after_firing_s: float | None = None,
    run_dir: str | os.PathLike[str] | None = None,
    echo: Any = None,
    min_evaluations: int = MIN_EVALUATIONS,
    pickup_timeout_s: float = PICKUP_TIMEOUT_S,
) -> ObservedJob:
    """Launch ``world`` gloo ranks (``nnodes`` simulated nodes) that serve metrics and loop:
    collectives at ``sizes``, then a ping-pong sweep over every ordered pair (``rounds`` round
    trips each), then ``interval_s`` of rest. With ``delay_rank`` that rank sleeps ``delay_s``
    before each send (a slowed link: every pair it is in gets slower).

    With ``with_prometheus`` and a prometheus binary, a real server scrapes the ranks with
    rules at ``threshold_s``/``for_s``; otherwise the exporters are read directly (``source``
    says which, ``note`` why). The window starts once every rank has been scraped with a
    finished sweep (Prometheus picks up new targets on a 5 s tick; ``pickup_timeout_s`` bounds
    that wait) and lasts ``duration_s``, and with rules at least :func:`rule_window_s` (``for_s``
    plus ``min_evaluations`` evaluations), so a rule that did not fire had its chances.
    ``stop_after_firing_s`` ends it that long after the first alert fires, but never before the
    alerts pending by then had the evaluations they need to fire too. The ranks' start-up
    is bounded by ``startup_timeout_s`` (default: derived from this machine's measured torch
    import, never below 90 s). The ranks then stop; the launch always ends (timeout) and
    nothing it started stays behind."""
    if world < 2 or world % nnodes:
        raise LabkitError(f"need world >= 2 ranks split evenly over nnodes, got world={world}, "
                          f"nnodes={nnodes}")
    if delay_rank is not None and not 0 <= delay_rank < world:
        raise LabkitError(f"delay_rank must be a rank in 0..{world - 1}, got {delay_rank}")
    use_prom, note = False, "with_prometheus=False: read each rank's /metrics directly"
    if with_prometheus:
        use_prom, found = PrometheusServer.available()
        note = f"a real Prometheus ({found}) scraped the ranks" if use_prom else (
            f"{found}; read each rank's /metrics directly, no alerts")
    if startup_timeout_s is None:  # every rank and agent imports torch at once
        startup_timeout_s = max(STARTUP_FLOOR_S, startup_allowance_s(world + nnodes))
    evaluation_interval_s = PrometheusServer.evaluation_interval_s
    window_s = max(duration_s, rule_window_s(for_s, min_evaluations, evaluation_interval_s)
                   if use_prom else 0.0)
    watch_limit_s = pickup_timeout_s + window_s
    if stop_after_firing_s is not None:  # let the alerts pending at the first firing fire too
        stop_after_firing_s = max(stop_after_firing_s, evaluation_interval_s
                                  * evaluations_to_fire(for_s, evaluation_interval_s))
    own_dir = run_dir is None
    folder = Path(tempfile.mkdtemp(prefix="labkit-metrics-") if own_dir else run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    for stale in (PORTS_FILE, STOP_FILE):
        (folder / stale).unlink(missing_ok=True)
    cfg = {"rounds": rounds, "delay_rank": delay_rank, "delay_s": delay_s,
           "interval_s": interval_s, "sizes": list(sizes), "ops": list(ops),
           "max_s": startup_timeout_s + watch_limit_s + 60.0}
    launch = _LaunchThread(
        RANK_SCRIPT, json.dumps(cfg), nnodes=nnodes,
        nproc_per_node=world // nnodes, timeout_s=startup_timeout_s + watch_limit_s + 90.0,
        env={"LABKIT_BACKEND": "gloo"}, echo=echo, run_dir=folder)
    prom: PrometheusServer | None = None
    try:
        launch.start()
        ports = _wait_for_ports(folder, launch, startup_timeout_s)
        endpoints = [f"{HOST}:{p}" for p in ports]
        if use_prom:
            rules = folder / "labkit.rules.yml"
            rules.write_text(alert_rules(threshold_s, for_s))
            prom = PrometheusServer(
                targets=[ScrapeTarget(e, {"rank": str(r)}) for r, e in enumerate(endpoints)],
                rule_files=[rules]).start()
        watch = _watch(prom, endpoints, launch, _Watch(
            time.monotonic(), window_s, pickup_timeout_s, stop_after_firing_s))
        evaluations_after = _rule_evaluations(prom)
        samples, alerts, targets = _read_back(prom, endpoints)
        prom_url = prom.url if prom is not None else ""
    finally:
        (folder / STOP_FILE).touch()
        launch.join(timeout=startup_timeout_s + watch_limit_s + 120.0)
        if prom is not None:
            prom.stop()
        if own_dir:
            shutil.rmtree(folder, ignore_errors=True)
    if launch.is_alive():  # launch_local's own timeout ends it well before this
        raise LaunchError("the metrics job did not end after its stop file and timeout")
    launch.raise_failure()
    published = launch.result.published or {}
    evaluations = (evaluations_after - watch.evaluations_before
                   if evaluations_after is not None and watch.evaluations_before is not None
                   else None)
    return ObservedJob(
        world=world, source="prometheus" if use_prom else "exporters", note=note,
        threshold_s=threshold_s, delay_rank=delay_rank, delay_s=delay_s,
        pair_latency=pair_matrix(samples, world), collectives=collective_summaries(samples),
        alerts=alerts, targets=targets, first_pending_s=watch.first_pending_s,
        first_firing_s=watch.first_firing_s,
        observed_s=watch.ended_s - (watch.ended_s if watch.window_from_s is None
                                    else watch.window_from_s),
        sweeps=int(published.get("sweeps", 0)), endpoints=endpoints, prometheus_url=prom_url,
        for_s=for_s, targets_up_s=watch.targets_up_s, evaluations=evaluations,
        evaluation_interval_s=evaluation_interval_s, window_s=window_s,
    )
