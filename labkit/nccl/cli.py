"""``labkit nccl check``: check this shell's environment, or an env file, for NCCL mistakes.

    labkit nccl check                       # the NCCL/TORCH/GLOO/launcher variables set here
    labkit nccl check --env-file env.sh     # a pasted export block
    labkit nccl check --env-file env.sh --fix > fixed.sh
    labkit nccl check --json                # [{"severity", "variable", "message", "fix"}, ...]

Exit code 1 when any finding is an error, else 0. The lead wires these two functions into
``labkit.cli``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

from labkit.errors import ParameterError
from labkit.nccl.check import check_env
from labkit.nccl.envfile import parse_env_file, render_exports
from labkit.nccl.findings import SEVERITY_ORDER, Finding
from labkit.nccl.registry import is_relevant


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``labkit nccl check``."""
    parser.add_argument("--env-file", metavar="FILE",
                        help="check the export block in FILE instead of this environment")
    parser.add_argument("--json", action="store_true",
                        help="print findings as JSON (severity, variable, message, fix)")
    parser.add_argument("--fix", action="store_true",
                        help="print a corrected export block (findings go to stderr)")


def run(args: argparse.Namespace) -> int:
    """Check, print, and return 1 if any finding is an error."""
    if args.env_file:
        try:
            env = parse_env_file(Path(args.env_file).read_text())
        except OSError as exc:
            raise ParameterError(f"cannot read --env-file {args.env_file}: {exc.strerror}") \
                from exc
    else:
        env = {k: v for k, v in os.environ.items() if is_relevant(k)}
    findings = check_env(env)
    report = json.dumps([f.to_dict() for f in findings], indent=2) if args.json \
        else format_table(findings)
    if args.fix:
        print(report, file=sys.stderr)
        print(render_exports(env, findings), end="")
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
