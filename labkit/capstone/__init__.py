"""The capstone (lesson 15): the whole system at once, on simulated nodes, with a rank killed mid-run.

- ``config``: ``CapstoneConfig``, the planned ``Kill``, the run's Redis keys (shared with the ranks).
- ``run`` (ranks: ``run_rank.py``): ``run_capstone`` launches it, kills the rank, reads it back;
  it is also the ``labkit capstone`` command.
- ``report``: ``CapstoneReport``, the one report (throughput, lag, restarts, lost work, final
  return) as JSON and a figure.

::

    labkit capstone --nodes 3 --ranks-per-node 2 --kill-slot 3 --kill-at-update 30 --json

    from labkit import capstone
    report = capstone.run_capstone(capstone.CapstoneConfig(nodes=3, kill_slot=3))
"""

from __future__ import annotations

from labkit.capstone.config import (
    FIGURE_FILE,
    LOG_FILE,
    PIDS_DIR,
    PORTS_ENV,
    REPORT_FILE,
    CapstoneConfig,
    Kill,
    RedisKeys,
    redis_keys,
)
from labkit.capstone.report import (
    CapstoneReport,
    build_report,
    contiguous_runs,
    with_breaks,
)
from labkit.capstone.run import (
    PROMQL,
    run_capstone,
)

__all__ = [
    "build_report",
    "CapstoneConfig",
    "CapstoneReport",
    "contiguous_runs",
    "FIGURE_FILE",
    "Kill",
    "LOG_FILE",
    "PIDS_DIR",
    "PORTS_ENV",
    "PROMQL",
    "redis_keys",
    "RedisKeys",
    "REPORT_FILE",
    "run_capstone",
    "with_breaks",
]
