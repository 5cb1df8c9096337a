"""The control run for the live watch: the scenarios' loop with nobody deviating, watched for as
long as a hang would take to time out, must raise no alarm.

    from labkit.hangs.healthy import run_healthy
    report = run_healthy(timeout_s=5)   # report.false_alarm is False, report.watch.outcome "finished"
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from labkit.hangs.launched import LAUNCH_ALLOWANCE_S, Echo, launch_watched
from labkit.hangs.scenarios import HEALTHY, check_timeout
from labkit.hangs.watch import WatchResult
from labkit.runtime.rank_script import rank_script


@dataclass
class HealthyReport:
    """A healthy job watched live. ``steps``: the most steps every rank had published when
    the watch last looked; ``false_alarm``: the watch raised one."""

    timeout_s: float
    duration_s: float
    exit_ok: bool
    steps: int
    launch_seconds: float
    watch: WatchResult | None
    watch_error: str = ""

    @property
    def false_alarm(self) -> bool:
        return self.watch is not None and self.watch.outcome in ("hang", "failed")

    @property
    def watched_all_of_it(self) -> bool:
        """The watch followed the job to its end (it did not stop early or never start)."""
        return self.watch is not None and self.watch.outcome == "finished"

    def to_dict(self) -> dict[str, Any]:
        return {"timeout_s": self.timeout_s, "duration_s": self.duration_s,
                "exit_ok": self.exit_ok, "steps": self.steps,
                "launch_seconds": self.launch_seconds, "false_alarm": self.false_alarm,
                "watched_all_of_it": self.watched_all_of_it, "watch_error": self.watch_error,
                "watch": self.watch.to_dict() if self.watch else None}


def run_healthy(timeout_s: float | None = None, duration_s: float | None = None,
                echo: Echo | None = None) -> HealthyReport:
    """Run the healthy loop for ``duration_s`` (default: the collective timeout, the time a
    hang takes to be detected without the watch), watched live."""
    timeout_s = check_timeout(timeout_s)
    duration_s = timeout_s if duration_s is None else float(duration_s)
    config = {"scenario": HEALTHY.name, "timeout_s": timeout_s, "duration_s": duration_s}
    got = launch_watched(rank_script("labkit.hangs.run"), HEALTHY, config,
                         duration_s + timeout_s + LAUNCH_ALLOWANCE_S, {}, echo,
                         analyze_torch=False)
    steps = got.watch.steps_seen if got.watch else 0
    return HealthyReport(timeout_s, duration_s, got.result.ok, steps,
                         round(got.seconds, 1), got.watch, got.watch_error)
