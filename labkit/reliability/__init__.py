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

from typing import TYPE_CHECKING

from labkit.runtime.lazy import lazy_surface

if TYPE_CHECKING:  # what each name is, for readers and type checkers
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

# name -> the module that defines it: a name is imported when first used,
# so importing one module of the folder (a rank script, a child process) imports no other
_HOME = {
    "add_cadence_arguments": "labkit.reliability.cadence",
    "agent_seed": "labkit.reliability.rng",
    "atomic_write": "labkit.reliability.checkpoint",
    "cadence_fields": "labkit.reliability.cadence",
    "cadence_of": "labkit.reliability.cadence",
    "capture_rng": "labkit.reliability.rng",
    "CheckpointCadence": "labkit.reliability.cadence",
    "CheckpointError": "labkit.reliability.checkpoint",
    "CheckpointManager": "labkit.reliability.checkpoint",
    "CheckpointWarning": "labkit.reliability.checkpoint",
    "corrupt_checkpoint": "labkit.reliability.faults",
    "FaultPlan": "labkit.reliability.faults",
    "FAULTS_ENV": "labkit.reliability.faults",
    "faults_from_env": "labkit.reliability.faults",
    "generator_state": "labkit.reliability.rng",
    "IncompatibleCheckpointError": "labkit.reliability.checkpoint",
    "kill_node": "labkit.reliability.faults",
    "KINDS": "labkit.reliability.faults",
    "Loaded": "labkit.reliability.checkpoint",
    "maybe_inject": "labkit.reliability.faults",
    "model_fingerprint": "labkit.reliability.checkpoint",
    "params_sha256": "labkit.reliability.checkpoint",
    "parse_faults": "labkit.reliability.faults",
    "restore_rng": "labkit.reliability.rng",
    "save_hook": "labkit.reliability.faults",
    "set_generator_state": "labkit.reliability.rng",
    "torchrun_agent_pid": "labkit.reliability.faults",
    "VALID_FORMS": "labkit.reliability.faults",
}
__all__ = sorted(_HOME)
__getattr__, __dir__ = lazy_surface(__name__, _HOME)
