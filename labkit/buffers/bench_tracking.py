"""What the benchmark's learner checks and records: every returned experience seen once, with the
bytes it was sent with (``Tracker``), and when each agent pushed (``Spans``), so rates are taken
over what really happened; and how the measurement windows are timed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

LEAD_ROUND_TRIPS = 5.0  # a window's command goes out this many measured round trips early,
LEAD_MIN_S = 0.02  # and never less, so that every agent is waiting when the window opens
DRAIN_LIMIT_S = 120.0  # only bounds a drain that keeps getting items
DRAIN_QUIET_S = 2.0  # a drain short of what was pushed ends after pulls were empty this long


@dataclass
class Tracker:
    """Checks what the learner gets: ids seen once, tensor bytes as the agents sent them."""

    expected_obs: bytes
    guide: bool
    returned: int = 0
    intact: int = 0
    corrupt: int = 0
    duplicates: int = 0
    seen: set[tuple[int, int]] = field(default_factory=set)

    def take(self, exps: list) -> int:
        """Counts ``exps``; returns how many arrived intact and new."""
        good = 0
        for exp in exps:
            self.returned += 1
            if not self.guide:
                key = (exp.agent_id, exp.seq)
                if key in self.seen:
                    self.duplicates += 1
                    continue
                self.seen.add(key)
            tensor = exp.tensors.get("raw" if self.guide else "obs")
            if tensor is not None and tensor.numpy().tobytes() == self.expected_obs:
                good += 1
            else:
                self.corrupt += 1
        self.intact += good
        return good


@dataclass
class Spans:
    """When each agent of one window really pushed: its count and its own [first, last]."""

    pushed: list[int]
    first: list[float]
    last: list[float]

    @classmethod
    def of(cls, replies: list[dict[str, Any]]) -> Spans:
        return cls([int(r["pushed"]) for r in replies], [float(r["first"]) for r in replies],
                   [float(r["last"]) for r in replies])

    def own_rate(self) -> float | None:
        """The sum of each agent's rate over its own span; None when nobody pushed."""
        rates = [n / (b - a) for n, a, b in zip(self.pushed, self.first, self.last, strict=True)
                 if n > 0 and b > a]
        return sum(rates) if rates else None

    def together(self, until: float | None = None) -> tuple[float, float] | None:
        """The stretch in which every agent was pushing (cut at ``until``), or None."""
        if not all(self.pushed):
            return None
        begin, end = max(self.first), min(self.last)
        if until is not None:
            end = min(end, until)
        return (begin, end) if end > begin else None

    def overlap(self) -> float:
        """The share of this phase (first start to last end) with every agent pushing."""
        common = self.together()
        whole = max(self.last) - min(self.first)
        return round((common[1] - common[0]) / whole, 3) if common and whole > 0 else 0.0
