"""CartPole agents: an actor-critic policy, a pool of environments, and rollouts.

Every agent (a rank in synchronous training, an actor in asynchronous training) owns a few
``CartPole-v1`` environments and steps them with a policy. A :class:`Rollout` is ``T`` steps of
those environments, tagged with the version of the policy that produced it, so a learner knows
how stale it is. Rollouts travel as experience frames (``labkit.buffers.frame``): named tensors,
no pickle.

An episode ends when the pole falls (terminated) or at 500 steps (truncated); both are treated
as the end of the return here, a common simplification for CartPole. "Solved" in this lab: the
mean return of the last 20 finished episodes is at least 400.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from labkit.buffers.frame import Experience
from labkit.errors import ParameterError

ENV_ID = "CartPole-v1"
OBS_DIM = 4
N_ACTIONS = 2
SOLVED_RETURN = 400.0
SOLVED_WINDOW = 20  # episodes in the running mean that decides "solved"
STRAGGLER_SLEEP_S = 0.002
"""A straggler sleeps its delay in pieces at least this long. One step's delay is tens of
microseconds on a fast machine, about what ``time.sleep`` overshoots by, so sleeping it step
by step would make the agent slower than its factor says."""


class ActorCritic(nn.Module):
    """Two small MLPs: action logits (the policy) and a state value (the critic)."""

    def __init__(self, hidden: int = 64) -> None:
        super().__init__()
        self.policy = nn.Sequential(
            nn.Linear(OBS_DIM, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
            nn.Linear(hidden, N_ACTIONS),
        )
        self.value = nn.Sequential(
            nn.Linear(OBS_DIM, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
            nn.Linear(hidden, 1),
        )

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits [..., 2], value [...]) for observations [..., 4]."""
        return self.policy(obs), self.value(obs).squeeze(-1)


def seed_everything(seed: int) -> None:
    """Seeds Python, numpy and torch (this process); environments are seeded separately."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@dataclass
class Rollout:
    """``T`` steps of ``E`` environments, as one agent collected them.

    ``done[t]`` is 1 where the episode ended at step t (the return does not bootstrap past it).
    ``last_obs`` is the observation after the last step: the learner bootstraps from it.
    ``episode_returns`` holds the returns of the episodes that finished during the rollout."""

    obs: torch.Tensor  # [T, E, 4] float32
    actions: torch.Tensor  # [T, E] int64
    rewards: torch.Tensor  # [T, E] float32
    done: torch.Tensor  # [T, E] float32
    behaviour_logp: torch.Tensor  # [T, E] float32: log-prob of the action under the actor's policy
    last_obs: torch.Tensor  # [E, 4] float32
    episode_returns: torch.Tensor  # [k] float32
    policy_version: int
    agent_id: int
    seq: int
    timestamp: float

    @property
    def steps(self) -> int:
        return self.actions.numel()

    def to_experience(self) -> Experience:
        names = ("obs", "actions", "rewards", "done", "behaviour_logp", "last_obs",
                 "episode_returns")
        return Experience(self.agent_id, self.seq, self.policy_version, self.timestamp,
                          {name: getattr(self, name) for name in names})

    @classmethod
    def from_experience(cls, exp: Experience) -> Rollout:
        t = exp.tensors
        return cls(t["obs"], t["actions"], t["rewards"], t["done"], t["behaviour_logp"],
                   t["last_obs"], t["episode_returns"], exp.policy_version, exp.agent_id,
                   exp.seq, exp.timestamp)


class EnvPool:
    """``n`` CartPole environments stepped together, reset as episodes end, seeded from ``seed``.

    ``delay_factor`` > 1 makes this agent a straggler: each step owes a wait of
    ``(delay_factor - 1)`` times the time the step really took, so the agent is that many times
    slower whatever the machine's speed. The owed time is slept in pieces of at least
    ``STRAGGLER_SLEEP_S`` (and at the end of each rollout); ``delayed_s`` is the time really
    slept, and a sleep's overshoot is taken off what the next steps owe."""

    def __init__(self, n: int, seed: int, delay_factor: float = 1.0) -> None:
        if n < 1:
            raise ParameterError(f"an agent needs at least one environment, got {n}")
        self.envs = [gym.make(ENV_ID, disable_env_checker=True) for _ in range(n)]
        self.obs = np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(self.envs)])
        self.running = np.zeros(n)
        self.delay_factor = delay_factor
        self.delayed_s = 0.0
        self.owed_s = 0.0  # straggler delay not slept yet (negative: overslept, credited)

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[float]]:
        """Steps every env; returns (rewards, done, returns of the episodes that ended)."""
        rewards, done, finished = np.zeros(len(self.envs)), np.zeros(len(self.envs)), []
        for i, env in enumerate(self.envs):
            obs, reward, terminated, truncated, _ = env.step(int(actions[i]))
            rewards[i] = reward
            self.running[i] += reward
            if terminated or truncated:
                done[i] = 1.0
                finished.append(float(self.running[i]))
                self.running[i] = 0.0
                obs, _ = env.reset()
            self.obs[i] = obs
        return rewards, done, finished

    def owe_delay(self, step_s: float) -> None:
        """Adds the straggler wait that a step of ``step_s`` seconds owes; sleeps it once it
        is at least ``STRAGGLER_SLEEP_S``. Nothing when this agent is no straggler."""
        if self.delay_factor > 1:
            self.owed_s += (self.delay_factor - 1) * step_s
            if self.owed_s >= STRAGGLER_SLEEP_S:
                self.pay_delay()

    def pay_delay(self) -> None:
        """Sleeps what is owed now and records the time really slept in ``delayed_s``."""
        if self.owed_s <= 0:
            return
        began = time.perf_counter()
        time.sleep(self.owed_s)
        slept = time.perf_counter() - began
        self.delayed_s += slept
        self.owed_s -= slept

    def state_dict(self) -> dict:
        """Everything needed to continue these episodes exactly: each env's physics state,
        step count and random generator, the current observations and running returns.
        Only tensors, ints and strings (128-bit generator words as strings): a checkpoint of it
        loads with ``torch.load(weights_only=True)``."""
        envs = []
        for env in self.envs:
            core = env.unwrapped
            bits = core.np_random.bit_generator.state
            envs.append({
                "physics": torch.as_tensor(np.asarray(core.state, dtype=np.float64)),
                "steps_beyond_terminated": -1 if core.steps_beyond_terminated is None
                else int(core.steps_beyond_terminated),
                "elapsed_steps": int(env._elapsed_steps),
                "rng": {"state": str(bits["state"]["state"]), "inc": str(bits["state"]["inc"]),
                        "has_uint32": int(bits["has_uint32"]), "uinteger": int(bits["uinteger"])},
            })
        return {"envs": envs, "obs": torch.as_tensor(self.obs.copy()),
                "running": torch.as_tensor(self.running.copy()), "delayed_s": self.delayed_s}

    def load_state_dict(self, state: dict) -> None:
        """Puts every env back where :meth:`state_dict` found it."""
        if len(state["envs"]) != len(self.envs):
            raise ParameterError(f"state holds {len(state['envs'])} envs, this pool has {len(self.envs)}")
        for env, saved in zip(self.envs, state["envs"], strict=True):
            core = env.unwrapped
            core.state = saved["physics"].numpy().copy()
            beyond = int(saved["steps_beyond_terminated"])
            core.steps_beyond_terminated = None if beyond < 0 else beyond
            env._elapsed_steps = int(saved["elapsed_steps"])
            rng = saved["rng"]
            core.np_random.bit_generator.state = {
                "bit_generator": "PCG64",
                "state": {"state": int(rng["state"]), "inc": int(rng["inc"])},
                "has_uint32": int(rng["has_uint32"]), "uinteger": int(rng["uinteger"]),
            }
        self.obs = state["obs"].numpy().copy()
        self.running = state["running"].numpy().copy()
        self.delayed_s = float(state["delayed_s"])

    def close(self) -> None:
        for env in self.envs:
            env.close()


def collect(model: ActorCritic, pool: EnvPool, steps: int, *, generator: torch.Generator,
            policy_version: int, agent_id: int = 0, seq: int = 0,
            on_step: Callable[[], None] | None = None) -> Rollout:
    """Runs ``steps`` steps of every env in ``pool`` with ``model``'s policy (sampled actions)."""
    n = len(pool.envs)
    obs = torch.empty(steps, n, OBS_DIM)
    actions = torch.empty(steps, n, dtype=torch.int64)
    rewards, done, logp = torch.empty(steps, n), torch.empty(steps, n), torch.empty(steps, n)
    finished: list[float] = []
    device = next(model.parameters()).device  # cpu, or the rank's GPU under nccl
    with torch.no_grad():
        for t in range(steps):
            began = time.perf_counter()
            obs[t] = torch.as_tensor(pool.obs, dtype=torch.float32)
            logits, _ = model(obs[t].to(device))
            probs = torch.softmax(logits.cpu(), dim=-1)
            actions[t] = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
            logp[t] = torch.log(probs.gather(-1, actions[t, :, None]).squeeze(-1))
            r, d, ended = pool.step(actions[t].numpy())
            rewards[t], done[t] = torch.as_tensor(r), torch.as_tensor(d)
            finished += ended
            pool.owe_delay(time.perf_counter() - began)
            if on_step is not None:
                on_step()
    pool.pay_delay()  # the whole rollout is delay_factor times slower, not just most of it
    return Rollout(obs, actions, rewards, done, logp,
                   torch.as_tensor(pool.obs, dtype=torch.float32).clone(),
                   torch.tensor(finished, dtype=torch.float32), policy_version, agent_id, seq,
                   time.time())


def _mean_return(act: Callable[[np.ndarray], int], episodes: int, seed: int,
                 env: gym.Env | None = None) -> float:
    """Mean return of ``episodes`` episodes on envs reset with ``seed + e``, ``act`` choosing."""
    env = env or gym.make(ENV_ID, disable_env_checker=True)
    total = 0.0
    for e in range(episodes):
        obs, _ = env.reset(seed=seed + e)
        over = False
        while not over:
            obs, reward, terminated, truncated, _ = env.step(act(obs))
            total += float(reward)
            over = terminated or truncated
    env.close()
    return total / episodes


def evaluate(model: ActorCritic, episodes: int = 5, seed: int = 10_000) -> float:
    """Mean return of ``episodes`` greedy episodes (argmax action) on fresh seeded envs."""
    device = next(model.parameters()).device

    def greedy(obs: np.ndarray) -> int:
        logits, _ = model(torch.as_tensor(obs, dtype=torch.float32, device=device))
        return int(logits.argmax())

    with torch.no_grad():
        return _mean_return(greedy, episodes, seed)


def random_policy_return(episodes: int = 50, seed: int = 20_000) -> float:
    """Mean return of ``episodes`` episodes with uniformly random actions: the score learning must beat."""
    env = gym.make(ENV_ID, disable_env_checker=True)
    env.action_space.seed(seed)
    return _mean_return(lambda obs: int(env.action_space.sample()), episodes, seed, env)


__all__ = ["ActorCritic", "EnvPool", "Rollout", "collect", "evaluate", "random_policy_return", "seed_everything",
           "ENV_ID", "SOLVED_RETURN", "SOLVED_WINDOW", "STRAGGLER_SLEEP_S"]
