"""Advantage and value-target estimators over a rollout: GAE for fresh data, V-trace for stale.

Tensors are [T, E] (time, environments); ``done[t]`` = 1 where the episode ended at step t, so
nothing bootstraps across it; ``bootstrap`` [E] is the value of the state after the last step.
"""

from __future__ import annotations

import torch


def gae(rewards: torch.Tensor, values: torch.Tensor, bootstrap: torch.Tensor,
        done: torch.Tensor, gamma: float, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimates and value targets, all [T, E]; ``bootstrap`` is [E]."""
    steps = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(bootstrap)
    for t in reversed(range(steps)):
        next_value = bootstrap if t == steps - 1 else values[t + 1]
        alive = 1.0 - done[t]
        delta = rewards[t] + gamma * next_value * alive - values[t]
        running = delta + gamma * lam * alive * running
        advantages[t] = running
    return advantages, advantages + values


def vtrace(behaviour_logp: torch.Tensor, target_logp: torch.Tensor, rewards: torch.Tensor,
           values: torch.Tensor, bootstrap: torch.Tensor, done: torch.Tensor, gamma: float,
           rho_bar: float = 1.0, c_bar: float = 1.0, lam: float = 1.0
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """V-trace targets ``vs`` and policy-gradient advantages (Espeholt et al. 2018, eq. 1).

    All inputs [T, E] except ``bootstrap`` [E]; no gradients flow through the results.
    ``lam`` < 1 also discounts the traces (the paper's remark on ``c_s = lam min(c_bar, ratio)``),
    the same bias-variance knob as GAE's lambda. Returns (vs, advantages, clipped rho)."""
    with torch.no_grad():
        ratio = torch.exp(target_logp - behaviour_logp)
        rho = ratio.clamp(max=rho_bar)
        c = lam * ratio.clamp(max=c_bar)
        alive = 1.0 - done
        next_values = torch.cat([values[1:], bootstrap[None]], dim=0)
        deltas = rho * (rewards + gamma * next_values * alive - values)
        correction = torch.zeros_like(bootstrap)
        vs_minus_v = torch.zeros_like(values)
        for t in reversed(range(values.shape[0])):
            correction = deltas[t] + gamma * alive[t] * c[t] * correction
            vs_minus_v[t] = correction
        vs = vs_minus_v + values
        next_vs = torch.cat([vs[1:], bootstrap[None]], dim=0)
        advantages = rho * (rewards + gamma * next_vs * alive - values)
    return vs, advantages, rho


__all__ = ["gae", "vtrace"]
