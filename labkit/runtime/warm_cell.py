"""One cell on a warm group, as the notebook follows it, and what a warm group tells the notebook:
the cell's result, a rank's error (the group stays up), or the group's end (why, what was ended).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from labkit.errors import LaunchError
from labkit.runtime.failures import RankFailedError, RankFailure, failure_details


def ranks_text(ranks: Sequence[int]) -> str:
    """``rank 1`` or ``ranks 0, 2``."""
    ranks = sorted(ranks)
    return f"rank{'s' * (len(ranks) != 1)} {', '.join(map(str, ranks))}"


def processes_text(count: int) -> str:
    """``1 process`` or ``10 processes``."""
    return f"{count} process{'es' * (count != 1)}"


@dataclass
class CellResult:
    """A cell that ran on every rank: its number, seconds, and what rank 0 published."""

    cell: int
    seconds: float
    published: Any


@dataclass(frozen=True)
class Ending:
    """How a warm group ended: why, how many of its processes were ended, how many still run (0
    after every clean end), and the ranks that died with how (when one did)."""

    reason: str
    ended: int
    left: int
    failures: tuple[RankFailure, ...] = ()

    @property
    def counts(self) -> str:
        left = f"{self.left} STILL RUNNING" if self.left else "none left"
        return f"{processes_text(self.ended)} ended, {left}"


class WarmGroupEnded(LaunchError):
    """The warm group is gone (a rank died, a cell hung or broke the process group, it was
    stopped or sat idle): the message says why, what was ended and how to start it again."""

    def __init__(self, message: str, ending: Ending | None = None) -> None:
        self.ending = ending
        super().__init__(message)

    def _render_traceback_(self) -> list[str]:
        """What IPython shows: the message, no traceback through labkit."""
        return f"{type(self).__name__}: {self}".splitlines()


class CellFailedError(RankFailedError):
    """A rank raised in a warm cell: the message holds its traceback; the group is still up."""

    def __init__(self, failure: RankFailure, others: Sequence[RankFailure] = ()) -> None:
        super().__init__(failure, others)
        self.args = (f"{self.args[0]}\nThe warm group is still up: the next cell runs on it.",)

    def _render_traceback_(self) -> list[str]:
        return f"{type(self).__name__}: {self}".splitlines()


@dataclass
class CellProgress:
    """What the notebook has heard of one cell so far: which ranks got it, their replies, and the
    fence lines that say their output has all arrived (one on stdout, one on stderr each)."""

    number: int
    sent: set[int] = field(default_factory=set)
    replies: dict[int, dict[str, Any]] = field(default_factory=dict)
    fences: int = 0
    failed_at: float | None = None  # when the first rank reported an error
    interrupted_at: float | None = None  # when the ranks still in the cell were sent SIGINT

    @property
    def pending(self) -> list[int]:
        """Ranks that got the cell and have not replied."""
        return sorted(self.sent - set(self.replies))

    @property
    def complete(self) -> bool:
        return not self.pending and self.fences >= 2 * len(self.sent)

    @property
    def waiting_for(self) -> str:
        """What keeps the cell from being complete, in words."""
        if self.pending:
            return f"still running on {ranks_text(self.pending)}"
        return "every rank had replied, but not all of its output had arrived"

    def failures(self, ranks: dict[int, dict[str, Any]]) -> list[RankFailure]:
        """The ranks that raised (by time), then those interrupted because of them."""
        found = []
        for rank, reply in self.replies.items():
            status = reply.get("status")
            if status == "ok":
                continue
            error = reply.get("error") or "KeyboardInterrupt: stopped after another rank failed"
            found.append((status != "error", RankFailure(
                rank, int(ranks.get(rank, {}).get("node", -1)), 0, float(reply.get("time", 0.0)),
                error, reply.get("traceback", ""))))
        return [failure for _, failure in sorted(found, key=lambda f: (f[0], f[1].time))]

    def broken(self, ranks: dict[int, dict[str, Any]]) -> tuple[str, str] | None:
        """(reason, traceback) when a rank's error left the process group broken, else None."""
        for failure in self.failures(ranks):
            if self.replies[failure.rank].get("broken"):
                return (f"rank {failure.rank} (node {failure.node}) left the process group "
                        f"broken after a failed collective: {failure.error.splitlines()[0]}",
                        failure_details(failure))
        return None
