"""Reliability (lesson 10; lessons 12 and 15 use it): checkpoints that resume a run exactly, and
faults injected on cue to prove it.

- ``checkpoint``: atomic, verified, per-rank checkpoints that load with ``weights_only=True``
  (nothing is unpickled); ``params_sha256`` says whether two models are bitwise equal.
- ``cadence``: checkpoint every N updates (the same on any machine) or every S seconds.
- ``rng``: every RNG's state as plain values a checkpoint can hold; ``agent_seed``.
- ``faults``: kill a rank, kill it mid-save, lose a node, or hang, at a given step
  (``"kill:rank=1,step=30"``).
"""

from __future__ import annotations

from labkit.reliability.cadence import (
    CheckpointCadence,
    add_cadence_arguments,
    cadence_fields,
    cadence_of,
)
from labkit.reliability.checkpoint import (
    CheckpointError,
    CheckpointManager,
    CheckpointWarning,
    IncompatibleCheckpointError,
    Loaded,
    atomic_write,
    model_fingerprint,
    params_sha256,
)
from labkit.reliability.faults import (
    FAULTS_ENV,
    KINDS,
    VALID_FORMS,
    FaultPlan,
    corrupt_checkpoint,
    faults_from_env,
    kill_node,
    maybe_inject,
    parse_faults,
    save_hook,
    torchrun_agent_pid,
)
from labkit.reliability.rng import (
    agent_seed,
    capture_rng,
    generator_state,
    restore_rng,
    set_generator_state,
)

__all__ = [
    "add_cadence_arguments",
    "agent_seed",
    "atomic_write",
    "cadence_fields",
    "cadence_of",
    "capture_rng",
    "CheckpointCadence",
    "CheckpointError",
    "CheckpointManager",
    "CheckpointWarning",
    "corrupt_checkpoint",
    "FaultPlan",
    "FAULTS_ENV",
    "faults_from_env",
    "generator_state",
    "IncompatibleCheckpointError",
    "kill_node",
    "KINDS",
    "Loaded",
    "maybe_inject",
    "model_fingerprint",
    "params_sha256",
    "parse_faults",
    "restore_rng",
    "save_hook",
    "set_generator_state",
    "torchrun_agent_pid",
    "VALID_FORMS",
]
