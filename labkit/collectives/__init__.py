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

from typing import TYPE_CHECKING

from labkit.runtime.lazy import lazy_surface

if TYPE_CHECKING:  # what each name is, for readers and type checkers
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

# name -> the module that defines it: a name is imported when first used,
# so importing one module of the folder (a rank script, a child process) imports no other
_HOME = {
    "ALIASES": "labkit.collectives.formulas",
    "AlphaBeta": "labkit.collectives.alphabeta",
    "AVERAGES": "labkit.collectives.formulas",
    "bandwidths": "labkit.collectives.formulas",
    "bus_factor": "labkit.collectives.formulas",
    "CollectiveRow": "labkit.collectives.formulas",
    "CollectivesReport": "labkit.collectives.bench",
    "DEFAULT_MAX": "labkit.collectives.bench",
    "fit_alpha_beta": "labkit.collectives.alphabeta",
    "format_table": "labkit.collectives.bench",
    "measure_init_time": "labkit.collectives.bench",
    "message_counts": "labkit.collectives.formulas",
    "ONE_FORM": "labkit.collectives.formulas",
    "OPS": "labkit.collectives.formulas",
    "parse_size": "labkit.collectives.formulas",
    "PER_RANK": "labkit.collectives.formulas",
    "placements": "labkit.collectives.formulas",
    "REDUCING": "labkit.collectives.formulas",
    "resolve_ops": "labkit.collectives.formulas",
    "ROOTED": "labkit.collectives.formulas",
    "run_collectives": "labkit.collectives.bench",
    "sweep": "labkit.collectives.formulas",
    "to_csv": "labkit.collectives.bench",
}
__all__ = sorted(_HOME)
__getattr__, __dir__ = lazy_surface(__name__, _HOME)
