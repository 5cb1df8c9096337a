"""What a rank publishes while it runs, so a watcher can follow it live (``labkit.hangs.watch``).

Nothing new for the job to learn: the collective latency histogram and counters of lesson 13's
exporter (:class:`~labkit.observability.exporter.RankMetrics`, fed by the recorder's calls:
collectives entered, returned, in flight or failed, lock waits in flight, step durations) and
lesson 12's
heartbeat in Redis (:class:`~labkit.orchestration.control.Heartbeat`, with the step), whose extra
fields say where this rank serves its metrics and writes its dumps. Switched on when the rank
finds ``$LABKIT_REDIS_URL`` and ``$LABKIT_CONTROL_JOB`` in its environment.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from labkit.orchestration.control import JOB_ENV, Heartbeat
from labkit.services.base import CHILD_REDIS_URL_ENV

if TYPE_CHECKING:
    from labkit.hangs.recorder import Event, Recorder
    from labkit.observability.exporter import RankMetrics

METRICS_URL = "metrics_url"  # the heartbeat's extra fields
DUMPS = "dumps"
STACKS = "stacks"
WORLD = "world"
DTYPE_BYTES = {"float64": 8, "int64": 8, "float32": 4, "int32": 4, "float16": 2, "bfloat16": 2}


def agent_name(rank: int) -> str:
    """The rank's name in the control plane."""
    return f"rank{rank}"


class LiveRank:
    """This rank's exporter and heartbeat, fed by its recorder and its steps."""

    def __init__(self, recorder: Recorder, url: str, job: str) -> None:
        from labkit.hangs.recorder import stacks_path
        from labkit.observability.exporter import RankMetrics

        self.metrics: RankMetrics = RankMetrics(recorder.rank, recorder.world_size)
        self.metrics.serve()
        self._in_flight: set[int] = set()
        extra = {METRICS_URL: self.metrics.url, DUMPS: str(Path(recorder.folder).resolve()),
                 STACKS: str(stacks_path(recorder.folder, recorder.rank).resolve()),
                 WORLD: str(recorder.world_size)}
        self.heartbeat = Heartbeat(url, job, agent_name(recorder.rank), rank=recorder.rank,
                                   extra=extra).start()
        self.heartbeat.set_state("running", step=0)
        recorder.listeners.append(self.on_event)

    @classmethod
    def from_env(cls, recorder: Recorder) -> LiveRank | None:
        url, job = os.environ.get(CHILD_REDIS_URL_ENV), os.environ.get(JOB_ENV)
        return cls(recorder, url, job) if url and job else None

    def on_event(self, event: Event, phase: str) -> None:
        """A recorded call began or ended: counters, in-flight gauges, latency."""
        key = id(event)
        if phase == "begin":
            if event.state in ("started", "waiting"):
                self._in_flight.add(key)
                self.metrics.enter(event.kind, event.op)
            return
        if key in self._in_flight:
            self._in_flight.discard(key)
            self.metrics.leave(event.kind, event.op, failed=event.state == "failed")
            if event.kind == "collective" and event.state in ("completed", "async"):
                size = sum(DTYPE_BYTES.get(event.dtype, 4) * _numel(s) for s in event.shapes)
                self.metrics.observe_collective(event.op, size,
                                                (event.ended_at or time.time()) - event.started_at)

    def step_done(self, step: int, seconds: float, warmup: bool = False) -> None:
        """``step`` steps done, the last in ``seconds``; a warm-up step's time is not the job's
        step time, so it is not published."""
        if not warmup:
            self.metrics.observe_step(seconds)
        self.heartbeat.set_step(step)

    def close(self) -> None:
        """Leave the control plane first (a watcher then reads the exporter's going as a
        clean end, not a death), then stop serving."""
        self.heartbeat.leave()
        self.metrics.close()


def _numel(shape: list[int]) -> int:
    total = 1
    for dim in shape:
        total *= dim
    return total
