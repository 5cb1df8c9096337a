"""The watch behind ``observe_job``: the job launched in a thread, its exporters' ports read from
the run folder, and a poll of Prometheus's alerts and targets that starts once every rank was
scraped with a finished sweep and lasts the window the rules need, every wait bounded.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labkit.errors import LaunchError, ServiceError
from labkit.observability.exporter import PORTS_FILE
from labkit.observability.observed import AlertState, TargetHealth
from labkit.observability.readback import (
    Sample,
    samples_from_query,
    samples_from_text,
    scrape,
)
from labkit.services.prometheus import PrometheusServer

_POLL_S = 0.25  # how often the watch reads the alerts and the targets


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


class PairHistory(threading.Thread):
    """A second scraper next to Prometheus: every ``every_s`` it reads each rank's exporter and
    keeps each pair latency once per sweep of the rank that measured it, so a run yields every
    sample, not just the latest one a scrape saw. ``samples``: (src, dst, sweep, seconds)."""

    def __init__(self, endpoints: Sequence[str], every_s: float = 0.25) -> None:
        super().__init__(daemon=True, name="labkit-observe-history")
        self.endpoints, self.every_s = list(endpoints), every_s
        self.stop = threading.Event()
        self._seen: dict[tuple[int, int, int], float] = {}

    def run(self) -> None:
        while not self.stop.is_set():
            for endpoint in self.endpoints:
                try:
                    samples = samples_from_text(scrape(f"http://{endpoint}/metrics", timeout=2))
                except (OSError, ValueError):  # the rank has stopped serving
                    continue
                sweep = _sweeps_in(samples)
                for s in samples:
                    if s.name == "labkit_pair_latency_seconds" and sweep:
                        self._seen[(int(s.labels["src"]), int(s.labels["dst"]), sweep)] = s.value
            self.stop.wait(self.every_s)

    def finish(self) -> list[tuple[int, int, int, float]]:
        self.stop.set()
        self.join(timeout=10)
        return [(*key, value) for key, value in sorted(self._seen.items())]


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
