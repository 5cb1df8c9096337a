"""Measuring detection: how long after an agent dies the control plane shows it ``dead``, against
the bound ``dead_after_s`` gives, with real agent processes and a real Redis.
"""

from __future__ import annotations

import random
import subprocess
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING

from labkit.errors import LaunchError, ParameterError

if TYPE_CHECKING:
    pass
from labkit.orchestration.control import (
    DEAD,
    DRAIN_S,
    STOP_GRACE_S,
    _check_name,
    _check_seconds,
    _check_timing,
    dead_after_s,
    spawn_agent,
)
from labkit.orchestration.fleet import AgentStatus, fleet_status, forget


@dataclass
class DetectionResult:
    """What :func:`measure_detection` saw. Times in seconds, measured by the watcher."""

    ttl_s: float
    interval_s: float
    poll_s: float
    killed: str
    """The agent that got SIGKILL."""
    detection_s: float
    """From the SIGKILL to the end of the first status read that showed it dead."""
    silent_at_kill_s: float
    """How long it had not beaten when killed (its age when found dead minus detection_s):
    detection_s is about ttl_s minus this, plus up to one poll."""
    terminated: str
    """The agent that got SIGTERM."""
    left_s: float
    """From the SIGTERM to the first status that showed it ``left`` (includes its drain)."""
    terminated_exit_code: int
    bound_s: float
    """:func:`dead_after_s` (ttl_s + poll_s): detection_s should not exceed it by more than
    the time one status read takes."""
    statuses: list[AgentStatus] = field(default_factory=list)
    """The fleet after both were seen (the other agents still running)."""
    alive_read_s: float = 0.0
    """When (after the SIGKILL) the last read that still showed it alive began: its hash
    expired between then and ``detection_s``. A detection past ``bound_s`` with this below
    ``ttl_s`` expired in time and was *seen* late: the watcher's reads ran late (a busy
    machine), not Redis."""

    @property
    def read_window_s(self) -> float:
        """From the start of the last read that saw it alive to the end of the one that saw
        it dead: ``poll_s`` plus two reads when the watcher keeps its pace."""
        return self.detection_s - self.alive_read_s

    def explain(self) -> str | None:
        """Why this detection fell outside [``ttl_s - interval_s``, ``bound_s``], in words
        from what was measured; None when it fell inside."""
        early = self.ttl_s - self.interval_s
        if self.detection_s < early:
            return (f"its last beat came {self.silent_at_kill_s:.2f} s before the kill, "
                    f"{self.silent_at_kill_s - self.interval_s:.2f} s later than its "
                    f"{self.interval_s:g} s interval: a late beat (a busy machine), so less "
                    "TTL was left")
        if self.detection_s <= self.bound_s:
            return None
        if self.alive_read_s < self.ttl_s:
            return (f"its hash expired between {self.alive_read_s:.2f} s and "
                    f"{self.detection_s:.2f} s after the kill, within the TTL; the watcher's "
                    f"reads took {self.read_window_s:.2f} s against a {self.poll_s:g} s poll "
                    "(a busy machine) and saw it late")
        return (f"a read {self.alive_read_s:.2f} s after the kill still saw it alive: a beat "
                "was still on its way to Redis when the agent was killed")


def _stop_all(procs: Sequence[subprocess.Popen[bytes]], grace_s: float) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + grace_s
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _stderr_tail(log: IO[bytes], lines: int = 10) -> str:
    log.seek(0)
    text = log.read().decode(errors="replace").splitlines()[-lines:]
    return "\n".join(text) or "(empty)"


def measure_detection(url: str, job: str | None = None, *, agents: int = 3, ttl_s: float = 1.0,
                      interval_s: float = 0.25, step_s: float = 0.1, poll_s: float = 0.05,
                      start_timeout_s: float = 60.0, seed: int | None = None) -> DetectionResult:
    """Starts ``agents`` agent processes, waits until all run and then a random 1-2
    ``interval_s`` (``seed``), so the kill falls anywhere between two beats, SIGKILLs the
    first and SIGTERMs the second, and polls :func:`fleet_status` every ``poll_s`` until one shows dead and the
    other left. Clears ``job``'s keys first (default: a fresh job) and leaves them for
    inspection (:func:`forget`). Every process started is stopped and reaped, whatever
    happens. LaunchError if an agent fails to start or a transition is not seen in time."""
    ttl, interval = _check_timing(ttl_s, interval_s)
    poll = _check_seconds("poll_s", poll_s)
    if isinstance(agents, bool) or not isinstance(agents, int) or agents < 2:
        raise ParameterError(f"agents must be an integer >= 2 (one killed, one stopped), "
                             f"got {agents!r}")
    job = _check_name("job", job or f"detect-{uuid.uuid4().hex[:8]}")
    forget(url, job)  # also checks that Redis answers, before any process starts
    names = [f"agent-{i}" for i in range(agents)]
    procs: list[subprocess.Popen[bytes]] = []
    logs: list[IO[bytes]] = []
    try:
        for name in names:
            logs.append(tempfile.TemporaryFile())
            procs.append(spawn_agent(url, job, name, ttl_s=ttl, interval_s=interval,
                                     step_s=step_s, stderr=logs[-1]))
        deadline = time.monotonic() + start_timeout_s
        while True:
            for name, proc, log in zip(names, procs, logs, strict=True):
                if proc.poll() is not None:
                    raise LaunchError(f"{name} exited with code {proc.returncode} while "
                                      f"starting; its stderr ends with:\n{_stderr_tail(log)}")
            if [s.state for s in fleet_status(url, job)] == ["running"] * agents:
                break
            if time.monotonic() > deadline:
                raise LaunchError(f"agents not all running within {start_timeout_s:g} s "
                                  "(machine overloaded? raise start_timeout_s)")
            time.sleep(poll)
        time.sleep(random.Random(seed).uniform(interval, 2 * interval))
        killed, terminated = names[0], names[1]
        procs[0].kill()
        t_kill = time.monotonic()
        procs[1].terminate()
        t_term = time.monotonic()
        detection = left = None
        dead_age = alive_read = 0.0
        deadline = t_kill + ttl + interval + 30.0
        while detection is None or left is None:
            began = time.monotonic()
            statuses = {s.name: s for s in fleet_status(url, job)}
            seen = time.monotonic()
            if detection is None and statuses[killed].state != DEAD:
                alive_read = began - t_kill
            if detection is None and statuses[killed].state == DEAD:
                detection, dead_age = seen - t_kill, statuses[killed].age_s or 0.0
            if left is None and statuses[terminated].state == "left":
                left = seen - t_term
            if detection is None or left is None:
                if seen > deadline:
                    raise LaunchError(
                        f"not seen within {deadline - t_kill:.0f} s: "
                        f"{killed} {statuses[killed].state}, {terminated} "
                        f"{statuses[terminated].state}")
                time.sleep(poll)
        try:
            code = procs[1].wait(10.0)
        except subprocess.TimeoutExpired:
            raise LaunchError(f"{terminated} showed left but did not exit within 10 s") from None
        return DetectionResult(
            ttl_s=ttl, interval_s=interval, poll_s=poll, killed=killed,
            detection_s=detection, silent_at_kill_s=max(0.0, dead_age - detection),
            terminated=terminated, left_s=left, terminated_exit_code=code,
            bound_s=dead_after_s(ttl, poll), statuses=fleet_status(url, job),
            alive_read_s=max(0.0, alive_read))
    finally:
        _stop_all(procs, grace_s=STOP_GRACE_S + DRAIN_S)
        for log in logs:
            log.close()
