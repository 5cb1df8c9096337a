"""Scaling agents over ranks (lessons 08 and 09).

- ``ddp`` (ranks: ``ddp_rank.py``): what ``gradient_as_bucket_view`` saves, and DDP vs FSDP for
  many small agents; ``labkit bench ddp``.
- ``memory`` (ranks: ``memory_rank.py``): experience held replicated on every rank vs sharded,
  per-rank resident memory as the cluster grows; ``labkit bench memory``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from labkit.runtime.lazy import lazy_surface

if TYPE_CHECKING:  # what each name is, for readers and type checkers
    from labkit.scaling.ddp import (
        AGENT_MODES,
        DEFAULT_AGENT_MODES,
        FSDP_TOLERANCE,
        MALLOC_ENV,
        PARTS,
        AgentRow,
        BucketViewRow,
        bucket_view_saving,
        measure_agents,
        measure_bucket_view,
        measure_bucket_views,
        measure_ddp,
        problems,
    )
    from labkit.scaling.memory import (
        MODES,
        MemoryRow,
        measure_memory,
        measure_one,
    )

# name -> the module that defines it: a name is imported when first used,
# so importing one module of the folder (a rank script, a child process) imports no other
_HOME = {
    "AGENT_MODES": "labkit.scaling.ddp",
    "AgentRow": "labkit.scaling.ddp",
    "bucket_view_saving": "labkit.scaling.ddp",
    "BucketViewRow": "labkit.scaling.ddp",
    "DEFAULT_AGENT_MODES": "labkit.scaling.ddp",
    "FSDP_TOLERANCE": "labkit.scaling.ddp",
    "MALLOC_ENV": "labkit.scaling.ddp",
    "measure_agents": "labkit.scaling.ddp",
    "measure_bucket_view": "labkit.scaling.ddp",
    "measure_bucket_views": "labkit.scaling.ddp",
    "measure_ddp": "labkit.scaling.ddp",
    "measure_memory": "labkit.scaling.memory",
    "measure_one": "labkit.scaling.memory",
    "MemoryRow": "labkit.scaling.memory",
    "MODES": "labkit.scaling.memory",
    "PARTS": "labkit.scaling.ddp",
    "problems": "labkit.scaling.ddp",
}
__all__ = sorted(_HOME)
__getattr__, __dir__ = lazy_surface(__name__, _HOME)
