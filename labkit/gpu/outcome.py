"""What a GPU check returns or raises, and what it may use: shared by ``checks`` and the
checks that live in modules of their own (``hang_check``)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from labkit.errors import LabkitError


class CheckFailed(LabkitError):
    """The path ran and something is wrong: ``reason`` in one line, ``details`` measured."""

    def __init__(self, reason: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(reason)
        self.reason, self.details = reason, details or {}


class CheckSkipped(LabkitError):
    """The check cannot run here; the message says why."""


@dataclass(frozen=True)
class Context:
    """What a check may use: the local GPUs and the moment its limit ends."""

    gpus: int
    deadline: float  # time.monotonic() value
    startup_s: float  # allowance for starting one torchrun job's processes here

    @property
    def nproc(self) -> int:
        """Ranks per job: one per local GPU, at least one."""
        return max(1, self.gpus)

    def left(self, reserve_s: float = 0.0) -> float:
        """Seconds until the deadline, less ``reserve_s``, never below one."""
        return max(1.0, self.deadline - time.monotonic() - reserve_s)


Outcome = tuple[str, dict[str, Any]]


def fail_if(problems: list[str], details: dict[str, Any]) -> None:
    """Raise CheckFailed naming every problem, with the details, if there is any."""
    if problems:
        raise CheckFailed("; ".join(problems), details)
