"""Collectives and bandwidth (lesson 03; lesson 14 reads its fit): nccl-tests on any backend.

- ``formulas``: sizes, sweeps, the bus-bandwidth factor of each collective, one result row.
- ``bench`` (ranks: ``bench_rank.py``): ``run_collectives`` measures time, algbw, busbw and
  ``#wrong`` of every collective through torchrun, as nccl-tests does; ``labkit bench collectives``.
- ``alphabeta``: fits ``t(S) = alpha + S / B`` to the measured rows and keeps the fit as JSON.

::

    labkit bench collectives --nproc 4 --op all_reduce --max 16M

    from labkit import collectives
    report = collectives.run_collectives("all_reduce", nproc=4)
    report.fit("all_reduce")
"""

from __future__ import annotations

from labkit.collectives.alphabeta import (
    AlphaBeta,
    fit_alpha_beta,
)
from labkit.collectives.bench import (
    DEFAULT_MAX,
    CollectivesReport,
    format_table,
    measure_init_time,
    run_collectives,
    to_csv,
)
from labkit.collectives.formulas import (
    ALIASES,
    AVERAGES,
    ONE_FORM,
    OPS,
    PER_RANK,
    REDUCING,
    ROOTED,
    CollectiveRow,
    bandwidths,
    bus_factor,
    message_counts,
    parse_size,
    placements,
    resolve_ops,
    sweep,
)

__all__ = [
    "ALIASES",
    "AlphaBeta",
    "AVERAGES",
    "bandwidths",
    "bus_factor",
    "CollectiveRow",
    "CollectivesReport",
    "DEFAULT_MAX",
    "fit_alpha_beta",
    "format_table",
    "measure_init_time",
    "message_counts",
    "ONE_FORM",
    "OPS",
    "parse_size",
    "PER_RANK",
    "placements",
    "REDUCING",
    "resolve_ops",
    "ROOTED",
    "run_collectives",
    "sweep",
    "to_csv",
]
