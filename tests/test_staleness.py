"""Staleness weights, the GAE and V-trace estimators, and the fixed-lag benchmark."""

from __future__ import annotations

import math

import pytest
import torch

from labkit.errors import ParameterError
from labkit.rl.returns import gae, vtrace
from labkit.rl.staleness import StalenessConfig, weight
from labkit.training.fixed_lag import LagRun, simulate, summarize, sweep


def test_weights_per_method() -> None:
    assert weight(10, StalenessConfig("none")) == 1.0
    assert weight(10, StalenessConfig("exp")) == pytest.approx(math.exp(-0.1))
    assert weight(4, StalenessConfig("drop", max_lag=4)) == 1.0
    assert weight(5, StalenessConfig("drop", max_lag=4)) == 0.0
    assert weight(50, StalenessConfig("vtrace")) == 1.0  # V-trace corrects per sample instead


def test_bad_config_is_rejected() -> None:
    with pytest.raises(ParameterError, match="unknown staleness method"):
        StalenessConfig("newest").validate()
    with pytest.raises(ParameterError):
        StalenessConfig("drop", max_lag=-1).validate()


def rollout(seed: int = 0, steps: int = 7, envs: int = 3):
    gen = torch.Generator().manual_seed(seed)
    rewards = torch.rand(steps, envs, generator=gen)
    values = torch.rand(steps, envs, generator=gen)
    bootstrap = torch.rand(envs, generator=gen)
    done = (torch.rand(steps, envs, generator=gen) < 0.2).float()
    return rewards, values, bootstrap, done


def test_vtrace_on_policy_equals_gae() -> None:
    """With the behaviour policy = the target policy and c = lambda, V-trace's targets are the
    lambda-returns GAE gives (Espeholt et al. 2018, remark 1)."""
    rewards, values, bootstrap, done = rollout()
    logp = torch.log(torch.rand(rewards.shape) * 0.9 + 0.05)
    advantages, targets = gae(rewards, values, bootstrap, done, 0.99, 0.95)
    vs, _, rho = vtrace(logp, logp, rewards, values, bootstrap, done, 0.99, lam=0.95)
    assert torch.allclose(vs, targets, atol=1e-6)
    assert torch.equal(rho, torch.ones_like(rho))


def test_vtrace_clips_the_importance_ratios() -> None:
    rewards, values, bootstrap, done = rollout(1)
    behaviour = torch.full(rewards.shape, math.log(0.1))
    target = torch.full(rewards.shape, math.log(0.9))  # ratio 9
    _, _, rho = vtrace(behaviour, target, rewards, values, bootstrap, done, 0.99, rho_bar=1.0)
    assert torch.allclose(rho, torch.ones_like(rho))
    _, _, rho = vtrace(target, behaviour, rewards, values, bootstrap, done, 0.99)  # ratio 1/9
    assert torch.allclose(rho, torch.full_like(rho, 1 / 9))


def test_gae_does_not_bootstrap_across_an_episode_end() -> None:
    rewards, values = torch.ones(2, 1), torch.zeros(2, 1)
    done = torch.tensor([[1.0], [0.0]])
    advantages, _ = gae(rewards, values, torch.tensor([100.0]), done, 0.5, 1.0)
    assert advantages[0, 0] == 1.0  # the 100 after step 1 never reaches step 0
    assert advantages[1, 0] == 1.0 + 0.5 * 100.0


def test_exact_lag_run_is_repeatable_and_keeps_its_lag() -> None:
    run = LagRun("drop", 3, seed=5, steps=2048, staleness=StalenessConfig("drop", max_lag=1),
                 spread=False)
    first, second = simulate(run), simulate(run)
    assert first == second
    assert first["updates"] == 2  # warming up, lags run 0, 1, 2, 3, 3...: only lags 0 and 1 kept
    assert first["steps"] == 2048


def test_spread_lags_mix_old_and_new() -> None:
    """Lags drawn from 0..2*lag: drop at the mean keeps some rollouts and loses others."""
    run = LagRun("drop", 2, seed=1, steps=4096, staleness=StalenessConfig("drop", max_lag=2))
    result = simulate(run)
    assert 0 < result["updates"] < 4096 // 256
    assert result["mean_policy_kl"] is not None


@pytest.mark.slow
def test_sweep_runs_each_combination_in_its_own_process() -> None:
    rows = sweep(["none", "vtrace"], [0, 2], [0], steps=512, jobs=2)
    assert [(r["method"], r["lag"]) for r in rows] == [
        ("none", 0), ("none", 2), ("vtrace", 0), ("vtrace", 2)]
    table = summarize(rows)
    assert len(table) == 4 and all(t["seeds"] == 1 for t in table)
    with pytest.raises(ParameterError):
        sweep(["none"], [-1], [0], steps=512)
