"""GPU checks (``labkit gpu-check``): every CUDA/NCCL path the course claims, run small on this
host's GPUs and reported as passed, failed or skipped with a reason (docs/gpu-check.md).

- ``check``: ``run_checks`` -> ``GpuReport`` of ``CheckResult``; the host's versions; the table.
- ``checks``: the seven checks (dist setup, collectives, NCCL debug log, DDP bucket views,
  checkpoint, capstone, and lesson 11's hang on NCCL from ``hang_check``) and how each is
  limited; ``outcome``: what a check returns or raises.
- ``jobs`` (ranks: ``jobs_rank.py``): the checks' own torchrun jobs.
- ``cli``: the command's options.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from labkit.runtime.lazy import lazy_surface

if TYPE_CHECKING:  # what each name is, for readers and type checkers
    from labkit.gpu.check import (
        DEFAULT_BUDGET_S,
        CheckResult,
        GpuReport,
        format_report,
        host_facts,
        run_checks,
        skip_reason,
    )
    from labkit.gpu.checks import CHECK_NAMES, CHECKS, CheckFailed, CheckSkipped
    from labkit.gpu.jobs import run_job

# name -> the module that defines it: a name is imported when first used,
# so importing one module of the folder (a rank script, a child process) imports no other
_HOME = {
    "CHECK_NAMES": "labkit.gpu.checks",
    "CheckFailed": "labkit.gpu.checks",
    "CheckResult": "labkit.gpu.check",
    "CHECKS": "labkit.gpu.checks",
    "CheckSkipped": "labkit.gpu.checks",
    "DEFAULT_BUDGET_S": "labkit.gpu.check",
    "format_report": "labkit.gpu.check",
    "GpuReport": "labkit.gpu.check",
    "host_facts": "labkit.gpu.check",
    "run_checks": "labkit.gpu.check",
    "run_job": "labkit.gpu.jobs",
    "skip_reason": "labkit.gpu.check",
}
__all__ = sorted(_HOME)
__getattr__, __dir__ = lazy_surface(__name__, _HOME)
