"""Checkpoints and restarts of synchronous training, through real torchrun restarts.

The goal of the lesson, checked: a run whose rank is SIGKILLed mid-way and restarted by
torchrun ends with parameters bitwise equal to an uninterrupted run's (same seed, same world
size); a corrupted newest checkpoint is skipped, named, and the previous one used. The runs are
lesson 10's own, read from the results it saves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from process_helpers import session_processes

from labkit.course.runner import run_course
from labkit.errors import ParameterError
from labkit.training.run import TrainConfig, train

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"

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


@pytest.fixture(scope="module")
def lesson(tmp_path_factory) -> dict:
    """Lesson 10 at smoke size, through papermill: its runs (an uninterrupted reference, a rank
    SIGKILLed and restarted by torchrun, a resume past a damaged checkpoint) are the suite's
    one run of these cases (tests/test_notebooks.py leaves the notebook to this module); read
    back from the results it saved."""
    out = tmp_path_factory.mktemp("nb10")
    result = run_course(NOTEBOOKS, out=out, smoke=True, only=["10_checkpoint_and_recovery"],
                        progress=False)
    [outcome] = result.results
    assert outcome.ok, f"10_checkpoint_and_recovery failed: {outcome.error}"
    return json.loads((out / "checkpoint_recovery.json").read_text())


@pytest.mark.slow
def test_killed_rank_resumes_to_the_same_parameters(lesson) -> None:
    goal, kill_at, every = lesson["goal"], lesson["kill_at"], lesson["checkpoint_every_updates"]
    assert goal["restarts"] == 1
    assert goal["params_sha256"] == lesson["reference_sha256"]
    # Saved after every `every` updates on any machine; the kill strikes as update kill_at + 1
    # begins, so the save of update kill_at (when it is one) may or may not have finished.
    assert goal["resumed_from_step"] in (kill_at // every * every, (kill_at - 1) // every * every)
    assert goal["lost_steps"] == (kill_at - goal["resumed_from_step"]) * lesson["per_update"]
    assert session_processes(lambda cmdline: "run_rank.py" in cmdline) == []


@pytest.mark.slow
def test_a_damaged_newest_checkpoint_is_skipped_and_named(lesson) -> None:
    # The next run skips it (naming the file), resumes from the one before, and still ends on
    # the reference's parameters.
    damaged = lesson["corrupted"]
    assert damaged["skipped"] == [damaged["damaged"]]
    assert damaged["resumed_from_step"] < damaged["newest_step"]
    assert damaged["params_sha256"] == lesson["reference_sha256"]
