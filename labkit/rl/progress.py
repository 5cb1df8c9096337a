"""Learning progress as a learner sees it: recent returns, "solved", and a thinned curve."""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from labkit.rl.agents import SOLVED_RETURN, SOLVED_WINDOW

MAX_CURVE_POINTS = 400


@dataclass
class Progress:
    """Episode returns in the order they finished, env steps, and when the run was solved."""

    started: float = field(default_factory=time.monotonic)
    env_steps: int = 0
    updates: int = 0
    batches: int = 0
    episodes: int = 0
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=SOLVED_WINDOW))
    solved_s: float | None = None
    solved_steps: int | None = None
    curve: list[dict[str, float]] = field(default_factory=list)
    _every: int = 1

    @property
    def mean_return(self) -> float | None:
        """Mean of the last ``SOLVED_WINDOW`` finished episodes (None before the first one)."""
        return sum(self.recent) / len(self.recent) if self.recent else None

    @property
    def solved(self) -> bool:
        return self.solved_s is not None

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.started

    def record(self, returns: Iterable[float], env_steps: int, updated: bool = True) -> None:
        """After a batch: the episodes that finished, the env steps it held, and whether the
        policy was updated (a batch the learner dropped entirely was not)."""
        for value in returns:
            self.recent.append(float(value))
            self.episodes += 1
        self.env_steps += env_steps
        self.updates += int(updated)
        self.batches += 1
        mean = self.mean_return
        if (not self.solved and mean is not None and len(self.recent) == SOLVED_WINDOW
                and mean >= SOLVED_RETURN):
            self.solved_s, self.solved_steps = self.seconds, self.env_steps
        if self.batches % self._every == 0 and mean is not None:
            self.curve.append({"env_steps": self.env_steps, "seconds": round(self.seconds, 3),
                               "mean_return": round(mean, 2)})
            if len(self.curve) >= MAX_CURVE_POINTS:  # keep every other point, sample half as often
                self.curve = self.curve[::2]
                self._every *= 2


def progress_state(progress: Progress) -> str:
    """The progress as JSON text (for a checkpoint); time is kept as seconds elapsed."""
    return json.dumps({
        "seconds": progress.seconds, "env_steps": progress.env_steps, "updates": progress.updates,
        "batches": progress.batches, "episodes": progress.episodes, "recent": list(progress.recent),
        "solved_s": progress.solved_s, "solved_steps": progress.solved_steps,
        "curve": progress.curve, "every": progress._every,
    })


def progress_from_state(text: str) -> Progress:
    """A Progress that continues where :func:`progress_state` left it (its clock too)."""
    raw = json.loads(text)
    progress = Progress(started=time.monotonic() - raw["seconds"], env_steps=raw["env_steps"],
                        updates=raw["updates"], batches=raw["batches"], episodes=raw["episodes"],
                        solved_s=raw["solved_s"], solved_steps=raw["solved_steps"],
                        curve=raw["curve"])
    progress.recent.extend(raw["recent"])
    progress._every = raw["every"]
    return progress


__all__ = ["Progress", "progress_from_state", "progress_state"]
