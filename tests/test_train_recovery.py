"""Checkpoints and restarts of synchronous training, through real torchrun restarts.

The goal of the lesson, checked: a run whose rank is SIGKILLed mid-way and restarted by
torchrun ends with parameters bitwise equal to an uninterrupted run's (same seed, same world
size); a corrupted newest checkpoint is skipped, named, and the previous one used."""

from __future__ import annotations

import pytest

from labkit.errors import ParameterError
from labkit.reliability.faults import corrupt_checkpoint
from labkit.training.run import TrainConfig, train

STEPS = 40 * 512  # 40 updates of 2 agents x 8 envs x 32 steps


def config(**kwargs) -> TrainConfig:
    return TrainConfig(**{"agents": 2, "steps": STEPS, "seed": 3, "timeout_s": 300, **kwargs})


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"checkpoint_every_s": 1.0}, "need --ckpt-dir"),
    ({"checkpoint_every_updates": 5}, "need --ckpt-dir"),
    ({"ckpt_dir": "x", "checkpoint_every_updates": 0}, "whole number of updates >= 1"),
    ({"ckpt_dir": "x", "checkpoint_every_updates": -3}, "whole number of updates >= 1"),
    ({"ckpt_dir": "x", "checkpoint_every_s": 0.0}, "positive number of seconds"),
    ({"ckpt_dir": "x", "checkpoint_every_s": -1.0}, "positive number of seconds"),
    ({"ckpt_dir": "x", "checkpoint_every_updates": 5, "checkpoint_every_s": 1.0}, "not both"),
    ({"mode": "async", "ckpt_dir": "x"}, "sync only"),
    ({"faults": "kill:rank=one,step=3"}, "bad fault"),
    ({"max_restarts": -1}, "max_restarts"),
])
def test_bad_recovery_settings_fail_before_launch(kwargs: dict, message: str) -> None:
    with pytest.raises(ParameterError, match=message):
        train(config(**kwargs))


@pytest.mark.slow
def test_killed_rank_resumes_to_the_same_parameters(tmp_path, leftover_processes) -> None:
    clean = train(config())
    ckpt = tmp_path / "ckpt"
    killed = train(config(ckpt_dir=str(ckpt), checkpoint_every_updates=5, max_restarts=1,
                          faults="kill:rank=1,step=25"), run_dir=tmp_path / "run")
    assert killed["restarts"] == 1
    assert killed["params_sha256"] == clean["params_sha256"]
    # Saved after updates 5, 10, ..., 25 on any machine; the kill strikes as update 26 begins.
    assert killed["resumed_from_step"] in (20, 25)
    assert killed["lost_steps"] == (25 - killed["resumed_from_step"]) * 512
    assert not leftover_processes(tmp_path / "run")

    # Damage the newest checkpoint: the next run skips it (naming the file), resumes from the
    # one before, and still ends on the same parameters.
    newest = sorted(ckpt.glob("step-*"))[-1]
    damaged = corrupt_checkpoint(newest, "flip", rank=1)
    again = train(config(ckpt_dir=str(ckpt)))
    assert [path for path, _ in again["skipped_checkpoints"]] == [str(damaged)]
    assert again["resumed_from_step"] < int(newest.name[5:])
    assert again["params_sha256"] == clean["params_sha256"]
