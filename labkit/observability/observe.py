"""Lesson 13's experiment: a job whose every rank exports metrics, a real Prometheus that scrapes
them, and an alert that fires when one link between two ranks gets slow.

The guide's team ran "Prometheus + Grafana with a custom NCCL metrics exporter" that "alerts
when communication latencies exceed 500us". :func:`observe_job` is that setup at lab size: it
launches gloo ranks (``observe_rank.py``) that run collectives and ping-pong, optionally with one
rank delaying every send (a slowed link), scrapes them and reports the matrix, collective
summaries, alerts and target health. Its watch starts when every rank has been scraped with a
finished sweep and lasts at least ``for:`` plus a few rule evaluations, so "the rule never fired"
is a result, not a window that was too short. :func:`plan_slow_link` derives the slow-link run's
threshold and injected delay from the healthy latencies measured in the same run, so the lesson
holds on a faster or slower machine.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from labkit.errors import LabkitError, LaunchError, ServiceError
from labkit.observability.readback import (
    CollectiveSummary,
    Sample,
    collective_summaries,
    pair_matrix,
    samples_from_query,
    samples_from_text,
    scrape,
)
from labkit.observability.rules import ALERT_FOR_S, PAIR_LATENCY_THRESHOLD_S, alert_rules
from labkit.runtime.pace import startup_allowance_s
from labkit.runtime.rank_script import rank_script
from labkit.services.base import HOST
from labkit.services.prometheus import PrometheusServer, ScrapeTarget

RANK_SCRIPT = rank_script(__name__)

PORTS_FILE = "metrics_ports.json"  # rank 0 writes every rank's exporter port here

STOP_FILE = "stop"  # the parent creates it in the run dir: the ranks finish their loop

MIN_EVALUATIONS = 5


"""A watch with rules lasts at least ``for:`` plus this many rule evaluations after every rank
was scraped: enough chances for a condition to fire, so "never fired" means something."""


PICKUP_TIMEOUT_S = 300.0


"""Bounds the wait for every rank to be scraped with a finished sweep (a hang bound: Prometheus
picks up new targets on a 5 s tick, and a sweep takes well under a second on an idle machine)."""


STARTUP_FLOOR_S = 90.0  # the ranks' start-up bound is never below this (see observe_job)

_POLL_S = 0.25  # how often the watch reads the alerts and the targets


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
