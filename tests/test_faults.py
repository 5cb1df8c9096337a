"""labkit.reliability.faults: parsing, corrupting files, and a real 2-rank job that is killed and resumes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from labkit.errors import LaunchError, ParameterError
from labkit.reliability.checkpoint import CheckpointManager, CheckpointWarning
from labkit.reliability.faults import (
    FaultPlan,
    corrupt_checkpoint,
    faults_from_env,
    maybe_inject,
    parse_faults,
    save_hook,
    torchrun_agent_pid,
)
from labkit.runtime.launch import launch_local


def test_parse_faults() -> None:
    plans = parse_faults(" kill:rank=1,step=30 ; kill_in_save:rank=0,step=40;"
                         "kill_node:node=1,step=30,attempt=any; stall:rank=0,step=5,seconds=2.5")
    assert plans == [
        FaultPlan("kill", 30, rank=1),
        FaultPlan("kill_in_save", 40, rank=0),
        FaultPlan("kill_node", 30, node=1, attempt=None),
        FaultPlan("stall", 5, rank=0, seconds=2.5),
    ]
    assert [p.where for p in plans] == ["step", "save", "step", "step"]
    assert parse_faults("") == [] and parse_faults(None) == []
    assert parse_faults("kill:step=3,rank=0,attempt=1") == [FaultPlan("kill", 3, 0, attempt=1)]


@pytest.mark.parametrize("text", [
    "explode:rank=1,step=3", "kill:rank=1", "kill:step=3", "kill:rank=x,step=3",
    "kill:rank=1,step=3,node=0", "kill_node:rank=1,step=3", "kill:rank=1,step=-1",
    "kill:rank=1,step=3,rank=2", "kill:rank=1;step=3", "kill:seconds=1,rank=1,step=2", "kill",
])
def test_parse_errors_list_the_valid_forms(text: str) -> None:
    with pytest.raises(ParameterError, match="bad fault .*Valid forms: kill:rank=R,step=S"):
        parse_faults(text)


def test_faults_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LABKIT_FAULTS", "stall:rank=2,step=1")
    assert faults_from_env() == [FaultPlan("stall", 1, rank=2)]
    monkeypatch.delenv("LABKIT_FAULTS")
    assert faults_from_env() == []


def test_maybe_inject_only_fires_when_everything_matches(monkeypatch: pytest.MonkeyPatch) -> None:
    killed: list[int] = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: killed.append(sig))
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    plans = parse_faults("kill:rank=1,step=3;kill_in_save:rank=0,step=4")
    maybe_inject(plans, rank=1, node=0, step=3)  # attempt 1: the restarted job goes on
    maybe_inject(plans, rank=1, node=0, step=3, attempt=0, where="save")
    maybe_inject(plans, rank=0, node=0, step=3, attempt=0)
    assert killed == []
    maybe_inject(plans, rank=1, node=0, step=3, attempt=0)
    save_hook(plans, rank=0, node=0)(4, Path("x.tmp"))  # attempt from the environment: 1
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    save_hook(plans, rank=0, node=0)(4, Path("x.tmp"))
    assert killed == [signal.SIGKILL, signal.SIGKILL]
    maybe_inject(parse_faults("stall:rank=0,step=1,seconds=0.1"), rank=0, node=0, step=1)


def test_no_agent_outside_torchrun() -> None:
    with pytest.raises(LaunchError, match="no torchrun agent"):
        torchrun_agent_pid()


@pytest.mark.parametrize("mode", ["truncate", "flip"])
def test_corrupted_file_is_skipped(tmp_path: Path, mode: str) -> None:
    mgr = CheckpointManager(tmp_path, rank=1, world_size=2)
    peer = CheckpointManager(tmp_path, rank=0, world_size=2)
    for step in (1, 2):
        peer.save(step, {"v": torch.full((256,), float(step))})
        mgr.save(step, {"v": torch.full((256,), float(step))})
    bad = corrupt_checkpoint(tmp_path / "step-000000002", mode, rank=0)
    assert bad.name == "rank-0.pt"
    with pytest.warns(CheckpointWarning, match=str(bad)):
        assert mgr.latest().step == 1
    with pytest.raises(ParameterError):
        corrupt_checkpoint(tmp_path / "step-000000002", "melt")  # type: ignore[arg-type]


JOB = """\
import sys

import torch
import torch.distributed as dist

from labkit.runtime import dist as ldist
from labkit.runtime import publish
from labkit.reliability.checkpoint import CheckpointManager, capture_rng, restore_rng
from labkit.reliability.faults import maybe_inject, parse_faults, save_hook

folder, steps, every, faults = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
info = ldist.setup("gloo")
plans = parse_faults(faults)
mgr = CheckpointManager(folder, rank=info.rank, world_size=info.world_size, keep=2,
                        fingerprint="accumulator-v1",
                        before_replace=save_hook(plans, rank=info.rank, node=info.node_rank))
torch.manual_seed(100 + info.rank)
acc, start = torch.zeros(3, dtype=torch.float64), 0
loaded = mgr.latest()
if loaded is not None:
    acc, start = loaded.state["acc"], loaded.step
    restore_rng(loaded.state["rng"])
for step in range(start, steps):
    maybe_inject(plans, rank=info.rank, node=info.node_rank, step=step)
    x = torch.rand(3, dtype=torch.float64)
    dist.all_reduce(x)
    acc = acc * 0.5 + x
    if (step + 1) % every == 0:
        mgr.save(step + 1, {"acc": acc, "rng": capture_rng()}, meta={"attempt": info.restart_count})
        dist.barrier()
publish({"acc": acc.tolist(), "restart": info.restart_count, "resumed_from": start})
ldist.teardown()
"""


def expected_acc(steps: int, world: int) -> torch.Tensor:
    """The uninterrupted run, computed here: the same per-rank draws, summed as all_reduce."""
    gens = [torch.Generator().manual_seed(100 + r) for r in range(world)]
    acc = torch.zeros(3, dtype=torch.float64)
    for _ in range(steps):
        draws = [torch.rand(3, dtype=torch.float64, generator=g) for g in gens]
        acc = acc * 0.5 + (draws[0] + draws[1])  # all_reduce sums first
    return acc


# torch 2.13's torchrun shares its rendezvous TCPStore with the ranks, and a restarted round
# reads the previous round's keys: gloo then connects to dead ranks or hangs in setup
# (pytorch/pytorch#135712). Its own store per round avoids that.
RESTARTABLE = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


@pytest.mark.slow
def test_killed_job_resumes_to_the_same_result(tmp_path: Path, leftover_processes) -> None:  # noqa: ANN001
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(JOB))
    ckpts, run_dir = tmp_path / "ckpt", tmp_path / "run"
    result = launch_local(script, str(ckpts), "12", "4", "kill:rank=1,step=10", nproc_per_node=2,
                          max_restarts=1, timeout_s=150, echo=None, run_dir=run_dir,
                          env=RESTARTABLE)
    log = "\n".join(result.output)
    assert result.ok, log
    assert result.published["restart"] == 1, log  # TORCHELASTIC_RESTART_COUNT of the 2nd try
    assert result.published["resumed_from"] == 8, log  # the last checkpoint before step 10
    assert torch.equal(torch.tensor(result.published["acc"], dtype=torch.float64),
                       expected_acc(12, 2)), log
    assert [line for line in result.output if "[fault]" in line] == [
        "[node0 rank1] [fault] kill: SIGKILL rank 1 at step 10 (attempt 0)"]
    assert [s for s, _ in CheckpointManager(ckpts).steps()] == [8, 12]  # keep=2
    assert not list(ckpts.rglob("*.tmp")) and not list(ckpts.glob(".*"))
    assert leftover_processes(run_dir) == []


SAVER = """\
import sys

import torch

from labkit.reliability.checkpoint import CheckpointManager
from labkit.reliability.faults import parse_faults, save_hook

plans = parse_faults("kill_in_save:rank=0,step=2")
mgr = CheckpointManager(sys.argv[1], before_replace=save_hook(plans, rank=0, node=0))
for step in (1, 2):
    mgr.save(step, {"w": torch.arange(10_000.0) * step})
print("not reached", flush=True)
"""


@pytest.mark.slow
def test_kill_in_save_leaves_the_previous_checkpoint(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TORCHELASTIC_RESTART_COUNT"}
    done = subprocess.run([sys.executable, "-c", SAVER, str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stdout + done.stderr
    assert "[fault] kill_in_save: SIGKILL rank 0 at step 2" in done.stdout
    folder = tmp_path / "step-000000002"
    [tmp] = folder.iterdir()  # half a temp file, never renamed: no rank-0.pt, no sidecar
    assert tmp.name.startswith(".rank-0.pt.") and tmp.name.endswith(".tmp")
    mgr = CheckpointManager(tmp_path)
    with pytest.warns(CheckpointWarning, match="incomplete"):
        loaded = mgr.latest()
    assert loaded.step == 1 and torch.equal(loaded.state["w"], torch.arange(10_000.0))
    mgr.save(2, {"w": torch.zeros(1)})  # the restarted run saves step 2 again
    assert sorted(p.name for p in folder.iterdir()) == ["manifest.json", "rank-0.json",
                                                        "rank-0.pt"]
