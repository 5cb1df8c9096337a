"""The single-process learning math (lessons 04, 06, 10 and the capstone): CartPole agents, their
update, and what a learner does with stale experience.

- ``agents``: ``ActorCritic``, ``EnvPool`` (environments stepped together), ``collect`` a rollout.
- ``hyper``: ``Hyper``, the learning settings every trainer shares.
- ``returns``: GAE for fresh rollouts, V-trace for stale ones.
- ``learner``: the actor-critic loss and one update.
- ``staleness``: the four ways to use experience an older policy produced (``StalenessConfig``).
- ``progress``: recent returns, "solved", and a thinned learning curve.

``labkit.training`` runs the same math on many ranks.
"""

from __future__ import annotations

from labkit.rl.agents import (
    ENV_ID,
    RANDOM_POLICY_RETURN,
    SOLVED_RETURN,
    SOLVED_WINDOW,
    STRAGGLER_SLEEP_S,
    ActorCritic,
    EnvPool,
    Rollout,
    collect,
    evaluate,
    seed_everything,
)
from labkit.rl.hyper import (
    Hyper,
)
from labkit.rl.learner import (
    LossInfo,
    actor_critic_loss,
    apply_update,
)
from labkit.rl.progress import (
    Progress,
    progress_from_state,
    progress_state,
)
from labkit.rl.returns import (
    gae,
    vtrace,
)
from labkit.rl.staleness import (
    METHODS,
    StalenessConfig,
    weight,
)

__all__ = [
    "actor_critic_loss",
    "ActorCritic",
    "apply_update",
    "collect",
    "ENV_ID",
    "EnvPool",
    "evaluate",
    "gae",
    "Hyper",
    "LossInfo",
    "METHODS",
    "Progress",
    "progress_from_state",
    "progress_state",
    "RANDOM_POLICY_RETURN",
    "Rollout",
    "seed_everything",
    "SOLVED_RETURN",
    "SOLVED_WINDOW",
    "StalenessConfig",
    "STRAGGLER_SLEEP_S",
    "vtrace",
    "weight",
]
