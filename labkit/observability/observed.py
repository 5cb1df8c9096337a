"""What ``observe_job`` saw, as data: the alerts pending and firing, each target's health, the pair
latency matrix and collective summaries, and when the first alert went pending and fired.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from labkit.observability.readback import (
    CollectiveSummary,
)
from labkit.observability.rules import ALERT_FOR_S, evaluations_to_fire, human_seconds


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
    answers: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # PromQL asked at the
    # end of the window (``queries``), by name: Prometheus's result vectors as it returned them
    pair_history: list[tuple[int, int, int, float]] = field(default_factory=list)  # with
    # keep_history: every pair latency once per sweep, (src, dst, sweep, seconds)

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
        threshold = human_seconds(self.threshold_s)
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
                f"{human_seconds(self.threshold_s)} (for: {self.for_s:g} s, one every "
                f"{self.evaluation_interval_s:g} s)")
        if self.evaluations is None:
            return f"the evaluation count could not be read; {need}"
        times = "once" if self.evaluations == 1 else f"{self.evaluations} times"
        return f"the rule was evaluated {times} in the window; {need}"
