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

from typing import TYPE_CHECKING

from labkit.runtime.lazy import lazy_surface

if TYPE_CHECKING:  # what each name is, for readers and type checkers
    from labkit.rl.agents import (
        ENV_ID,
        SOLVED_RETURN,
        SOLVED_WINDOW,
        STRAGGLER_SLEEP_S,
        ActorCritic,
        EnvPool,
        Rollout,
        collect,
        evaluate,
        random_policy_return,
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

# name -> the module that defines it: a name is imported when first used,
# so importing one module of the folder (a rank script, a child process) imports no other
_HOME = {
    "actor_critic_loss": "labkit.rl.learner",
    "ActorCritic": "labkit.rl.agents",
    "apply_update": "labkit.rl.learner",
    "collect": "labkit.rl.agents",
    "ENV_ID": "labkit.rl.agents",
    "EnvPool": "labkit.rl.agents",
    "evaluate": "labkit.rl.agents",
    "gae": "labkit.rl.returns",
    "Hyper": "labkit.rl.hyper",
    "LossInfo": "labkit.rl.learner",
    "METHODS": "labkit.rl.staleness",
    "Progress": "labkit.rl.progress",
    "progress_from_state": "labkit.rl.progress",
    "progress_state": "labkit.rl.progress",
    "random_policy_return": "labkit.rl.agents",
    "Rollout": "labkit.rl.agents",
    "seed_everything": "labkit.rl.agents",
    "SOLVED_RETURN": "labkit.rl.agents",
    "SOLVED_WINDOW": "labkit.rl.agents",
    "StalenessConfig": "labkit.rl.staleness",
    "STRAGGLER_SLEEP_S": "labkit.rl.agents",
    "vtrace": "labkit.rl.returns",
    "weight": "labkit.rl.staleness",
}
__all__ = sorted(_HOME)
__getattr__, __dir__ = lazy_surface(__name__, _HOME)
