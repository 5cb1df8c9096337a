"""``labkit nccl check``: check this shell's environment, or an env file, for NCCL mistakes.

    labkit nccl check                       # the NCCL/TORCH/GLOO/launcher variables set here
    labkit nccl check --env-file env.sh     # a pasted export block
    labkit nccl check --env-file env.sh --fix > fixed.sh
    labkit nccl check --json                # [{"severity", "variable", "message", "fix"}, ...]

With ``--env-file``, the report first says how many variables the file set (any pasted shape:
``labkit.nccl.paste``) and what it could not parse; with ``--json`` or ``--fix`` that goes to
stderr, so stdout stays a JSON list or an export block. Exit code 1 when any finding is an error,
else 0. The lead wires these two functions into ``labkit.cli``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
from collections.abc import Sequence

from labkit.nccl.check import check_env, options_from_args
from labkit.nccl.envfile import render_exports
from labkit.nccl.envsource import read_env_source
from labkit.nccl.findings import SEVERITY_ORDER, Finding
from labkit.nccl.names import is_relevant


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``labkit nccl check``."""
    parser.add_argument("--env-file", metavar="FILE",
                        help="check the export block in FILE instead of this environment")
    parser.add_argument("--json", action="store_true",
                        help="print findings as JSON (severity, variable, message, fix, source)")
    parser.add_argument("--fix", action="store_true",
                        help="print a corrected export block (findings go to stderr)")
    parser.add_argument("--nccl-version", metavar="X.Y.Z",
                        help="check against this NCCL release (default: the one this machine's "
                        "PyTorch loads for the live environment or --this-host, else the newest "
                        "release the checker knows)")
    parser.add_argument("--this-host", action="store_true",
                        help="the env file is for this machine: check its interfaces, HCAs and "
                        "files here (always so without --env-file)")


def run(args: argparse.Namespace) -> int:
    """Check, print, and return 1 if any finding is an error."""
    parsed = None
    if args.env_file:
        parsed = read_env_source(args.env_file, label="--env-file")
        env = parsed.env
    else:
        env = {k: v for k, v in os.environ.items() if is_relevant(k)}
    findings = check_env(env, **options_from_args(args),
                         **(parsed.job if parsed is not None else {}))
    report = json.dumps([f.to_dict() for f in findings], indent=2) if args.json \
        else format_table(findings)
    if parsed is not None:  # what was read and what was not; stdout stays a block or JSON list
        print("\n".join(parsed.describe(args.env_file)),
              file=sys.stderr if args.fix or args.json else sys.stdout)
    if args.fix:
        print(report, file=sys.stderr)
        print(render_exports(env, findings, parsed.tilde if parsed is not None else ()),
              end="")
    else:
        print(report)
    return 1 if any(f.severity == "error" for f in findings) else 0


def format_table(findings: Sequence[Finding], width: int = 100) -> str:
    """Findings sorted by severity, one block each: severity, variable, message, fix."""
    if not findings:
        return "no findings"
    lines = []
    for f in sorted(findings, key=lambda f: SEVERITY_ORDER[f.severity]):
        lines.append(f"{f.severity.upper():8} {f.variable}")
        lines += textwrap.wrap(f.message, width, initial_indent="  ", subsequent_indent="  ")
        if f.fix:
            lines += textwrap.wrap(f.fix, width, initial_indent="  fix: ",
                                   subsequent_indent="       ")
    counts = {s: sum(f.severity == s for f in findings) for s in SEVERITY_ORDER}
    lines.append(", ".join(f"{n} {s}{'s' if n != 1 else ''}" for s, n in counts.items()))
    return "\n".join(lines)
