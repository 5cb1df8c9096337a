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

from labkit.training.actor_learner import (
    HEARTBEAT_EVERY_S,
    POLL_S,
    LearnerLostError,
    PolicyStore,
    run_async,
    wait_for_turn,
)
from labkit.training.compare import (
    KEYS,
    compare,
)
from labkit.training.result import (
    lag_stats,
    summarize,
)
from labkit.training.sync import (
    MIN_EPISODE_STEPS,
    REACHED_FILE,
    run_sync,
)
from labkit.training.train import (
    MODES,
    TrainConfig,
    config_from_args,
    train,
)

__all__ = [
    "compare",
    "config_from_args",
    "HEARTBEAT_EVERY_S",
    "KEYS",
    "lag_stats",
    "LearnerLostError",
    "MIN_EPISODE_STEPS",
    "MODES",
    "PolicyStore",
    "POLL_S",
    "REACHED_FILE",
    "run_async",
    "run_sync",
    "summarize",
    "train",
    "TrainConfig",
    "wait_for_turn",
]
