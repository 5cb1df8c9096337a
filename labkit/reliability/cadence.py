"""When a training loop checkpoints: every N updates, or every S seconds, one kind per run.

A cadence in updates writes the same checkpoints on any machine: update 25 is update 25 on a
laptop, a CI runner or a GPU node. A cadence in seconds is what the guide and Young's interval
speak in, and what an operator sets on a cluster; on a machine five times faster it writes a
fifth as many checkpoints over the same work, and a run shorter than the interval writes none.
Lessons and tests that need a checkpoint at a known update use the cadence in updates; a lesson
that teaches seconds derives them from the step time it measured.

Every config that checkpoints (``TrainConfig``, ``ElasticConfig``, ``CapstoneConfig``) has the
two fields ``checkpoint_every_updates`` and ``checkpoint_every_s`` (``--checkpoint-every-updates``
and ``--checkpoint-every-s`` on the command line); ``cadence_of(cfg)`` reads them.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Any

from labkit.errors import ParameterError


@dataclass(frozen=True)
class CheckpointCadence:
    """``updates``: checkpoint after every ``updates``-th update (N, 2N, ...); ``seconds``: after
    the first update that ends at least ``seconds`` after the previous save ended (or after the
    start). Neither: no periodic checkpoints. Both: refused by ``validate``."""

    updates: int | None = None
    seconds: float | None = None

    @property
    def periodic(self) -> bool:
        return self.updates is not None or self.seconds is not None

    def validate(self) -> None:
        """ParameterError for 0, a negative number, a non-number, or both kinds at once."""
        if self.updates is not None and self.seconds is not None:
            raise ParameterError(
                f"checkpoint every {self.updates} updates or every {self.seconds:g} s, not both: "
                "give one of checkpoint_every_updates / checkpoint_every_s "
                "(--checkpoint-every-updates / --checkpoint-every-s) and leave the other unset")
        if self.updates is not None and (
                isinstance(self.updates, bool) or not isinstance(self.updates, int)
                or self.updates < 1):
            raise ParameterError(
                f"checkpoint_every_updates must be a whole number of updates >= 1, got "
                f"{self.updates!r}; leave it unset for no periodic checkpoints")
        if self.seconds is not None and (
                isinstance(self.seconds, bool) or not isinstance(self.seconds, int | float)
                or not self.seconds > 0):
            raise ParameterError(
                f"checkpoint_every_s must be a positive number of seconds, got "
                f"{self.seconds!r}; leave it unset for no periodic checkpoints")

    def due(self, updates_done: int, last_save_at: float, now: float | None = None) -> bool:
        """True when the update that brought the count to ``updates_done`` should be followed
        by a checkpoint. ``last_save_at``: ``time.monotonic()`` when the previous save (or the
        run) ended."""
        if self.updates is not None:
            return updates_done > 0 and updates_done % self.updates == 0
        if self.seconds is not None:
            return (time.monotonic() if now is None else now) - last_save_at >= self.seconds
        return False

    def describe(self) -> str:
        if self.updates is not None:
            return f"every {self.updates} update{'s' if self.updates != 1 else ''}"
        if self.seconds is not None:
            return f"every {self.seconds:g} s"
        return "no periodic checkpoints"


def cadence_of(cfg: Any) -> CheckpointCadence:
    """The cadence a config's ``checkpoint_every_updates`` and ``checkpoint_every_s`` say."""
    return CheckpointCadence(cfg.checkpoint_every_updates, cfg.checkpoint_every_s)


def add_cadence_arguments(parser: argparse.ArgumentParser, default_updates: int | None = None,
                          what: str = "update") -> None:
    """``--checkpoint-every-updates N`` and ``--checkpoint-every-s S``; at most one of them."""
    default = f"default {default_updates}" if default_updates else "default: none"
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--checkpoint-every-updates", type=int, default=None, metavar="N",
                       help=f"checkpoint after every N-th {what}, the same on any machine "
                            f"({default})")
    group.add_argument("--checkpoint-every-s", type=float, default=None, metavar="S",
                       help="... or every S seconds (fewer checkpoints on a faster machine)")


def cadence_fields(args: argparse.Namespace, default_updates: int | None = None
                   ) -> dict[str, int | float | None]:
    """The config fields ``add_cadence_arguments``' options give (the default when neither)."""
    updates, seconds = args.checkpoint_every_updates, args.checkpoint_every_s
    if updates is None and seconds is None:
        updates = default_updates
    return {"checkpoint_every_updates": updates, "checkpoint_every_s": seconds}


__all__ = ["CheckpointCadence", "add_cadence_arguments", "cadence_fields", "cadence_of"]
