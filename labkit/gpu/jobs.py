"""The GPU checks' own torchrun jobs (ranks: ``jobs_rank.py``), launched the way every lesson is.

One rank script with a mode per job (``setup``, ``events``, ``ddp``, ``checkpoint``; the rank
script's docstring says what each measures). This side imports no torch: it validates, launches
through :func:`labkit.runtime.launch.launch_local` with a limit, and returns what rank 0 published.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from labkit.errors import LaunchError, ParameterError
from labkit.runtime.rank_script import rank_script

if TYPE_CHECKING:
    from labkit.runtime.launch import LaunchResult

RANK_SCRIPT = rank_script(__name__)
MODES = ("setup", "events", "ddp", "checkpoint")


def run_job(mode: str, *, nproc: int, timeout_s: float, env: dict[str, str] | None = None,
            **params: Any) -> tuple[dict[str, Any], LaunchResult]:
    """Run ``mode`` on ``nproc`` ranks of one node; (rank 0's result, the launch). A failed or
    timed-out job raises the launcher's error, which names the failing rank and its traceback."""
    from labkit.runtime.launch import launch_local

    if mode not in MODES:
        raise ParameterError(f"unknown GPU job {mode!r}: one of {', '.join(MODES)}")
    if nproc < 1 or timeout_s <= 0:
        raise ParameterError(f"need nproc >= 1 and a positive timeout, got {nproc}, {timeout_s}")
    result = launch_local(RANK_SCRIPT, json.dumps({"mode": mode, **params}), nproc_per_node=nproc,
                          timeout_s=timeout_s, env=env, echo=None, check=True)
    if not isinstance(result.published, dict):
        raise LaunchError(f"the {mode} job finished but rank 0 published nothing; last output:\n"
                          + "\n".join(result.output[-20:]))
    return result.published, result
