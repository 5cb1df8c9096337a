"""Run a hang scenario in a real gloo process group and report who hung it, and how fast.

    labkit hang --list
    labkit hang stuck_rank [--timeout 5] [--detail on|off] [--no-watch] [--end-job] [--json]
    labkit hang all --json
    labkit hang healthy [--timeout 5]          # the same loop, nobody deviating: no alarm
    labkit hang watch --job JOB --world-size N [--redis URL] [--end-job]   # a running job

Each scenario runs under labkit's launcher (torchrun, one rank per process) with a collective
timeout of a few seconds, both flight recorders on, and the live watch following it
(``labkit.hangs.launched``). The report puts three verdicts side by side: labkit's recorder
after the timeout, the live watch (and how much sooner), and PyTorch's analyzer on PyTorch's
dumps. The launch gets a hard limit well above the timeout (``LAUNCH_ALLOWANCE_S``: starting
torch in every rank on a small machine) and ends every process it started; the run folder is a
temporary directory that is removed afterwards.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from labkit.errors import ParameterError
from labkit.hangs.diagnose import diagnose
from labkit.hangs.fr_analyze import TorchVerdict, describe_gaps
from labkit.hangs.launched import LAUNCH_ALLOWANCE_S, launch_watched
from labkit.hangs.scenarios import DEFAULT_TIMEOUT_S, HEALTHY, SCENARIOS, check_timeout
from labkit.hangs.watch import WatchResult, format_watch
from labkit.runtime.rank_script import rank_script

Echo = Callable[[str], None]
RANK_SCRIPT = rank_script(__name__)
DETECTION_SLACK_S = 3.0  # scheduling delay a loaded 2-core machine may add to a timeout
WATCH_SHARE = 0.5  # the live watch's goal: name the culprit within this share of the timeout
TORCHRUN_RANK = re.compile(r"rank\s*:\s*(\d+) \(local_rank")
TORCHRUN_EXIT = re.compile(r"exitcode\s*:\s*(-?\d+)")


@dataclass
class HangReport:
    """What one scenario did. ``detected_within_s``: from the first start, on any rank, of the
    collective (or lock wait) that never completed everywhere, to the first failure any rank
    saw (timeout, mismatch, lost peer, lock timeout); both from the ranks' own clocks, so the
    launch's start-up is not in it. None when nothing was detected."""

    scenario: str
    summary: str
    world_size: int
    timeout_s: float
    detail: bool
    detected_within_s: float | None
    detected_by: str
    culprit_rank: int | None
    expected_culprit_rank: int
    kind: str
    op: str
    seq: int | None
    evidence: list[str] = field(default_factory=list)
    stacks: dict[int, str] = field(default_factory=dict)
    exit_codes: dict[int, int] = field(default_factory=dict)
    launch_seconds: float = 0.0
    launch_timed_out: bool = False
    watch: WatchResult | None = None
    watch_error: str = ""
    torch: TorchVerdict | None = None
    torch_gaps: list[str] = field(default_factory=list)
    torch_writers: dict[int, dict] = field(default_factory=dict)

    @property
    def culprit_found(self) -> bool:
        return self.culprit_rank == self.expected_culprit_rank

    @property
    def watch_within_s(self) -> float | None:
        """From the hang's start (as labkit's recorder dated it) to the live watch's alarm."""
        w = self.watch
        if w is None or w.alarm_at is None:
            return None
        start = w.hang_started_at
        return None if start is None else round(max(0.0, w.alarm_at - start), 3)

    @property
    def watch_named(self) -> bool:
        """The live watch named the expected culprit."""
        return self.watch is not None and self.watch.culprit_rank == self.expected_culprit_rank

    @property
    def watch_in_half(self) -> bool:
        """Named within ``WATCH_SHARE`` of this run's collective timeout."""
        within = self.watch_within_s
        return within is not None and within <= WATCH_SHARE * self.timeout_s

    @property
    def in_time(self) -> bool:
        """Detected within the timeout plus DETECTION_SLACK_S."""
        return self.detected_within_s is not None and \
            self.detected_within_s <= self.timeout_s + DETECTION_SLACK_S

    @property
    def ok(self) -> bool:
        return self.culprit_found and self.in_time and not self.launch_timed_out

    def to_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in asdict(self).items() if k not in ("watch", "torch")}
        return {**data, "culprit_found": self.culprit_found, "in_time": self.in_time,
                "ok": self.ok, "watch": self.watch.to_dict() if self.watch else None,
                "watch_within_s": self.watch_within_s, "watch_named": self.watch_named,
                "watch_in_half": self.watch_in_half,
                "torch": self.torch.to_dict() if self.torch else None}


def torchrun_exit_codes(output: list[str]) -> dict[int, int]:
    """rank -> exit code from torchrun's failure summary (negative: killed by that signal)."""
    codes, rank = {}, None
    for line in output:
        if m := TORCHRUN_RANK.search(line):
            rank = int(m[1])
        elif (m := TORCHRUN_EXIT.search(line)) and rank is not None:
            codes[rank], rank = int(m[1]), None
    return codes


def _exit_evidence(codes: dict[int, int]) -> list[str]:
    lines = []
    for rank, code in sorted(codes.items()):
        if code < 0 and -code != signal.SIGTERM:  # torchrun itself stops ranks with SIGTERM
            lines.append(f"torchrun: rank {rank} was killed by {signal.Signals(-code).name}")
    return lines


def run_scenario(name: str, timeout_s: float | None = None, detail: bool | None = None,
                 echo: Echo | None = None, env: dict[str, str] | None = None,
                 watch: bool = True, end_job: bool = False, analyze_torch: bool = True,
                 backend: str = "gloo") -> HangReport:
    """Launch scenario ``name`` and diagnose it. ``detail``: TORCH_DISTRIBUTED_DEBUG=DETAIL
    (default: the scenario's choice); ``echo``: a callable for the ranks' output lines;
    ``env``: more environment for the ranks; ``watch``: follow it live (``end_job``: the watch
    ends it at its alarm); ``analyze_torch``: run torch's analyzer on torch's dumps."""
    from labkit.runtime.dist import TIMEOUT_ENV

    if name not in SCENARIOS:
        raise ParameterError(f"unknown hang scenario {name!r}; one of: {', '.join(SCENARIOS)}")
    spec = SCENARIOS[name]
    timeout_s = check_timeout(timeout_s)
    detail = spec.detail if detail is None else detail
    env = {**(env or {}), TIMEOUT_ENV: str(timeout_s),
           "TORCH_DISTRIBUTED_DEBUG": "DETAIL" if detail else "OFF"}
    config = {"scenario": name, "timeout_s": timeout_s, "backend": backend}
    got = launch_watched(RANK_SCRIPT, spec, config, timeout_s + LAUNCH_ALLOWANCE_S, env, echo,
                         watch, end_job, analyze_torch)
    found = diagnose(got.dumps, spec.world_size, got.stacks)
    detected_by, within = found.detected_by, found.detected_within_s
    if by_watch := _ended_by_the_watch(got.watch, found.detected_at):
        detected_by = by_watch
        if found.hang_started_at is not None:
            within = max(0.0, got.watch.ended_at - found.hang_started_at)
    codes = torchrun_exit_codes(got.result.output)
    evidence = found.evidence + _exit_evidence(codes)
    if got.result.timed_out:
        evidence.append(f"the launch ran past its {timeout_s + LAUNCH_ALLOWANCE_S:g} s limit")
    return HangReport(
        scenario=name, summary=spec.summary, world_size=spec.world_size, timeout_s=timeout_s,
        detail=detail, detected_within_s=_round(within),
        detected_by=detected_by, culprit_rank=found.culprit_rank,
        expected_culprit_rank=spec.culprit, kind=found.kind, op=found.op, seq=found.seq,
        evidence=evidence, stacks=got.stacks, exit_codes=codes,
        launch_seconds=round(got.seconds, 1), launch_timed_out=got.result.timed_out,
        watch=got.watch, watch_error=got.watch_error, torch=got.torch,
        torch_gaps=describe_gaps(got.torch_gaps) if got.torch_gaps else [],
        torch_writers=got.torch_gaps.get("writers", {}) if got.torch_gaps else {},
    )


def _ended_by_the_watch(watch: WatchResult | None, detected_at: float | None) -> str:
    """Who ended the job when the watch SIGTERMed it before any rank saw a failure. A rank
    blocked in a collective can see its peers vanish (a lost connection) a moment before its own
    SIGTERM is handled: that failure came after the watch's signal, so it is not a detection."""
    if watch is None or not watch.ended_job or watch.ended_at is None:
        return ""
    if detected_at is not None and detected_at < watch.ended_at:
        return ""
    return "SIGTERM from the live watch at its alarm"


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def run_all(timeout_s: float | None = None, detail: bool | None = None,
            echo: Echo | None = None) -> list[HangReport]:
    """Every scenario, one after the other."""
    return [run_scenario(name, timeout_s, detail, echo) for name in SCENARIOS]


def format_report(report: HangReport) -> str:
    """A few lines for a terminal or a notebook cell: labkit's recorder after the timeout, the
    live watch, torch's analyzer, then the evidence."""
    within = "not detected" if report.detected_within_s is None \
        else f"detected in {report.detected_within_s:.2f} s (timeout {report.timeout_s:g} s)"
    verdict = "right" if report.culprit_found else "WRONG"
    where = f"{report.op} seq {report.seq}" if report.op else report.kind
    lines = [f"{report.scenario}: {within} by {report.detected_by}",
             f"  labkit's recorder: rank {report.culprit_rank} ({report.kind}, {where}); "
             f"expected rank {report.expected_culprit_rank}: {verdict}"]
    lines.append("  live watch: " + format_watch(report.watch, report.watch_error,
                                                  report.watch_within_s, report.timeout_s))
    if report.torch is not None:
        lines.append(f"  torch's analyzer: {report.torch.summary}"
                     + (" (group filled in)" if report.torch.repaired else ""))
        lines.append(f"  torchfrtrace itself: {report.torch.cli_says}")
    lines += [f"  - {line}" for line in report.evidence]
    lines += [f"  - torch's dumps: {line}" for line in report.torch_gaps]
    return "\n".join(lines)


# --- command line (wired into labkit.cli as `labkit hang`) ----------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", nargs="?",
                        help="a scenario name (see --list), 'all', 'healthy', or 'watch'")
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    parser.add_argument("--json", action="store_true", help="print the report(s) as JSON")
    parser.add_argument("--timeout", type=float, default=None,
                        help=f"collective and lock timeout in seconds (default "
                             f"{DEFAULT_TIMEOUT_S:g})")
    parser.add_argument("--detail", choices=("on", "off"), default=None,
                        help="TORCH_DISTRIBUTED_DEBUG=DETAIL (default: per scenario)")
    parser.add_argument("--echo", action="store_true", help="stream the ranks' output")
    parser.add_argument("--no-watch", action="store_true", help="no live watch")
    parser.add_argument("--end-job", action="store_true",
                        help="the live watch ends the job at its alarm")
    parser.add_argument("--job", help="watch: the job's name in the control plane")
    parser.add_argument("--world-size", type=int, help="watch: how many ranks the job has")
    parser.add_argument("--redis", help="watch: the control plane's Redis (default $REDIS_URL)")


def run(args: argparse.Namespace) -> int:
    """0 when every scenario run was detected in time with the right culprit (healthy: no
    alarm; watch: no alarm), 1 if not, 2 for a usage error."""
    if args.list:
        width = max(map(len, SCENARIOS))
        for spec in SCENARIOS.values():
            print(f"{spec.name:<{width}}  {spec.summary} [culprit: rank {spec.culprit}; "
                  f"{spec.world_size} ranks]")
        return 0
    if args.timeout is not None and args.timeout <= 0:
        print(f"labkit hang: --timeout must be positive, got {args.timeout:g}", file=sys.stderr)
        return 2
    if args.scenario in ("watch", HEALTHY.name):
        from labkit.hangs.watch_cli import run_healthy_cli, run_watch_cli

        return run_watch_cli(args) if args.scenario == "watch" else run_healthy_cli(args)
    if not args.scenario:
        print("labkit hang: name a scenario (or 'all'), or use --list", file=sys.stderr)
        return 2
    if args.scenario != "all" and args.scenario not in SCENARIOS:
        print(f"labkit hang: unknown scenario {args.scenario!r}; one of: "
              f"{', '.join(SCENARIOS)}, all, healthy, watch", file=sys.stderr)
        return 2
    detail = None if args.detail is None else args.detail == "on"
    echo = print if args.echo and not args.json else None
    names = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    reports = []
    for name in names:
        report = run_scenario(name, args.timeout, detail, echo, watch=not args.no_watch,
                              end_job=args.end_job)
        reports.append(report)
        if not args.json:
            print(format_report(report), flush=True)
    if args.json:
        data = [r.to_dict() for r in reports]
        print(json.dumps(data if args.scenario == "all" else data[0], indent=2))
    return 0 if all(r.ok for r in reports) else 1
