"""The learning settings every trainer in the lab shares: rollout shape, network width, the
actor-critic loss's coefficients (lessons 04, 06, 10 and the capstone)."""

from __future__ import annotations

from dataclasses import dataclass

from labkit.errors import ParameterError


@dataclass(frozen=True)
class Hyper:
    """Learning settings shared by both modes (defaults solve CartPole on a laptop CPU)."""

    envs_per_agent: int = 8  # CartPole environments each agent steps together
    rollout_len: int = 32  # steps per environment in one rollout
    hidden: int = 64  # width of the policy and value MLPs
    lr: float = 2.5e-3  # Adam learning rate
    gamma: float = 0.99  # discount
    gae_lambda: float = 0.95  # GAE lambda, also the trace discount of V-trace
    entropy_coef: float = 0.01  # entropy bonus: keeps exploring
    value_coef: float = 0.5  # weight of the critic's loss
    max_grad_norm: float = 0.5  # clip_grad_norm_ after backward, before the step
    normalize_advantages: bool = False  # scale advantages to mean 0, std 1 per batch (unstable with stale data)

    def validate(self) -> None:
        """Raises ParameterError for settings no run can use."""
        if self.envs_per_agent < 1 or self.rollout_len < 2 or self.hidden < 1 or self.lr <= 0:
            raise ParameterError("need envs_per_agent >= 1, rollout_len >= 2, hidden >= 1, lr > 0")
