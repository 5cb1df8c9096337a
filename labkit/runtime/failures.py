"""Why a rank died, in words: its exit code or signal, the traceback it recorded, or the last lines
it wrote to stderr, and the errors a failed launch raises (``RankFailedError`` and the rest).

A rank killed by a signal leaves no traceback; torchrun reports only the exit code of each
worker it saw fail. The lab collects both: what ``worker`` recorded in the run folder, and
what torchrun printed, and names the first rank that failed first.
"""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from labkit.errors import LaunchError
from labkit.runtime.worker import StderrTail

MORE_SHOWN = 5  # a failed job's error: ranks that failed after the first, one line each


@dataclass(frozen=True)
class RankFailure:
    """One rank that failed: it raised (``traceback`` is the Python one), or its process exited
    non-zero without one or was killed by a signal (``exitcode``, as torchrun reports it,
    and ``stderr``, the last lines the process wrote there)."""

    rank: int
    node: int
    restart: int
    time: float
    error: str
    traceback: str
    exitcode: int | None = None  # negative: killed by that signal; None: the rank raised
    stderr: tuple[str, ...] = ()

    @property
    def signal(self) -> str | None:
        """The signal that killed the rank process (``"SIGABRT"``), None if it was none."""
        return signal_name(self.exitcode)


def signal_name(exitcode: int | None) -> str | None:
    """The signal a negative exit code stands for (-6: ``"SIGABRT"``), else None."""
    if exitcode is None or exitcode >= 0:
        return None
    try:
        return signal.Signals(-exitcode).name
    except ValueError:
        return f"signal {-exitcode}"


SIGNAL_HINTS = {
    "SIGABRT": "native code aborted: std::terminate (\"terminate called ...\": a C++ exception "
               "nobody caught, or a thread ended inside C++), a failed assertion or a fatal "
               "Python error; its message, if it wrote one, is in the lines above.",
    "SIGSEGV": "a segmentation fault: native code (an extension, a library) touched memory it "
               "does not own; the Python stack above shows the call that got there.",
    "SIGKILL": "sent from outside the process: the kernel's out-of-memory killer (see `dmesg`), "
               "a scheduler, or kill -9.",
}

# faulthandler's report names the wrapper's and runpy's frames and every extension module
_NOISE = re.compile(r'^\s*File "(<frozen runpy>|.*[/\\]labkit[/\\]runtime[/\\]worker\.py)"'
                    r"|^Extension modules: ")


def describe_exit(exitcode: int) -> str:
    """How a rank process ended, in words: ``killed by SIGABRT (signal 6)``."""
    name = signal_name(exitcode)
    if name is None:
        return f"exited with code {exitcode} without a Python traceback"
    return f"killed by {name} (signal {-exitcode})" if name.startswith("SIG") \
        else f"killed by {name}"


def failure_details(failure: RankFailure) -> str:
    """The traceback, or for a process that ended without one its last stderr lines."""
    if failure.traceback:
        return failure.traceback
    shown = [f"  {line}" for line in failure.stderr if not _NOISE.search(line)]
    lines = [f"Last lines rank {failure.rank} wrote to stderr:", *shown] if shown \
        else [f"Rank {failure.rank} wrote nothing to stderr."]
    if hint := SIGNAL_HINTS.get(failure.signal or ""):
        lines.append(f"{failure.signal}: {hint}")
    return "\n".join(lines)


def _one_line(failure: RankFailure, width: int = 160) -> str:
    error = failure.error.splitlines()[0] if failure.error else ""
    error = error if len(error) <= width else error[:width - 3] + "..."
    return f"rank {failure.rank} (node {failure.node}, restart {failure.restart}): {error}"


class RankFailedError(LaunchError):
    """A rank raised or exited non-zero; ``str(err)`` carries that rank's traceback (or, for a
    process that ended without one, its last stderr lines) and a line for each rank that
    failed after it (``others``)."""

    def __init__(self, failure: RankFailure, others: Sequence[RankFailure] = ()) -> None:
        self.failure, self.others = failure, list(others)
        more = "".join(f"\n  then {_one_line(f)}" for f in self.others[:MORE_SHOWN])
        if len(self.others) > MORE_SHOWN:
            more += f"\n  then {len(self.others) - MORE_SHOWN} more rank(s)"
        super().__init__(
            f"rank {failure.rank} (node {failure.node}, restart {failure.restart}) failed: "
            f"{failure.error}{more}\n\n{failure_details(failure)}"
        )


class RankSignaledError(RankFailedError):
    """A rank process was killed by a signal (SIGABRT, SIGSEGV, SIGKILL, ...):
    ``failure.signal`` names it, ``failure.stderr`` holds its last stderr lines."""


class LaunchTimeoutError(LaunchError):
    """The job ran past its timeout; every process of it was ended."""


def _read_failures(run_dir: Path) -> list[RankFailure]:
    failures = []
    for path in (run_dir / "failures").glob("*.json"):
        try:
            failures.append(RankFailure(**json.loads(path.read_text())))
        except (ValueError, TypeError):
            continue  # a rank killed mid-write leaves half a file: nothing to report from it
    return failures


# torchrun's agent reports every worker process that failed, by pid: a log line as it sees the
# first one fail, and the ChildFailedError summary (every failed one) when it gives up.
TORCHRUN_EXIT_REPORTS = (
    re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: \d+ \(pid: (\d+)\)"),
    re.compile(r"exitcode\s*: (-?\d+) \(pid: (\d+)\)"),
)


def torchrun_exits(output: Sequence[str]) -> dict[int, int]:
    """pid -> exit code of every rank process torchrun's agents reported failed (negative: the
    signal that killed it), read from the agents' output lines."""
    exits = {}
    for line in output:
        if line.startswith("[node"):
            continue  # a rank's own output, not its agent's
        for pattern in TORCHRUN_EXIT_REPORTS:
            if match := pattern.search(line):
                exits[int(match[2])] = int(match[1])
    return exits


def exit_failures(exits: dict[int, int], tails: dict[int, StderrTail],
                  explained: set[tuple[int, int]]) -> list[RankFailure]:
    """A failure for each rank process torchrun reported (pid -> exit code) that recorded no
    Python error itself (``explained``: (rank, restart) pairs that did): who it was, when it
    ended and its last stderr lines come from its stderr tap."""
    failures = []
    for pid, code in exits.items():
        tail = tails.get(pid)
        if tail is None or (tail.rank, tail.restart) in explained:
            continue
        failures.append(RankFailure(tail.rank, tail.node, tail.restart, tail.ended,
                                    describe_exit(code), "", exitcode=code, stderr=tail.lines))
    return failures


def collect_failures(run_dir: Path, tails_dir: Path, output: Sequence[str]) -> list[RankFailure]:
    """Every rank that raised (its own record) or whose process torchrun saw fail, by time."""
    raised = _read_failures(run_dir)
    ended = exit_failures(torchrun_exits(output), StderrTail.read_all(tails_dir),
                          {(f.rank, f.restart) for f in raised})
    return sorted(raised + ended, key=lambda f: f.time)
