"""The ``labkit gpu-check`` command: options, progress on stderr, the table or one JSON object."""

from __future__ import annotations

import argparse
import json
import sys

from labkit.gpu.check import DEFAULT_BUDGET_S, format_report, run_checks
from labkit.gpu.checks import CHECK_NAMES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``labkit gpu-check``."""
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object (host, versions, every check) on stdout")
    parser.add_argument("--only", metavar="NAMES",
                        help=f"comma-separated checks to run, of {','.join(CHECK_NAMES)}")
    parser.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S, metavar="S",
                        help=f"seconds for the whole run (default {DEFAULT_BUDGET_S:g}); a check "
                             "that finds too little of it left is skipped")


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    """Run the checks; exit status 1 when one failed, 0 otherwise (skipped ones included)."""
    only = args.only.split(",") if args.only else None
    report = run_checks(only, budget_s=args.budget, echo=_progress)
    print(json.dumps(report.to_dict(), indent=2) if args.json else format_report(report))
    return 0 if report.ok else 1
