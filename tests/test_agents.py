"""labkit.rl.agents: rollouts, their frames, and an environment pool that resumes exactly."""

from __future__ import annotations

import io
import time

import numpy as np
import torch

from labkit.buffers.frame import decode, encode
from labkit.rl.agents import ActorCritic, EnvPool, Rollout, collect, seed_everything


def test_rollout_shapes_and_frame_round_trip() -> None:
    seed_everything(0)
    pool = EnvPool(3, seed=7)
    rollout = collect(ActorCritic(16), pool, 5, generator=torch.Generator().manual_seed(0),
                      policy_version=4, agent_id=2, seq=9)
    assert rollout.obs.shape == (5, 3, 4) and rollout.actions.shape == (5, 3)
    assert rollout.steps == 15 and rollout.last_obs.shape == (3, 4)
    back = Rollout.from_experience(decode(encode(rollout.to_experience())))
    assert (back.policy_version, back.agent_id, back.seq) == (4, 2, 9)
    assert torch.equal(back.obs, rollout.obs) and torch.equal(back.actions, rollout.actions)
    assert torch.all(rollout.behaviour_logp <= 0)


def test_env_pool_state_resumes_the_same_episodes() -> None:
    """Save mid-episode, step on; restore into a fresh pool, step the same: identical."""
    pool = EnvPool(4, seed=3)
    rng = np.random.default_rng(0)
    for _ in range(30):
        pool.step(rng.integers(0, 2, 4))
    buffer = io.BytesIO()
    torch.save(pool.state_dict(), buffer)
    actions = [rng.integers(0, 2, 4) for _ in range(200)]  # long enough for episodes to reset
    first = [pool.step(a) for a in actions]
    buffer.seek(0)
    fresh = EnvPool(4, seed=99)
    fresh.load_state_dict(torch.load(buffer, weights_only=True))
    second = [fresh.step(a) for a in actions]
    for (r1, d1, f1), (r2, d2, f2) in zip(first, second, strict=True):
        assert np.array_equal(r1, r2) and np.array_equal(d1, d2) and f1 == f2
    assert np.array_equal(pool.obs, fresh.obs)
    assert any(f for _, _, f in first)  # some episodes ended (and reset from the saved RNG)


def _rollout(delay_factor: float) -> tuple[Rollout, EnvPool]:
    seed_everything(0)
    pool = EnvPool(2, seed=5, delay_factor=delay_factor)
    rollout = collect(ActorCritic(16), pool, 40, generator=torch.Generator().manual_seed(1),
                      policy_version=0)
    return rollout, pool


def test_a_straggler_sleeps_in_pieces_records_what_it_slept_and_steps_the_same(monkeypatch):
    """The delay changes when steps happen, never what they are; ``delayed_s`` is slept time."""
    import labkit.rl.agents as agents

    plain, _ = _rollout(1.0)
    asked: list[float] = []
    real_sleep = time.sleep

    def recording_sleep(seconds: float) -> None:
        asked.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(agents.time, "sleep", recording_sleep)
    slow, pool = _rollout(3.0)
    for name in ("obs", "actions", "rewards", "done", "behaviour_logp", "last_obs"):
        assert torch.equal(getattr(slow, name), getattr(plain, name)), name
    assert asked, "a straggler with factor 3 never slept"
    assert all(s >= agents.STRAGGLER_SLEEP_S for s in asked[:-1])  # the last settles the rest
    assert pool.delayed_s >= sum(asked)  # recorded: slept, which is at least what was asked
    assert pool.owed_s <= 0  # nothing left owed when the rollout is returned
