"""Training on many ranks (lessons 04, 06, 10): the same CartPole agents, synchronously with DDP or
asynchronously with actors and a learner.

- ``train`` (ranks: ``train_rank.py``): ``train(TrainConfig(...))`` launches the job and returns
  its result; it is also the ``labkit train`` command.
- ``sync``: every rank collects a rollout, DDP averages the gradients, every rank steps.
- ``actor_learner``: actor ranks push rollouts through a buffer, the learner trains on arrivals
  and publishes versioned weights (the capstone's learner waits its turn the same way).
- ``result``: the one result dict both modes return (throughput, learning, lag, parameter hash).
- ``compare``: sync vs async side by side, with and without a straggler (``labkit bench sync-async``).
- ``fixed_lag``: the staleness methods at a controlled lag, over seeds (``labkit bench staleness``).

::

    labkit train --mode async --agents 3 --steps 50000 --json

    from labkit.training import TrainConfig, train
    result = train(TrainConfig(mode="sync", agents=2, steps=20_000))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from labkit.runtime.lazy import lazy_surface

if TYPE_CHECKING:  # what each name is, for readers and type checkers
    from labkit.training.actor_learner import (
        HEARTBEAT_EVERY_S,
        POLL_S,
        LearnerLostError,
        PolicyStore,
        run_async,
        wait_for_turn,
    )
    from labkit.training.result import (
        lag_stats,
        summarize,
    )
    from labkit.training.run import (
        MODES,
        TrainConfig,
        config_from_args,
        train,
    )
    from labkit.training.sync import (
        MIN_EPISODE_STEPS,
        REACHED_FILE,
        run_sync,
    )
    from labkit.training.sync_async import (
        KEYS,
        compare,
    )

# name -> the module that defines it: a name is imported when first used,
# so importing one module of the folder (a rank script, a child process) imports no other
_HOME = {
    "compare": "labkit.training.sync_async",
    "config_from_args": "labkit.training.run",
    "HEARTBEAT_EVERY_S": "labkit.training.actor_learner",
    "KEYS": "labkit.training.sync_async",
    "lag_stats": "labkit.training.result",
    "LearnerLostError": "labkit.training.actor_learner",
    "MIN_EPISODE_STEPS": "labkit.training.sync",
    "MODES": "labkit.training.run",
    "PolicyStore": "labkit.training.actor_learner",
    "POLL_S": "labkit.training.actor_learner",
    "REACHED_FILE": "labkit.training.sync",
    "run_async": "labkit.training.actor_learner",
    "run_sync": "labkit.training.sync",
    "summarize": "labkit.training.result",
    "train": "labkit.training.run",
    "TrainConfig": "labkit.training.run",
    "wait_for_turn": "labkit.training.actor_learner",
}
__all__ = sorted(_HOME)
__getattr__, __dir__ = lazy_surface(__name__, _HOME)
