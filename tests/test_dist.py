"""labkit.runtime.dist and labkit.runtime.publish in this process: environment, backend, timeouts, world of 1."""

from __future__ import annotations

import json
import socket
from datetime import timedelta

import pytest
import torch

from labkit.errors import ParameterError
from labkit.runtime import dist as ldist
from labkit.runtime import publish
from labkit.runtime.publish import PUBLISHED_FILE, read_published

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                 "GROUP_WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture
def clean_env(monkeypatch):
    """No torchrun variables now, and whatever ``setup()`` writes into os.environ is undone.

    ``monkeypatch.delenv`` alone would not remove a variable that was absent before and set
    later, so each is first set (recording "absent") and then deleted."""
    for name in (*TORCHRUN_VARS, ldist.TIMEOUT_ENV, ldist.BACKEND_ENV, ldist.SIMULATED_ENV,
                 "LABKIT_RUN_DIR"):
        monkeypatch.setenv(name, "placeholder")
        monkeypatch.delenv(name)
    return monkeypatch


@pytest.fixture
def world_of_one(clean_env):
    yield
    ldist.teardown()


def test_rank_info_outside_torchrun_is_a_world_of_one(clean_env):
    info = ldist.rank_info()
    assert (info.rank, info.world_size, info.local_rank, info.local_world_size) == (0, 1, 0, 1)
    assert (info.node_rank, info.num_nodes, info.restart_count) == (0, 1, 0)
    assert info.is_main and info.hostname == socket.gethostname()
    assert info.backend == "" and info.device == "cpu"


def test_rank_info_reads_torchrun_environment(clean_env):
    for name, value in dict(RANK="5", WORLD_SIZE="8", LOCAL_RANK="1", LOCAL_WORLD_SIZE="4",
                            GROUP_RANK="1", TORCHELASTIC_RESTART_COUNT="2").items():
        clean_env.setenv(name, value)
    info = ldist.rank_info(backend="gloo")
    assert info.to_dict() == {
        "rank": 5, "world_size": 8, "local_rank": 1, "local_world_size": 4, "node_rank": 1,
        "num_nodes": 2,  # WORLD_SIZE // LOCAL_WORLD_SIZE without GROUP_WORLD_SIZE
        "restart_count": 2, "hostname": socket.gethostname(), "backend": "gloo",
        "device": "cpu",
    }
    assert not info.is_main
    clean_env.setenv("GROUP_WORLD_SIZE", "3")
    clean_env.setenv("WORLD_SIZE", "")  # empty counts as unset
    info = ldist.rank_info()
    assert info.num_nodes == 3 and info.world_size == 1


def test_default_backend_is_gloo_without_cuda():
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here: the default backend is nccl")
    assert ldist.default_backend() == "gloo"


def test_backend_can_be_forced(clean_env):
    clean_env.setenv(ldist.BACKEND_ENV, "nccl")
    assert ldist.default_backend() == "nccl"


def test_more_ranks_on_this_host_than_gpus_use_gloo(clean_env):
    # Simulated nodes put every rank of the world on this host: nccl only if each gets a GPU.
    clean_env.setenv(ldist.SIMULATED_ENV, "1")
    clean_env.setenv("WORLD_SIZE", str(torch.cuda.device_count() + 1))
    clean_env.setenv("LOCAL_WORLD_SIZE", "1")
    assert ldist.default_backend() == "gloo"


def test_simulated_nodes_pick_the_gpu_by_global_rank(clean_env):
    clean_env.setenv("RANK", "3")
    clean_env.setenv("LOCAL_RANK", "1")
    assert ldist.gpu_index() == 1  # a real node: LOCAL_RANK
    clean_env.setenv(ldist.SIMULATED_ENV, "1")
    assert ldist.gpu_index() == 3  # all ranks on one host: one GPU each


def test_collective_timeout(clean_env):
    assert ldist.collective_timeout() == timedelta(seconds=ldist.DEFAULT_TIMEOUT_S) \
        == timedelta(seconds=60)
    assert ldist.collective_timeout(5) == timedelta(seconds=5)
    clean_env.setenv(ldist.TIMEOUT_ENV, "2.5")
    assert ldist.collective_timeout() == timedelta(seconds=2.5)
    assert ldist.collective_timeout(7) == timedelta(seconds=7)  # the argument wins
    for bad in (0, -1):
        with pytest.raises(ParameterError, match="positive"):
            ldist.collective_timeout(bad)
    clean_env.setenv(ldist.TIMEOUT_ENV, "0")
    with pytest.raises(ParameterError, match="positive"):
        ldist.collective_timeout()
    clean_env.setenv(ldist.TIMEOUT_ENV, "soon")
    with pytest.raises(ParameterError, match="number of seconds"):
        ldist.collective_timeout()


def test_setup_outside_torchrun_makes_a_world_of_one(world_of_one):
    import torch.distributed as dist

    info = ldist.setup(timeout_s=30)
    assert dist.is_initialized()
    assert (info.rank, info.world_size, info.is_main) == (0, 1, True)
    assert info.backend == ldist.default_backend() == dist.get_backend()
    tensor = torch.tensor([2.0, 3.0], device=info.device)
    dist.all_reduce(tensor)
    assert tensor.tolist() == [2.0, 3.0]
    assert ldist.setup() == info  # already joined: same answer, no second init
    ldist.teardown()
    assert not dist.is_initialized()
    ldist.teardown()  # safe twice


def test_print0_prints_on_rank_zero_only(clean_env, capsys):
    ldist.print0("from", "zero")
    clean_env.setenv("RANK", "1")
    ldist.print0("from one")
    assert capsys.readouterr().out == "from zero\n"


def test_publish_outside_a_launch_returns_and_writes_nothing(clean_env, tmp_path):
    clean_env.chdir(tmp_path)
    obj = {"a": [1, 2]}
    assert publish(obj) is obj
    assert list(tmp_path.iterdir()) == []
    assert read_published(tmp_path) is None


def test_publish_on_rank_zero_writes_json(clean_env, tmp_path):
    clean_env.setenv("LABKIT_RUN_DIR", str(tmp_path))
    clean_env.setenv("RANK", "0")
    assert publish({"first": 1}) == {"first": 1}
    value = {"loss": 0.25, "ranks": [0, 1], "name": "ünï", "none": None}
    assert publish(value) is value  # the last call wins
    assert read_published(tmp_path) == value
    assert json.loads((tmp_path / PUBLISHED_FILE).read_text(encoding="utf-8")) == value
    assert sorted(p.name for p in tmp_path.iterdir()) == [PUBLISHED_FILE]  # no temp file left


def test_publish_refuses_what_json_cannot_carry(clean_env, tmp_path):
    clean_env.setenv("LABKIT_RUN_DIR", str(tmp_path))
    clean_env.setenv("RANK", "0")
    with pytest.raises(ParameterError, match=r"JSON-able.*\.tolist\(\)"):
        publish({"t": torch.ones(2)})
    with pytest.raises(ParameterError, match="JSON-able"):
        publish([1, object()])
    assert read_published(tmp_path) is None


def test_publish_on_other_ranks_writes_nothing(clean_env, tmp_path):
    clean_env.setenv("LABKIT_RUN_DIR", str(tmp_path))
    clean_env.setenv("RANK", "1")
    assert publish({"x": object}) == {"x": object}  # not even checked: nothing is sent
    assert list(tmp_path.iterdir()) == []


@pytest.mark.gpu
def test_setup_uses_nccl_on_a_gpu(world_of_one):
    if torch.cuda.device_count() < 1:
        pytest.skip("needs a CUDA GPU (nccl backend)")
    import torch.distributed as dist

    info = ldist.setup()
    assert info.backend == "nccl" == dist.get_backend()
    assert info.device == "cuda:0"
    tensor = torch.ones(4, device=info.device) * 3
    dist.all_reduce(tensor)
    torch.cuda.synchronize()
    assert tensor.device.type == "cuda" and tensor.tolist() == [3.0] * 4
    ldist.teardown()
    assert not dist.is_initialized()


LATE_JOINER = """\
import os, time
import torch
import torch.distributed as dist
from labkit.runtime import dist as ldist, publish

rank = int(os.environ["RANK"])
if rank == 1:
    time.sleep(3.0)  # arrives later than the 1 s collective timeout allows a collective to wait
info = ldist.setup(timeout_s=1.0)
x = torch.ones(1)
dist.all_reduce(x)  # joined despite the late arrival
if rank == 1:
    time.sleep(4.0)  # now a peer that is late for a collective: a hang to be caught
try:
    dist.all_reduce(x)
    outcome = "completed"
except RuntimeError as exc:
    outcome = "timed out" if "Timed out" in str(exc) else f"failed: {exc}"
if rank == 0:
    publish({"first": x.item(), "second": outcome})
try:  # leave the group before exit: a gloo thread alive at interpreter shutdown can abort
    ldist.teardown()  # the process (SIGABRT; see teardown), more often on a loaded machine
except RuntimeError:
    pass
"""


@pytest.mark.slow
def test_a_late_rank_joins_and_a_late_collective_still_times_out():
    from labkit.runtime.launch import launch_code

    result = launch_code(LATE_JOINER, nproc_per_node=2, timeout_s=120)
    assert result.ok, "\n".join(result.output[-20:])
    assert result.published == {"first": 2.0, "second": "timed out"}
