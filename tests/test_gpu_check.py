"""``labkit gpu-check``: without a GPU every check skips with its reason and starts no job; the
run's bookkeeping (limits, budget, failures in one line, JSON, table) and each check's verdict on
given results, here on the CPU; on a CUDA host, the checks themselves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from labkit.cli import main
from labkit.errors import ParameterError
from labkit.gpu import check as gpu_check
from labkit.gpu.check import CheckResult, GpuReport, format_report, run_checks, skip_reason
from labkit.gpu.checks import (
    CHECK_NAMES,
    Check,
    CheckFailed,
    CheckSkipped,
    bench_uses_cuda_events,
    judge_capstone,
    judge_checkpoint,
    judge_ddp,
    judge_nccl_log,
    judge_setup,
)

REPO = Path(__file__).resolve().parents[1]
CUDA = torch.cuda.is_available()
no_cuda_only = pytest.mark.skipif(CUDA, reason="this host has CUDA: the checks run instead")
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs CUDA: torch.cuda.is_available() is False")

GOOD_FACTS = {"python_version": "3.12.3", "platform": "Linux", "hostname": "gpu1",
              "torch_version": "2.5.1+cu124", "cuda_version": "12.4", "nccl_version": "2.21.5",
              "cuda_available": True, "devices": ["NVIDIA H200"], "torch_error": None}


def _labkit(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "labkit", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env={**os.environ, **(env or {})})


@no_cuda_only
def test_without_cuda_every_check_skips_with_its_reason_and_no_job_starts(monkeypatch):
    def no_launch(*args, **kwargs):
        raise AssertionError("a job was launched without a GPU")

    monkeypatch.setattr("labkit.runtime.launch.launch_local", no_launch)
    monkeypatch.setattr("labkit.runtime.pace.torch_import_s", no_launch)
    report = run_checks()
    assert [c.name for c in report.checks] == list(CHECK_NAMES)
    for c in report.checks:
        assert c.status == "skipped", c
        assert c.reason.startswith("no CUDA device: torch.cuda.is_available() is False"), c
    assert report.ok and report.counts() == {"passed": 0, "failed": 0, "skipped": len(CHECK_NAMES)}
    assert report.torch_version == torch.__version__ and report.devices == []


@no_cuda_only
def test_the_command_skips_everything_here_exits_0_and_leaves_nothing_running(
        leftover_processes):
    mark = uuid.uuid4().hex
    proc = _labkit("gpu-check", "--json", env={"LABKIT_GPU_TEST_MARK": mark})
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["ok"] is True and got["counts"]["skipped"] == len(CHECK_NAMES)
    assert got["torch_version"] == torch.__version__ and got["cuda_available"] is False
    for key in ("cuda_version", "nccl_version", "devices", "python_version", "budget_s"):
        assert key in got
    for c in got["checks"]:
        assert c["status"] == "skipped" and "torch.cuda.is_available() is False" in c["reason"]
        assert set(c) >= {"name", "status", "reason", "seconds", "details"}
    assert proc.stderr == ""  # nothing ran, so no progress lines
    assert leftover_processes(mark, name="LABKIT_GPU_TEST_MARK") == []


@no_cuda_only
def test_the_table_has_a_row_per_check(capsys):
    assert main(["gpu-check"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"labkit gpu-check: 0 passed, 0 failed, {len(CHECK_NAMES)} skipped")
    for name in CHECK_NAMES:
        assert any(line.startswith(name) and " skipped " in line for line in out.splitlines())


def test_an_unknown_check_name_is_a_clear_error(capsys):
    assert main(["gpu-check", "--only", "dist-setup,warp-drive"]) == 2
    err = capsys.readouterr().err
    assert "labkit: error: unknown check(s) ['warp-drive']" in err


@pytest.mark.parametrize("changes, reason", [
    ({"torch_error": "ModuleNotFoundError: No module named 'torch'"}, "torch does not import"),
    ({"torch_version": "2.3.1+cu121"}, "torch 2.3.1+cu121 is older than 2.4"),
    ({"cuda_available": False, "devices": [], "cuda_version": None}, "is a CPU build"),
    ({"cuda_available": False, "devices": []}, "no CUDA device: torch.cuda.is_available()"),
    ({"devices": []}, "torch.cuda.device_count() is 0"),
])
def test_why_no_check_can_run(changes, reason):
    assert reason in skip_reason({**GOOD_FACTS, **changes})


def test_a_host_with_a_gpu_and_torch_2_4_or_later_runs_them():
    assert skip_reason(GOOD_FACTS) is None
    assert skip_reason({**GOOD_FACTS, "torch_version": "2.4.0a0+git1234.nv24.05"}) is None


def _fake(name: str, outcome, launches: int = 1, work_s: float = 30.0) -> Check:
    def run(ctx):
        assert ctx.nproc == 1 and ctx.left() > 0
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    return Check(name, f"the {name} check", run, launches=launches, work_s=work_s)


def test_each_outcome_becomes_a_status_with_a_one_line_reason():
    checks = [
        _fake("good", ("all right", {"measured": 1.5})),
        _fake("bad", CheckFailed("wrong sum", {"sum": 3})),
        _fake("absent", CheckSkipped("no such thing here")),
        _fake("boom", RuntimeError("NCCL error: unhandled system error\nline two\nline three")),
    ]
    lines: list[str] = []
    report = run_checks(facts=GOOD_FACTS, checks=checks, echo=lines.append,
                        startup_s=lambda n: 10.0)
    got = {c.name: c for c in report.checks}
    assert got["good"].status == "passed" and got["good"].details == {"measured": 1.5}
    assert (got["bad"].status, got["bad"].reason, got["bad"].details) == \
        ("failed", "wrong sum", {"sum": 3})
    assert (got["absent"].status, got["absent"].reason) == ("skipped", "no such thing here")
    assert got["boom"].status == "failed"
    assert got["boom"].reason == "RuntimeError: NCCL error: unhandled system error"
    assert got["boom"].details["error"][-1] == "line three"
    assert all(c.limit_s == 40.0 and c.seconds >= 0 for c in report.checks)
    assert not report.ok and report.counts() == {"passed": 1, "failed": 2, "skipped": 1}
    assert len(lines) == 8 and lines[1].startswith("gpu-check: good: passed in ")
    table = format_report(report)
    assert "1 passed, 2 failed, 1 skipped" in table and "GPUs: 0: NVIDIA H200" in table
    assert "line three" in table  # a failure's error lines under its row
    again = json.loads(json.dumps(report.to_dict()))
    assert again["ok"] is False and again["checks"][1]["reason"] == "wrong sum"
    assert again["nccl_version"] == "2.21.5" and again["devices"] == ["NVIDIA H200"]


def test_limits_come_from_the_start_up_allowance_and_stop_at_the_budget():
    checks = [_fake("first", ("ok", {}), launches=2, work_s=60.0),
              _fake("second", ("ok", {}), work_s=500.0)]
    report = run_checks(facts=GOOD_FACTS, checks=checks, budget_s=100.0,
                        startup_s=lambda n: 15.0)
    first, second = report.checks
    assert first.limit_s == 90.0  # 2 launches x 15 s + 60 s of work
    assert second.status == "passed" and 99.0 <= second.limit_s <= 100.0  # what is left
    tight = run_checks(facts=GOOD_FACTS, checks=checks[:1], budget_s=10.0,
                       startup_s=lambda n: 15.0)
    assert tight.checks[0].status == "skipped"
    assert "budget left: rerun with --only first" in tight.checks[0].reason


def test_only_picks_checks_in_their_order_and_refuses_unknown_names():
    report = run_checks(only=["capstone", "dist-setup"], facts={**GOOD_FACTS,
                        "cuda_available": False, "devices": []})
    assert [c.name for c in report.checks] == ["dist-setup", "capstone"]
    with pytest.raises(ParameterError, match="unknown check"):
        run_checks(only=["nope"], facts=GOOD_FACTS)
    with pytest.raises(ParameterError, match="budget"):
        run_checks(budget_s=0, facts=GOOD_FACTS)


def test_the_report_serializes_every_field():
    report = GpuReport("3.12", "Linux", "h", None, None, None, False, [], 270.0,
                       checks=[CheckResult("x", "t", "skipped", "why")])
    assert json.loads(json.dumps(report.to_dict()))["checks"][0]["reason"] == "why"
    assert "torch -" in format_report(report)


SETUP = {"backend": "nccl", "device": "cuda:0", "world_size": 2, "all_reduce_ok": True,
         "nccl_version": "2.21.5", "device_name": "NVIDIA H200",
         "ranks": [{"rank": 0, "local_rank": 0, "nccl": True, "cuda_device": 0},
                   {"rank": 1, "local_rank": 1, "nccl": True, "cuda_device": 1}]}


def test_setup_passes_on_nccl_with_a_gpu_per_rank_and_fails_otherwise():
    summary, details = judge_setup(SETUP, 2, 4.2)
    assert "cuda:0, cuda:1" in summary and details["job_s"] == 4.2
    gloo = {**SETUP, "backend": "gloo", "world_size": 1,
            "ranks": [{"rank": 0, "local_rank": 0, "nccl": False, "cuda_device": -1}]}
    with pytest.raises(CheckFailed, match="chose gloo for 1 rank"):
        judge_setup(gloo, 1, 1.0)
    shared = {**SETUP, "ranks": [dict(r, cuda_device=0) for r in SETUP["ranks"]]}
    with pytest.raises(CheckFailed, match=r"rank\(s\) \[1\] not on their own GPU"):
        judge_setup(shared, 2, 1.0)


NCCL_LOG = """\
gpu1:4242:4242 [0] NCCL INFO Bootstrap : Using eth0:10.1.2.3<0>
gpu1:4242:4242 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0
gpu1:4242:4242 [0] NCCL INFO NCCL_IB_TIMEOUT set by environment to 22.
gpu1:4242:4242 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
gpu1:4242:4300 [0] NCCL INFO comm 0x55d0c8a0 rank 0 nRanks 1 nNodes 1 localRanks 1 localRank 0 MNNVL 0
gpu1:4242:4300 [0] NCCL INFO ncclCommInitRankConfig comm 0x55d0c8a0 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 18000 commId 0x9c2e4f1a5b7d3e01 - Init COMPLETE
gpu1:4242:4300 [0] NCCL INFO a line this reader does not know
"""


def test_the_nccl_log_gives_the_version_and_every_rank():
    summary, details = judge_nccl_log(NCCL_LOG, 1, "2.21.5", 1)
    assert summary.startswith("NCCL 2.21.5+cuda12.4: 1 of 1 rank(s) Init COMPLETE")
    assert details["ranks"][0]["bus_id"] == "18000" and details["ignored_lines"] == 1
    # NCCL's two formats (src/misc/socket.cc, src/misc/param.cc): a string as it is, an integer
    # parameter with a full stop after it
    assert details["env"] == {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_TIMEOUT": "22"}
    with pytest.raises(CheckFailed, match="torch.cuda.nccl.version\\(\\) 2.23.4") as caught:
        judge_nccl_log(NCCL_LOG, 1, "2.23.4", 1)
    assert caught.value.details["excerpt"][0].startswith("gpu1:4242:4242 [0] NCCL INFO")
    with pytest.raises(CheckFailed, match=r"no 'Init COMPLETE' record for rank\(s\) \[0, 1\] of 2"):
        judge_nccl_log(NCCL_LOG, 2, "2.21.5", 1)
    with pytest.raises(CheckFailed, match="no 'NCCL version' line"):
        judge_nccl_log("", 1, None, 0)


def _ddp_row(view: bool, after: float, views: bool) -> dict:
    return {"gradient_as_bucket_view": view, "allocated_after_step_mb": after,
            "peak_steady_mb": after + 1, "grad_mb": 64.0, "grads_are_bucket_views": views}


def test_bucket_views_must_save_about_one_gradient_copy():
    good = {"device": "cuda:0", "rows": [_ddp_row(False, 192.0, False), _ddp_row(True, 128.0, True)]}
    summary, details = judge_ddp(good)
    assert details["saved_after_step_mb"] == 64.0 and details["saved_over_grad"] == 1.0
    assert "saved 64.0 MiB" in summary
    flat = {"device": "cuda:0", "rows": [_ddp_row(False, 130.0, False), _ddp_row(True, 128.0, False)]}
    with pytest.raises(CheckFailed, match="not views into the buckets.*under 0.5 x"):
        judge_ddp(flat)


def test_the_checkpoint_round_trip_on_the_cpu_is_exact_and_only_lacks_a_gpu():
    from labkit.gpu.jobs_rank import checkpoint_mode

    got = checkpoint_mode({"device": "cpu"})
    assert got["tensors"] > 10 and got["resumed_equal"]
    assert got["raw_mismatch"] == got["device_mismatch"] == got["cpu_mismatch"] == []
    with pytest.raises(CheckFailed) as caught:
        judge_checkpoint(got)
    assert caught.value.reason == "no tensor of the saved state was on the GPU"
    summary, _ = judge_checkpoint({**got, "device": "cuda:0", "cuda_tensors": 9})
    assert "9 on cuda:0" in summary


def test_the_capstone_must_train_its_updates_with_the_learner_on_the_gpu():
    from labkit.capstone.config import CapstoneConfig

    cfg = CapstoneConfig(nodes=1, ranks_per_node=2, min_nodes=1, steps=2560, kill_slot=None,
                         max_restarts=0, learner_device="cuda:0")
    report = SimpleNamespace(
        config={"learner_device": "cuda:0"}, seconds=20.0,
        throughput={"updates": 20, "env_steps_trained": 2560, "trained_steps_per_s": 300.0},
        final_return={"eval_return": 21.4, "final_mean_return": 19.0, "steps_to_solved": None,
                      "episodes": 90},
        checkpoints={"count": 3}, restarts={"rank_failures_recorded": 0})
    summary, details = judge_capstone(report, cfg)
    assert "20 updates" in summary and details["expected_updates"] == 20
    report.config, report.throughput = {"learner_device": ""}, {**report.throughput, "updates": 3}
    with pytest.raises(CheckFailed, match="not cuda:0; 3 learner updates, expected 20"):
        judge_capstone(report, cfg)


def test_the_bench_timing_finding_reads_the_bench_itself():
    source = (REPO / "labkit/collectives/bench_rank.py").read_text()
    assert bench_uses_cuda_events() == ("cuda.Event(" in source)


def test_the_hang_check_wants_the_watch_in_half_the_timeout_and_nccl_dumps_from_every_rank():
    from labkit.gpu.hang_check import judge_hang
    from labkit.hangs.fr_analyze import TorchVerdict
    from labkit.hangs.run import HangReport
    from labkit.hangs.watch import WatchResult

    watch = WatchResult("j", "hang", alarm_at=101.0, hang_started_at=100.0, culprit_rank=2,
                        kind="ahead", op="all_reduce", seq=5)
    writers = {r: {"rank": r, "backend": "nccl"} for r in range(3)}
    report = HangReport("extra_collective", "", 3, 20.0, False, None, "", 2, 2, "ahead",
                        "all_reduce", 5, watch=watch, torch_writers=writers,
                        torch=TorchVerdict(True, [0, 1], "missing", "nccl:all_reduce", 5,
                                           cli_ok=True, cli_says="Not all ranks joining"))
    summary, details = judge_hang(report)
    assert "rank 2" in summary and details["backends"] == ["nccl"]
    late = WatchResult("j", "hang", alarm_at=115.0, hang_started_at=100.0, culprit_rank=2)
    with pytest.raises(CheckFailed, match="within half the timeout"):
        judge_hang(HangReport(**{**report.__dict__, "watch": late}))
    gloo = {r: {"rank": r, "backend": "gloo"} for r in range(3)}
    with pytest.raises(CheckFailed, match="NCCL flight-recorder dumps"):
        judge_hang(HangReport(**{**report.__dict__, "torch_writers": gloo}))


def test_startup_allowance_is_only_measured_when_a_check_runs(monkeypatch):
    calls = []
    monkeypatch.setattr(gpu_check, "_startup_s", lambda n: calls.append(n) or 30.0)
    run_checks(facts={**GOOD_FACTS, "cuda_available": False, "devices": []})
    assert calls == []


@pytest.mark.gpu
@needs_cuda
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", CHECK_NAMES)
def test_each_check_passes_on_this_gpu_host(name):
    report = run_checks(only=[name])
    [result] = report.checks
    assert result.status == "passed", (result.reason, result.details)
