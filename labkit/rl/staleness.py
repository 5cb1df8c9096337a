"""What a learner does with experience an older policy produced: four methods, one config.

In asynchronous training an actor acts with the policy it last fetched; by the time its
rollout reaches the learner, the learner has moved on. The *lag* of a rollout is how many
policy versions (updates) old it is. The methods:

- ``none``: use it as if it were fresh (plain on-policy actor-critic);
- ``exp``: the field guide's fix, weight each sample by ``exp(-age * lambda)`` (the guide used
  lambda = 0.01; here age is the lag in versions);
- ``drop``: discard rollouts older than ``max_lag`` versions (Sample Factory's
  ``max_policy_lag``);
- ``vtrace``: IMPALA's off-policy correction, importance ratios pi/mu clipped at ``rho_bar`` (for
  the policy gradient and value targets) and ``c_bar`` (for how far corrections propagate).

The estimators themselves (GAE, V-trace) are in ``labkit.rl.returns``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from labkit.errors import ParameterError

METHODS = ("none", "exp", "drop", "vtrace")


@dataclass(frozen=True)
class StalenessConfig:
    """Which method, and its knobs (each used only by its own method)."""

    method: str = "none"  # async: what to do with old experience (none, exp, drop, vtrace)
    exp_lambda: float = 0.01  # exp: the guide's penalty rate per version of age
    max_lag: int = 4  # drop: oldest lag (versions) still used
    rho_bar: float = 1.0  # vtrace: clip for the policy-gradient and value importance ratios
    c_bar: float = 1.0  # vtrace: clip for the trace-cutting ratios

    def validate(self) -> None:
        if self.method not in METHODS:
            raise ParameterError(
                f"unknown staleness method {self.method!r}: choose one of {', '.join(METHODS)}")
        if self.exp_lambda < 0 or self.max_lag < 0 or self.rho_bar <= 0 or self.c_bar <= 0:
            raise ParameterError("need exp_lambda >= 0, max_lag >= 0, rho_bar > 0 and c_bar > 0")


def weight(lag: int, cfg: StalenessConfig) -> float:
    """The weight a rollout of this lag gets in the loss: 0 means dropped."""
    if cfg.method == "exp":
        return math.exp(-lag * cfg.exp_lambda)
    if cfg.method == "drop":
        return 1.0 if lag <= cfg.max_lag else 0.0
    return 1.0


__all__ = ["METHODS", "StalenessConfig", "weight"]
