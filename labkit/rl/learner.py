"""The actor-critic update every learner in the lab makes, fresh or stale experience alike.

Synchronous ranks call :func:`actor_critic_loss` on their own fresh rollout (lag 0) and let DDP
average the gradients; the asynchronous learner calls it on whatever rollouts arrived, with
their lags, and a :class:`~labkit.rl.staleness.StalenessConfig` saying what to do about them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from labkit.rl.agents import ActorCritic, Rollout
from labkit.rl.hyper import Hyper
from labkit.rl.returns import gae, vtrace
from labkit.rl.staleness import StalenessConfig, weight


@dataclass
class LossInfo:
    """What one update saw: how much data, how old, how much of it was used."""

    rollouts: int
    used: int  # rollouts with a non-zero weight
    mean_lag: float
    max_lag: int
    mean_weight: float
    policy_loss: float
    value_loss: float
    entropy: float
    mean_rho: float | None = None  # vtrace: mean clipped importance ratio
    policy_kl: float = 0.0  # estimate of KL(behaviour || current policy): how off-policy the data is


def actor_critic_loss(model: ActorCritic | torch.nn.Module, rollouts: Sequence[Rollout], version: int,
                      cfg: StalenessConfig, hyper: Hyper) -> tuple[torch.Tensor | None, LossInfo]:
    """The loss on ``rollouts`` for the policy at ``version``; None when every rollout was
    dropped. Rollouts are stacked along the environment axis, so they need the same length."""
    lags = [max(0, version - r.policy_version) for r in rollouts]
    weights = [weight(lag, cfg) for lag in lags]
    kept = [(r, w) for r, w in zip(rollouts, weights, strict=True) if w > 0]
    info = LossInfo(len(rollouts), len(kept), sum(lags) / max(1, len(lags)), max(lags, default=0),
                    sum(weights) / max(1, len(weights)), 0.0, 0.0, 0.0)
    if not kept:
        return None, info

    device = next(model.parameters()).device

    def cat(name: str) -> torch.Tensor:
        parts = [getattr(r, name) for r, _ in kept]
        return torch.cat(parts, dim=1 if name != "last_obs" else 0).to(device)

    obs, actions, rewards, done = cat("obs"), cat("actions"), cat("rewards"), cat("done")
    sample_w = torch.cat([torch.full(r.actions.shape, w) for r, w in kept], dim=1).to(device)
    logits, values = model(obs)
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, actions[..., None]).squeeze(-1)
    with torch.no_grad():  # DDP wraps the model: the critic alone is on .module
        bootstrap = getattr(model, "module", model).value(cat("last_obs")).squeeze(-1)
    if cfg.method == "vtrace":
        targets, advantages, rho = vtrace(cat("behaviour_logp"), logp.detach(), rewards,
                                          values.detach(), bootstrap, done, hyper.gamma,
                                          cfg.rho_bar, cfg.c_bar, hyper.gae_lambda)
        info.mean_rho = float(rho.mean())
    else:
        advantages, targets = gae(rewards, values.detach(), bootstrap, done, hyper.gamma,
                                  hyper.gae_lambda)
    if hyper.normalize_advantages:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    # "Weight each sample's contribution": a weighted mean over the samples kept, so a batch
    # that is all equally stale under ``exp`` is a smaller step, not the same one.
    policy_loss = -(sample_w * logp * advantages).mean()
    value_loss = 0.5 * (sample_w * (targets - values) ** 2).mean()
    entropy_mean = (sample_w * entropy).mean()
    loss = policy_loss + hyper.value_coef * value_loss - hyper.entropy_coef * entropy_mean
    info.policy_loss, info.value_loss = policy_loss.item(), value_loss.item()
    info.entropy = entropy_mean.item()
    info.policy_kl = (cat("behaviour_logp") - logp.detach()).mean().item()
    return loss, info


def apply_update(model: torch.nn.Module, optimizer: torch.optim.Optimizer, loss: torch.Tensor,
                 max_grad_norm: float) -> float:
    """One optimizer step: backward (under DDP this averages the gradients across ranks), clip
    the gradient norm, step. Returns the norm before clipping."""
    optimizer.zero_grad()
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()
    return float(norm)


__all__ = ["LossInfo", "actor_critic_loss", "apply_update"]
