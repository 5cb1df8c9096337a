"""Watch a running job live and name the rank that hangs it, long before the collective timeout.

``Watch(url, job, world_size).run()`` follows what the ranks already publish
(``labkit.hangs.live``): their heartbeats in Redis (where each serves its metrics and writes its
dumps) and their Prometheus exporters (collectives entered and returned, calls in flight, step
durations). It raises the alarm when

* the ranks' collective counts disagree, or a rank is inside a collective or a lock wait, and
* nothing progressed (no collective entered or returned, no step) for ``threshold_s``:
  ``STEP_FACTOR`` times the slowest step the job published, and at least ``POLL_FACTOR`` of the
  watch's own polls, both measured in this run (never a fixed number of seconds). A poll that
  came late (the whole machine paused) counts at most ``LATE_POLL`` typical polls.

Then, while the ranks are alive, every rank on this host gets SIGUSR1: faulthandler writes its
Python stacks and its recorder dumps both flight recorders (labkit's and PyTorch's; no ptrace).
The watch names the culprit, the collective and its sequence number from the dumps
(``labkit.hangs.diagnose``), with what the counts alone say beside it, and with
``end_job=True`` SIGTERMs the ranks. A rank whose exporter stops answering before it left the
control plane died or failed, and a rank whose exporter counts a call that raised (a timeout, a
lost peer, a mismatch) is failing: the job is ending by itself, and the watch names the culprit
the same way from the ranks' dumps.
"""

from __future__ import annotations

import os
import signal
import socket
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from labkit.hangs.diagnose import diagnose, load_dumps, main_thread_stack
from labkit.hangs.live import DUMPS, METRICS_URL, STACKS
from labkit.hangs.recorder import ON_DEMAND, dump_path
from labkit.hangs.watch_view import RankView, count_verdict, counts_disagree, read_view
from labkit.orchestration.fleet import AgentStatus, fleet_status

STEP_FACTOR = 30.0  # no progress for this many of the slowest step seen...
POLL_FACTOR = 10  # ...and for at least this many of the watch's polls
MIN_STEPS = 1  # timed steps (after the warm-up) every rank published before the watch arms
LATE_POLL = 2.0  # a late poll counts at most this many typical poll periods towards a stall
IDLE_POLLS = 2  # sleep between polls: this many times what the last poll took
OUTCOMES = ("hang", "failed", "finished", "quiet", "not_started")

Echo = Callable[[str], None]


@dataclass
class WatchResult:
    """What the watch saw. ``outcome``: hang (alarm, ranks alive), failed (a rank went away
    without leaving), finished (every rank left), quiet (watched until told to stop, nothing
    wrong), not_started (the ranks never all showed up). Times are ``time.time()``."""

    job: str
    outcome: str = "not_started"
    reason: str = ""
    alarm_at: float | None = None
    hang_started_at: float | None = None
    threshold_s: float | None = None
    slowest_step_s: float | None = None
    poll_s: float | None = None
    culprit_rank: int | None = None
    kind: str = ""
    op: str = ""
    seq: int | None = None
    counts_say: str = ""
    evidence: list[str] = field(default_factory=list)
    stacks: dict[int, str] = field(default_factory=dict)
    signalled: list[int] = field(default_factory=list)
    dumped: list[int] = field(default_factory=list)
    ended_job: bool = False
    ended_at: float | None = None  # when the watch sent SIGTERM (time.time())
    steps_seen: int = 0  # the most steps every rank had published at one poll
    watched_s: float = 0.0
    timeline: list[tuple[float, str]] = field(default_factory=list)

    @property
    def detected_within_s(self) -> float | None:
        """From the hang's start (its first call that never completed everywhere, on the ranks'
        clocks) to the alarm."""
        if self.alarm_at is None or self.hang_started_at is None:
            return None
        return max(0.0, self.alarm_at - self.hang_started_at)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "detected_within_s": self.detected_within_s}


class Watch:
    """One live watch over the job ``job`` of ``world_size`` ranks in the Redis at ``url``."""

    def __init__(self, url: str, job: str, world_size: int, *, end_job: bool = False,
                 echo: Echo | None = None, stop: threading.Event | None = None) -> None:
        self.url, self.job, self.world_size, self.end_job = url, job, world_size, end_job
        self.echo = echo
        self.stop = stop or threading.Event()
        self.result = WatchResult(job)
        self._began = time.monotonic()
        self._agents: dict[int, AgentStatus] = {}

    # --- the loop --------------------------------------------------------------------------
    def run(self) -> WatchResult:
        """Watch until a verdict, or until ``stop`` is set."""
        if self._discover():
            self._follow()
        self.result.watched_s = round(time.monotonic() - self._began, 3)
        return self.result

    def _note(self, text: str) -> None:
        self.result.timeline.append((round(time.monotonic() - self._began, 3), text))
        if self.echo:
            self.echo(f"[watch {self.job}] {text}")

    def _discover(self) -> bool:
        """Wait for every rank's heartbeat with its metrics address."""
        while not self.stop.is_set():
            began = time.monotonic()
            try:
                agents = [a for a in fleet_status(self.url, self.job)
                          if a.rank is not None and METRICS_URL in a.extra]
            except Exception as exc:  # noqa: BLE001 (Redis down: say so, keep trying)
                agents, self.result.reason = [], f"control plane: {exc}"
            self._agents = {a.rank: a for a in agents if a.rank is not None}
            if len(self._agents) >= self.world_size:
                self._note(f"found {len(self._agents)} ranks in the control plane")
                return True
            self.stop.wait(IDLE_POLLS * (time.monotonic() - began))
        self.result.reason = f"{len(self._agents)} of {self.world_size} ranks showed up"
        return False

    def _poll(self) -> list[RankView]:
        limit = max(1.0, 10 * (self.result.poll_s or 0.1))  # a scrape that hangs is no view
        return [read_view(r, a.extra[METRICS_URL], limit) for r, a in sorted(self._agents.items())]

    def _follow(self) -> None:
        periods: list[float] = []
        last_progress: tuple | None = None
        stalled_s, stalled_polls, last = 0.0, 0, None
        r = self.result
        while not self.stop.is_set():
            began = time.monotonic()
            views = self._poll()
            took = time.monotonic() - began
            periods.append(took * (1 + IDLE_POLLS) if last is None else began - last)
            last = began
            typical = statistics.median(periods[-50:])
            r.poll_s = round(typical, 4)
            reached = [v.steps for v in views if v.reachable]
            r.steps_seen = max(r.steps_seen, min(reached, default=0))
            gone = [v.rank for v in views if not v.reachable]
            if gone and self._ended(views, gone):
                return
            if failing := [v for v in views if v.failed]:  # the job is ending by itself
                self._alarm("failed", "; ".join(f"rank {v.rank}: {', '.join(v.failed)} raised"
                                                for v in failing), views)
                return
            progress = tuple(v.progress for v in views)
            if progress != last_progress:
                last_progress, stalled_s, stalled_polls = progress, 0.0, 0
            else:
                stalled_s += min(periods[-1], LATE_POLL * typical)
                stalled_polls += 1
            armed = all(v.steps >= MIN_STEPS for v in views)
            if armed and r.threshold_s is None:
                self._arm(views, typical)
            suspicious = counts_disagree(views) or any(v.busy for v in views)
            if armed and suspicious and stalled_polls >= POLL_FACTOR \
                    and stalled_s >= (r.threshold_s or 0.0):
                self._alarm("hang", f"no progress for {stalled_s:.2f} s (threshold "
                            f"{r.threshold_s:.2f} s) while " + _why(views), views)
                return
            self.stop.wait(IDLE_POLLS * took)
        r.outcome = "quiet"
        r.reason = "watched until the job was over: no alarm"

    def _arm(self, views: list[RankView], typical: float) -> None:
        r = self.result
        r.slowest_step_s = max((v.slowest_step_s or 0.0) for v in views) or None
        r.threshold_s = round(max(STEP_FACTOR * (r.slowest_step_s or 0.0),
                                  POLL_FACTOR * typical), 3)
        self._note(f"armed: slowest step {r.slowest_step_s} s, poll {typical * 1000:.1f} ms: "
                   f"alarm after {r.threshold_s} s without progress")

    def _ended(self, views: list[RankView], gone: list[int]) -> bool:
        """A rank stopped answering: a clean end if it left the control plane, else a failure."""
        try:
            states = {a.rank: a.state for a in fleet_status(self.url, self.job)}
        except Exception:  # noqa: BLE001
            states = {}
        died = [rank for rank in gone if states.get(rank) != "left"]
        if died:
            self._alarm("failed", f"rank(s) {', '.join(map(str, died))} stopped answering "
                        "without leaving the control plane", views)
            return True
        if len(gone) == len(views):
            self.result.outcome, self.result.reason = "finished", "every rank left the job"
            self._note(self.result.reason)
            return True
        return False

    # --- the verdict -----------------------------------------------------------------------
    def _alarm(self, outcome: str, reason: str, views: list[RankView]) -> None:
        r = self.result
        r.outcome, r.reason, r.alarm_at = outcome, reason, time.time()
        self._note(f"ALARM ({outcome}): {reason}")
        rank, kind, where = count_verdict(views)
        r.counts_say = f"rank {rank} {kind} ({where})" if rank is not None else f"{kind}: {where}"
        self._capture([v.rank for v in views if v.reachable])
        folder = Path(next(iter(self._agents.values())).extra.get(DUMPS, "."))
        found = diagnose(load_dumps(folder), self.world_size, r.stacks, at=r.alarm_at)
        r.culprit_rank, r.kind, r.op, r.seq = found.culprit_rank, found.kind, found.op, found.seq
        r.hang_started_at, r.evidence = found.hang_started_at, found.evidence
        self._note(f"verdict: rank {r.culprit_rank} ({r.kind}), {r.op or '-'} seq {r.seq}; "
                   f"counts alone: {r.counts_say}")
        if self.end_job:
            r.ended_at = time.time()
            self._signal(r.signalled or [v.rank for v in views if v.reachable], signal.SIGTERM)
            r.ended_job = True
            self._note("ended the job (SIGTERM to every rank)")

    def _signal(self, ranks: list[int], signum: int) -> list[int]:
        """Signal the ranks on this host; the ranks it reached."""
        here, reached = socket.gethostname(), []
        for rank in ranks:
            agent = self._agents[rank]
            if agent.pid is None or agent.host != here:
                self.result.evidence.append(f"rank {rank} runs on {agent.host}: signal it there "
                                            f"(kill -{signal.Signals(signum).name[3:]} "
                                            f"{agent.pid})")
                continue
            try:
                os.kill(agent.pid, signum)
                reached.append(rank)
            except ProcessLookupError:
                pass
        return reached

    def _capture(self, alive: list[int]) -> None:
        """SIGUSR1 to every live rank, then wait for their on-demand dumps (or their end)."""
        r = self.result
        asked = time.time()
        r.signalled = self._signal(alive, signal.SIGUSR1)
        self._note(f"SIGUSR1 to ranks {r.signalled}: stacks and both flight recorders")
        limit = time.monotonic() + max(r.threshold_s or 0.0, POLL_FACTOR * (r.poll_s or 0.1))
        waiting = set(r.signalled)
        while waiting and time.monotonic() < limit:
            for rank in list(waiting):
                if _dumped_since(self._agents[rank], rank, asked) or not _alive(self._agents[rank]):
                    waiting.discard(rank)
            time.sleep(r.poll_s or 0.05)
        r.dumped = sorted(set(r.signalled) - waiting)
        for rank, agent in self._agents.items():
            path = Path(agent.extra.get(STACKS, ""))
            if path.is_file() and (stack := main_thread_stack(path.read_text(errors="replace"))):
                r.stacks[rank] = stack
        self._note(f"dumps from ranks {r.dumped}" + (f"; none from {sorted(waiting)} in time"
                                                     if waiting else ""))


def format_watch(watch: WatchResult | None, error: str = "", within_s: float | None = None,
                 timeout_s: float | None = None) -> str:
    """One line for a live watch's result."""
    if watch is None:
        return f"not run ({error or 'no result'})"
    if watch.culprit_rank is None and watch.outcome not in ("hang", "failed"):
        return f"{watch.outcome}: {watch.reason}"
    when = "" if within_s is None else f" {within_s:.2f} s after the hang began"
    share = f" ({within_s / timeout_s:.0%} of the timeout)" \
        if within_s is not None and timeout_s else ""
    return (f"{watch.outcome}{when}{share}: rank {watch.culprit_rank} ({watch.kind}, "
            f"{watch.op or '-'} seq {watch.seq}); counts alone: {watch.counts_say}")


def _why(views: list[RankView]) -> str:
    inside = [f"rank {v.rank} in {', '.join(v.in_flight)}" for v in views if v.busy]
    counts = "collective counts disagree" if counts_disagree(views) else ""
    return "; ".join(p for p in (counts, "; ".join(inside)) if p)


def _alive(agent: AgentStatus) -> bool:
    try:
        os.kill(agent.pid or 0, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return bool(agent.pid)


def _dumped_since(agent: AgentStatus, rank: int, since: float) -> bool:
    import json

    try:
        dump = json.loads(dump_path(Path(agent.extra.get(DUMPS, ".")), rank).read_text())
    except (OSError, ValueError):
        return False
    return any(t >= since and why.startswith(ON_DEMAND) for t, why in dump.get("triggers", []))
