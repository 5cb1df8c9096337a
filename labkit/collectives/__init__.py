"""Collectives and bandwidth (lesson 03; lesson 14 reads its fit): nccl-tests on any backend.

- ``formulas``: sizes, sweeps, the bus-bandwidth factor of each collective, one result row,
  nccl-tests' per-iteration summary (``iter_stats``).
- ``bench`` (ranks: ``bench_rank.py``, ``iter_timing.py``): ``run_collectives`` measures time,
  algbw, busbw and ``#wrong`` of every collective through torchrun, as nccl-tests does, with its
  ``-N`` cycles and ``-I`` per-iteration times; ``labkit bench collectives``.
- ``report``: ``CollectivesReport``, the nccl-tests text table, CSV, and ``--expect``'s verdict
  of busbw against a stated link bandwidth; ``table_view``: the same table as HTML for
  notebooks (``CollectivesTable``), and what a run did not measure, in sentences.
- ``nccl_json``: nccl-tests' ``-J`` JSON, written (``write_nccl_tests_json``) and read
  (``read_nccl_tests_json``, nccl-tests' own files too); ``nccl_schema``: its structure as data
  (``NCCL_TESTS_SCHEMA``) and the check of a file against it (``schema_problems``).
- ``nccl_tests``: NVIDIA's ``all_reduce_perf`` & co. run from PATH and compared with labkit.
- ``alphabeta``: fits ``t(S) = alpha + S / B`` to the measured rows and keeps the fit as JSON.

::

    labkit bench collectives --nproc 4 --op all_reduce --max 16M -I 1 -J run.json --expect 50
    labkit bench collectives --read run.json all_reduce_perf.json

    from labkit import collectives
    report = collectives.run_collectives("all_reduce", nproc=4, per_iter=True)
    collectives.write_nccl_tests_json(report, "run.json")
    collectives.read_nccl_tests_json("run.json").rows
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
        measure_init_time,
        run_collectives,
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
        IterStats,
        bandwidths,
        bus_factor,
        iter_stats,
        message_counts,
        parse_size,
        placements,
        resolve_ops,
        sweep,
    )
    from labkit.collectives.nccl_json import (
        NcclTestsRun,
        read_nccl_tests_json,
        write_nccl_tests_json,
    )
    from labkit.collectives.nccl_schema import LABKIT_NULLS, NCCL_TESTS_SCHEMA, schema_problems
    from labkit.collectives.nccl_tests import compare_rows, run_nccl_tests
    from labkit.collectives.report import (
        CollectivesReport,
        LinkVerdict,
        format_table,
        link_verdicts,
        parse_expect,
        to_csv,
        verdict_text,
    )
    from labkit.collectives.table_view import CollectivesTable, html_table, skipped_text

# name -> the module that defines it: a name is imported when first used,
# so importing one module of the folder (a rank script, a child process) imports no other
_HOME = {
    "ALIASES": "labkit.collectives.formulas",
    "AlphaBeta": "labkit.collectives.alphabeta",
    "AVERAGES": "labkit.collectives.formulas",
    "bandwidths": "labkit.collectives.formulas",
    "bus_factor": "labkit.collectives.formulas",
    "CollectiveRow": "labkit.collectives.formulas",
    "CollectivesReport": "labkit.collectives.report",
    "CollectivesTable": "labkit.collectives.table_view",
    "compare_rows": "labkit.collectives.nccl_tests",
    "DEFAULT_MAX": "labkit.collectives.bench",
    "fit_alpha_beta": "labkit.collectives.alphabeta",
    "html_table": "labkit.collectives.table_view",
    "format_table": "labkit.collectives.report",
    "iter_stats": "labkit.collectives.formulas",
    "IterStats": "labkit.collectives.formulas",
    "LABKIT_NULLS": "labkit.collectives.nccl_schema",
    "link_verdicts": "labkit.collectives.report",
    "LinkVerdict": "labkit.collectives.report",
    "measure_init_time": "labkit.collectives.bench",
    "message_counts": "labkit.collectives.formulas",
    "NCCL_TESTS_SCHEMA": "labkit.collectives.nccl_schema",
    "NcclTestsRun": "labkit.collectives.nccl_json",
    "ONE_FORM": "labkit.collectives.formulas",
    "OPS": "labkit.collectives.formulas",
    "parse_expect": "labkit.collectives.report",
    "parse_size": "labkit.collectives.formulas",
    "PER_RANK": "labkit.collectives.formulas",
    "placements": "labkit.collectives.formulas",
    "read_nccl_tests_json": "labkit.collectives.nccl_json",
    "REDUCING": "labkit.collectives.formulas",
    "resolve_ops": "labkit.collectives.formulas",
    "ROOTED": "labkit.collectives.formulas",
    "run_collectives": "labkit.collectives.bench",
    "run_nccl_tests": "labkit.collectives.nccl_tests",
    "schema_problems": "labkit.collectives.nccl_schema",
    "skipped_text": "labkit.collectives.table_view",
    "sweep": "labkit.collectives.formulas",
    "to_csv": "labkit.collectives.report",
    "verdict_text": "labkit.collectives.report",
    "write_nccl_tests_json": "labkit.collectives.nccl_json",
}
__all__ = sorted(_HOME)
__getattr__, __dir__ = lazy_surface(__name__, _HOME)
