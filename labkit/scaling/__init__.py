"""Scaling agents over ranks (lessons 08 and 09).

- ``ddp`` (ranks: ``ddp_rank.py``): what ``gradient_as_bucket_view`` saves, and DDP vs FSDP for
  many small agents; ``labkit bench ddp``.
- ``memory`` (ranks: ``memory_rank.py``): experience held replicated on every rank vs sharded,
  per-rank resident memory as the cluster grows; ``labkit bench memory``.
"""

from __future__ import annotations

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
    add_memory_arguments,
    measure_memory,
    measure_one,
    run_memory,
)

__all__ = [
    "add_memory_arguments",
    "AGENT_MODES",
    "AgentRow",
    "bucket_view_saving",
    "BucketViewRow",
    "DEFAULT_AGENT_MODES",
    "FSDP_TOLERANCE",
    "MALLOC_ENV",
    "measure_agents",
    "measure_bucket_view",
    "measure_bucket_views",
    "measure_ddp",
    "measure_memory",
    "measure_one",
    "MemoryRow",
    "MODES",
    "PARTS",
    "problems",
    "run_memory",
]
