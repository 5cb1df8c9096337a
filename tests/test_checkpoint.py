"""labkit.reliability.checkpoint and labkit.reliability.rng: atomic per-rank files, verification, pruning, RNG states."""

from __future__ import annotations

import hashlib
import json
import random
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from labkit.errors import LabkitError, ParameterError
from labkit.reliability.checkpoint import (
    CheckpointError,
    CheckpointManager,
    CheckpointWarning,
    IncompatibleCheckpointError,
    model_fingerprint,
)
from labkit.reliability.rng import capture_rng, generator_state, restore_rng, set_generator_state


def tiny_model() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(5, 4)).pow(2).sum().backward()
        opt.step()
    return model, opt


def assert_same(a, b) -> None:  # noqa: ANN001 (nested state)
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            assert_same(a[key], b[key])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    else:
        assert a == b


def quiet_latest(mgr: CheckpointManager):  # noqa: ANN201
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CheckpointWarning)
        return mgr.latest()


def test_round_trip_model_optimizer_rng_and_no_temp_files(tmp_path: Path) -> None:
    model, opt = tiny_model()
    fp = model_fingerprint(model)
    mgr = CheckpointManager(tmp_path, fingerprint=fp)
    assert mgr.latest() is None
    state = {"model": model.state_dict(), "opt": opt.state_dict(), "rng": capture_rng(),
             "epoch": 3, "name": "x", "none": None, "flags": [True, 1.5]}
    folder = mgr.save(7, state, meta={"loss": 0.25})
    assert folder == tmp_path / "step-000000007"
    assert sorted(p.name for p in folder.iterdir()) == ["manifest.json", "rank-0.json",
                                                        "rank-0.pt"]
    assert not list(tmp_path.rglob("*.tmp"))
    sidecar = json.loads((folder / "rank-0.json").read_text())
    data = (folder / "rank-0.pt").read_bytes()
    assert sidecar["sha256"] == hashlib.sha256(data).hexdigest() and sidecar["bytes"] == len(data)
    assert sidecar["fingerprint"] == fp and sidecar["world_size"] == 1

    loaded = CheckpointManager(tmp_path, fingerprint=fp).latest()
    assert loaded is not None and loaded.step == 7 and loaded.path == folder
    assert loaded.meta == {"loss": 0.25} and loaded.skipped == []
    assert_same(loaded.state, state)
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    fresh.load_state_dict(loaded.state["model"])
    fresh_opt = torch.optim.Adam(fresh.parameters(), lr=0.01)
    fresh_opt.load_state_dict(loaded.state["opt"])
    assert_same(fresh_opt.state_dict(), opt.state_dict())


def test_restore_rng_repeats_the_next_numbers(tmp_path: Path) -> None:
    torch.manual_seed(1)
    np.random.seed(2)
    random.seed(3)
    np.random.normal()  # leaves a cached gaussian in numpy's legacy state
    random.gauss(0, 1)  # and in Python's
    mgr = CheckpointManager(tmp_path)
    mgr.save(1, {"rng": capture_rng()})

    def draw() -> tuple:
        return torch.rand(5), np.random.normal(size=5), [random.random() for _ in range(5)], \
            np.random.normal(), random.gauss(0, 1)

    first = draw()
    draw()  # move every RNG on
    restore_rng(mgr.latest().state["rng"])
    again = draw()
    assert torch.equal(first[0], again[0])
    assert np.array_equal(first[1], again[1])
    assert first[2:] == again[2:]


@pytest.mark.parametrize("kind", [np.random.PCG64, np.random.MT19937, np.random.Philox,
                                  np.random.SFC64])
def test_numpy_generator_state_survives_weights_only(tmp_path: Path, kind: type) -> None:
    gen = np.random.Generator(kind(42))
    gen.random(3)
    mgr = CheckpointManager(tmp_path)
    mgr.save(0, {"env_rng": generator_state(gen)})
    expected = gen.random(4)
    other = np.random.Generator(kind(7))
    set_generator_state(other, mgr.latest().state["env_rng"])
    assert np.array_equal(other.random(4), expected)
    if kind is np.random.PCG64:  # a 128-bit int stays an int through weights_only loading
        assert mgr.latest().state["env_rng"]["state"]["state"] > 2**64
    with pytest.raises(ParameterError, match="bit generator"):
        set_generator_state(np.random.Generator(np.random.SFC64(1) if kind is not np.random.SFC64
                                                else np.random.PCG64(1)), generator_state(gen))


def test_keep_prunes_to_newest_k(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path, keep=2)
    (tmp_path / "step-000000000").mkdir(parents=True)  # an interrupted save, older than all
    for step in (10, 20, 30, 40):
        mgr.save(step, {"x": torch.tensor(step)})
    assert [s for s, _ in mgr.steps()] == [30, 40]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("mode", ["truncate", "flip"])
def test_damaged_newest_falls_back_with_warning(tmp_path: Path, mode: str) -> None:
    from labkit.reliability.faults import corrupt_checkpoint

    mgr = CheckpointManager(tmp_path)
    for step in (1, 2):
        mgr.save(step, {"w": torch.arange(1000.0) * step})
    bad = corrupt_checkpoint(tmp_path / "step-000000002", mode)
    with pytest.warns(CheckpointWarning, match=str(bad)):
        loaded = mgr.latest()
    assert loaded.step == 1 and torch.equal(loaded.state["w"], torch.arange(1000.0))
    assert [path for path, _ in loaded.skipped] == [str(bad)]
    assert ("truncated" if mode == "truncate" else "sha256") in loaded.skipped[0][1]


def test_ranks_agree_when_only_rank1_file_is_corrupt(tmp_path: Path) -> None:
    ranks = [CheckpointManager(tmp_path, rank=r, world_size=2) for r in range(2)]
    for step in (5, 10):
        for mgr in ranks:
            mgr.save(step, {"rank": torch.tensor(mgr.rank), "step": step})
    (tmp_path / "step-000000010" / "rank-1.pt").write_bytes(b"garbage")
    for mgr in ranks:
        with pytest.warns(CheckpointWarning, match="rank-1.pt"):
            loaded = mgr.latest()
        assert loaded.step == 5 and loaded.state["rank"].item() == mgr.rank
        assert loaded.skipped[0][0].endswith("step-000000010/rank-1.pt")


def test_incomplete_checkpoint_is_ignored(tmp_path: Path) -> None:
    ranks = [CheckpointManager(tmp_path, rank=r, world_size=2) for r in range(2)]
    for mgr in ranks:
        mgr.save(1, {"v": torch.tensor(1)})
    ranks[0].save(2, {"v": torch.tensor(2)})  # rank 1 killed before its step-2 files
    (tmp_path / "step-000000002" / ".rank-1.pt.abc.tmp").write_bytes(b"half")
    for mgr in ranks:
        with pytest.warns(CheckpointWarning, match="rank-1.json.*incomplete"):
            assert mgr.latest().step == 1
    ranks[1].save(2, {"v": torch.tensor(2)})  # the restarted rank saves step 2 again
    assert not list(tmp_path.rglob("*.tmp"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ranks[1].latest().step == 2


def test_wrong_world_size_or_model_is_a_clear_error(tmp_path: Path) -> None:
    model, _ = tiny_model()
    fp = model_fingerprint(model)
    assert fp == model_fingerprint(tiny_model()[0])  # values differ, the architecture not
    other = model_fingerprint(torch.nn.Linear(4, 2))
    assert other != fp
    CheckpointManager(tmp_path, fingerprint=fp).save(3, {"m": model.state_dict()})
    with pytest.raises(IncompatibleCheckpointError, match="world_size=1.*world_size=2"):
        CheckpointManager(tmp_path, rank=1, world_size=2, fingerprint=fp).latest()
    with pytest.raises(IncompatibleCheckpointError, match=f"{fp}.*{other}") as err:
        CheckpointManager(tmp_path, fingerprint=other).latest()
    assert "step-000000003" in str(err.value) and isinstance(err.value, LabkitError)
    # a run with another model never prunes this one's checkpoints
    CheckpointManager(tmp_path / "x", fingerprint=other)  # (own folder: no error)
    mine = CheckpointManager(tmp_path, fingerprint=other, keep=1)
    mine.save(4, {"m": torch.zeros(1)})
    mine.save(5, {"m": torch.zeros(1)})
    assert [s for s, _ in mine.steps()] == [3, 5]


class Payload:
    """Unpickling this would touch a file: proof that loading runs no code."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # noqa: ANN204
        return (Path.touch, (self.marker,))


def test_pickled_objects_are_refused_not_run(tmp_path: Path) -> None:
    marker = tmp_path / "unpickled"
    ckpts = tmp_path / "ckpt"
    mgr = CheckpointManager(ckpts)
    mgr.save(1, {"ok": torch.ones(2)})
    with pytest.raises(CheckpointError, match="weights_only"):  # save refuses it up front
        mgr.save(2, {"evil": Payload(marker)})
    assert not marker.exists()
    folder = ckpts / "step-000000002"  # forge a checkpoint whose checksum matches
    folder.mkdir()
    torch.save({"evil": Payload(marker)}, folder / "rank-0.pt")
    data = (folder / "rank-0.pt").read_bytes()
    meta = {"step": 2, "world_size": 1, "fingerprint": "", "time": 0.0}
    (folder / "rank-0.json").write_text(json.dumps(
        {**meta, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}))
    (folder / "manifest.json").write_text(json.dumps({**meta, "meta": {}}))
    with pytest.warns(CheckpointWarning, match="rank-0.pt.*weights_only"):
        loaded = mgr.latest()
    assert loaded.step == 1 and not marker.exists()


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ParameterError):
        CheckpointManager(tmp_path, rank=2, world_size=2)
    with pytest.raises(ParameterError):
        CheckpointManager(tmp_path, keep=0)
    with pytest.raises(ParameterError, match="JSON"):
        CheckpointManager(tmp_path).save(1, {}, meta={"t": torch.ones(1)})
    assert quiet_latest(CheckpointManager(tmp_path)) is None
