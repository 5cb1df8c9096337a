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

from typing import TYPE_CHECKING

from labkit.runtime.lazy import lazy_surface

if TYPE_CHECKING:  # what each name is, for readers and type checkers
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

# name -> the module that defines it: a name is imported when first used,
# so importing one module of the folder (a rank script, a child process) imports no other
_HOME = {
    "build_report": "labkit.capstone.report",
    "CapstoneConfig": "labkit.capstone.config",
    "CapstoneReport": "labkit.capstone.report",
    "contiguous_runs": "labkit.capstone.report",
    "FIGURE_FILE": "labkit.capstone.config",
    "Kill": "labkit.capstone.config",
    "LOG_FILE": "labkit.capstone.config",
    "PIDS_DIR": "labkit.capstone.config",
    "PORTS_ENV": "labkit.capstone.config",
    "PROMQL": "labkit.capstone.run",
    "redis_keys": "labkit.capstone.config",
    "RedisKeys": "labkit.capstone.config",
    "REPORT_FILE": "labkit.capstone.config",
    "run_capstone": "labkit.capstone.run",
    "with_breaks": "labkit.capstone.report",
}
__all__ = sorted(_HOME)
__getattr__, __dir__ = lazy_surface(__name__, _HOME)
