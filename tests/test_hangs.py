"""labkit.hangs: the diagnosis on hand-made dumps, the recorder and file locks in-process, the
command line with a stand-in driver, and every scenario for real (gloo, 2-3 ranks).

Each real launch costs ~8-20 s on a 2-core machine (every rank imports torch, plus the
scenario's 5 s timeout), so there is one launch per scenario and each checks everything.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from labkit.errors import ParameterError
from labkit.hangs import SCENARIOS, Recorder, diagnose, file_lock, nccl_hang_env
from labkit.hangs import run as hang_run
from labkit.hangs.diagnose import main_thread_stack, stack_summary
from labkit.hangs.file_locks import FileLockTimeoutError
from labkit.hangs.recorder import dump_path
from labkit.hangs.run import DETECTION_SLACK_S, HangReport, run_scenario, torchrun_exit_codes

T0 = 1_000_000.0


# --- the diagnosis on hand-made dumps ------------------------------------------------------------
def event(seq: int, op: str = "all_reduce", state: str = "completed", shape: int = 4,
          at: float = 0.0, error: str = "", kind: str = "collective", **info) -> dict:
    """A recorded call that started ``at`` s after T0; failures end 5 s later (a timeout)."""
    took = {"started": None, "failed": 5.0}.get(state, 0.01)
    return {"kind": kind, "seq": seq, "op": op, "shapes": [[shape]] if shape else [],
            "dtype": "float32", "state": state, "started_at": T0 + at,
            "ended_at": None if took is None else T0 + at + took, "error": error, "info": info}


def dumps(per_rank: dict[int, list[dict]]) -> dict[int, dict]:
    return {r: {"rank": r, "events": events, "triggers": []} for r, events in per_rank.items()}


TIMEOUT = "RuntimeError: Timed out waiting 5000ms for recv operation to complete"
DONE = [event(1, at=0.1), event(2, at=0.2)]


def test_rank_that_is_ahead():
    found = diagnose(dumps({0: DONE, 1: DONE, 2: [*DONE, event(3, state="failed", at=1,
                                                               error=TIMEOUT)]}), 3)
    assert (found.culprit_rank, found.kind, found.op, found.seq) == (2, "ahead", "all_reduce", 3)
    assert found.detected_within_s == pytest.approx(5.0)
    assert found.detected_by == "gloo collective timeout on rank 2"


def test_rank_that_is_behind_and_monitored_barrier_evidence():
    error = "RuntimeError: [Rank 0]: Ranks 1 failed to pass monitoredBarrier in 5000 ms"
    found = diagnose(dumps({0: [*DONE, event(3, "monitored_barrier", "failed", 0, 1, error)],
                            1: DONE,
                            2: [*DONE, event(3, "monitored_barrier", "failed", 0, 1.2, TIMEOUT)]}),
                     3)
    assert (found.culprit_rank, found.kind, found.seq) == (1, "behind", 3)
    assert "monitored_barrier on rank 0: ranks 1 did not arrive within 5000 ms" in found.evidence


def test_two_ranks_cannot_tell_ahead_from_behind_unless_monitored_barrier_names_one():
    found = diagnose(dumps({0: DONE, 1: [*DONE, event(3, state="failed", error=TIMEOUT)]}), 2)
    assert (found.culprit_rank, found.kind) == (None, "ambiguous")
    named = "RuntimeError: [Rank 0]: Ranks 1 failed to pass monitoredBarrier in 5000 ms"
    found = diagnose(dumps({0: [*DONE, event(3, "monitored_barrier", "failed", 0, error=named)],
                            1: DONE}), 2)
    assert (found.culprit_rank, found.kind) == (1, "behind")


@pytest.mark.parametrize(("odd", "kind"), [({"op": "broadcast"}, "different_op"),
                                           ({"shape": 5}, "different_shape")])
def test_odd_one_out_at_the_same_seq(odd, kind):
    same = [*DONE, event(3, state="failed", error=TIMEOUT)]
    found = diagnose(dumps({0: same, 1: [*DONE, event(3, state="failed", **odd)], 2: same}), 3)
    assert (found.culprit_rank, found.kind, found.seq) == (1, kind, 3)


def test_rank_without_a_dump_is_missing():
    found = diagnose(dumps({0: [*DONE, event(3, state="failed", at=1, error="by peer")],
                            2: [*DONE, event(3, state="failed", at=1, error="by peer")]}), 3)
    assert (found.culprit_rank, found.kind, found.seq) == (1, "missing", 3)
    assert found.detected_by == "peer connection lost on rank 0"


def test_lock_cycle_blames_the_rank_that_broke_the_lock_order():
    def locks(first: str, second: str, holder: int) -> list[dict]:
        return [event(1, "flock", "held", 0, kind="lock", lock=first, held=[]),
                event(2, "flock", "failed", 0, at=0.5, kind="lock", lock=second, held=[first],
                      holder=holder, error="FileLockTimeoutError: waited")]

    found = diagnose(dumps({0: locks("a.lock", "b.lock", 1), 1: locks("b.lock", "a.lock", 0)}), 2)
    assert (found.culprit_rank, found.kind, found.op, found.seq) == (1, "lock_order",
                                                                     "flock a.lock", 2)
    assert found.evidence[0].startswith("wait-for cycle: rank 0 holds a.lock")


def test_main_thread_stack_skips_other_threads_and_the_launcher():
    text = """\
Thread 0x00007f01 (most recent call first):
  File "/x/threading.py", line 331 in wait

Current thread 0x00007f02 (most recent call first):
  File "/x/labkit/hangs/scenarios.py", line 144 in slow_tool_call
  File "/x/labkit/hangs/scenarios.py", line 179 in _run_stuck_rank
  File "/x/labkit/runtime/worker.py", line 101 in main
  File "<frozen runpy>", line 198 in _run_module_as_main
"""
    stack = main_thread_stack(text)
    assert stack.splitlines() == text.splitlines()[4:6]
    assert stack_summary(stack) == ("slow_tool_call (scenarios.py:144) <- "
                                    "_run_stuck_rank (scenarios.py:179)")


# --- recorder and locks in this process ----------------------------------------------------------
class FakeTensor:
    shape, dtype = (3, 2), "torch.float16"


def test_recorder_records_and_dumps_a_failing_call(tmp_path):
    recorder = Recorder(0, 2, tmp_path, timeout_s=1.0, capacity=3)
    for _ in range(4):
        recorder.call("all_reduce", lambda t: t, (FakeTensor(),), {})

    def times_out(tensor, src):
        raise RuntimeError("Timed out waiting 1000ms")

    with pytest.raises(RuntimeError):
        recorder.call("broadcast", times_out, (FakeTensor(),), {"src": 0})
    dump = json.loads(dump_path(tmp_path, 0).read_text())
    assert [(e["seq"], e["op"], e["state"]) for e in dump["events"]] == [
        (3, "all_reduce", "completed"), (4, "all_reduce", "completed"), (5, "broadcast", "failed")]
    assert dump["events"][-1]["shapes"] == [[3, 2]] and dump["events"][-1]["dtype"] == "float16"
    assert "Timed out" in dump["events"][-1]["error"]
    assert "rank 0: broadcast seq 5 failed" in (tmp_path / "stacks-rank0.txt").read_text()


def test_file_lock_times_out_naming_the_holder(tmp_path):
    holder = Recorder(3, 4, tmp_path / "a", timeout_s=1.0)
    waiter = Recorder(1, 4, tmp_path / "b", timeout_s=1.0)
    lock = tmp_path / "x.lock"
    with file_lock(lock, 0.2, holder):
        with pytest.raises(FileLockTimeoutError, match=r"rank 1 waited 0.2 s for x.lock, held by "
                                                   r"rank 3"):
            with file_lock(lock, 0.2, waiter):
                pass
        assert holder.held_locks == ["x.lock"]
    assert holder.held_locks == [] and holder.events[-1].state == "released"
    assert waiter.events[-1].info["holder"] == 3 and waiter.events[-1].state == "failed"
    with file_lock(lock, 0.2, waiter):  # free again once the holder let go
        pass


def test_nccl_env_names_exist_in_this_torch():
    import torch

    root = Path(torch.__file__).parent
    headers = root / "include/torch/csrc/distributed/c10d"
    if not (headers / "ProcessGroupNCCL.hpp").exists():
        pytest.skip("this torch ships no c10d headers")
    text = "".join(p.read_text(errors="replace") for p in headers.glob("*.hpp"))
    for name in nccl_hang_env():
        if name.startswith("TORCH_NCCL_") and name != "TORCH_NCCL_DEBUG_INFO_TEMP_FILE":
            assert f'"{name}"' in text, name
    assert "ProcessGroupWrapper" in text  # what DETAIL wraps the group in


# --- command line --------------------------------------------------------------------------------
def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    hang_run.add_arguments(parser)
    return parser.parse_args(argv)


def test_list_and_usage_errors(capsys):
    assert hang_run.run(parse("--list")) == 0
    out = capsys.readouterr().out
    assert [line.split()[0] for line in out.splitlines()] == list(SCENARIOS)
    assert hang_run.run(parse()) == 2
    assert hang_run.run(parse("nope")) == 2
    assert "unknown scenario 'nope'" in capsys.readouterr().err
    assert hang_run.run(parse("dead_rank", "--timeout", "0")) == 2
    with pytest.raises(ParameterError, match="unknown hang scenario"):
        run_scenario("nope")


def test_json_for_one_and_for_all(monkeypatch, capsys):
    calls = []

    def fake(name, timeout_s=None, detail=None, echo=None):
        calls.append((name, timeout_s, detail))
        spec = SCENARIOS[name]
        return HangReport(name, spec.summary, spec.world_size, timeout_s or 5.0, bool(detail),
                          5.01, "gloo collective timeout on rank 2", spec.culprit, spec.culprit,
                          "ahead", "all_reduce", 5)

    monkeypatch.setattr(hang_run, "run_scenario", fake)
    assert hang_run.run(parse("extra_collective", "--json", "--timeout", "3",
                              "--detail", "on")) == 0
    one = json.loads(capsys.readouterr().out)
    assert {"scenario", "detected_within_s", "culprit_rank", "expected_culprit_rank"} <= set(one)
    assert calls == [("extra_collective", 3.0, True)]
    assert hang_run.run(parse("all", "--json")) == 0
    assert [r["scenario"] for r in json.loads(capsys.readouterr().out)] == list(SCENARIOS)


def test_torchrun_exit_codes_from_its_failure_summary():
    output = ["[torchrun0]   rank      : 1 (local_rank: 1)",
              "[torchrun0]   exitcode  : -9 (pid: 7)",
              "[torchrun0]   rank      : 0 (local_rank: 0)",
              "[torchrun0]   exitcode  : 1 (pid: 6)"]
    assert torchrun_exit_codes(output) == {1: -9, 0: 1}


# --- every scenario for real ---------------------------------------------------------------------
# What notices first. A dead rank's peers may be stopped by torchrun first; when one waiting
# rank times out and exits, a peer can record the lost connection a moment before its own timeout.
DETECTED_BY = {
    "extra_collective": ("gloo collective timeout", "peer connection lost"),
    "wrong_order": ("TORCH_DISTRIBUTED_DEBUG=DETAIL fingerprint check",),
    "shape_mismatch": ("gloo collective timeout", "peer connection lost"),
    "stuck_rank": ("monitored_barrier",),
    "dead_rank": ("peer connection lost", "torchrun stopped the ranks"),
    "lock_deadlock": ("lock wait timeout",),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario_is_detected_in_time_with_the_right_culprit(name, monkeypatch, tmp_path,
                                                            leftover_processes):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the run dir goes here
    mark = uuid.uuid4().hex
    started = time.monotonic()
    report = run_scenario(name, env={"LABKIT_HANG_TEST_MARK": mark})
    took = time.monotonic() - started
    shown = hang_run.format_report(report)
    assert report.culprit_rank == report.expected_culprit_rank == SCENARIOS[name].culprit, shown
    assert not report.launch_timed_out, shown
    # Measured on the ranks' clocks from the moment the hang began, so the launch's start-up
    # (seconds of `import torch` on a slow machine) is not in it: the slack only covers a
    # loaded machine waking the process up late.
    assert report.detected_within_s is not None, shown
    assert report.detected_within_s <= report.timeout_s + DETECTION_SLACK_S, shown
    assert report.ok and report.seq is not None and report.op, shown
    assert report.detected_by.startswith(DETECTED_BY[name]), shown
    assert took < report.timeout_s + hang_run.LAUNCH_ALLOWANCE_S + 30, shown
    assert leftover_processes(mark, name="LABKIT_HANG_TEST_MARK") == []
    assert list(tmp_path.iterdir()) == [], "the run dir is removed"
    if name == "stuck_rank":  # its stack shows where it is stuck, outside any collective
        assert "slow_tool_call" in report.stacks[1], shown
    if name == "dead_rank":
        assert report.exit_codes.get(1) == -9 and 1 not in report.stacks, shown


def test_the_installed_torch_headers_agree_with_what_the_lesson_states() -> None:
    from labkit.hangs.torch_headers import read_torch_headers

    facts = read_torch_headers()
    if not facts:
        pytest.skip("this torch ships no c10d headers")
    # labkit.hangs.nccl_env states these for torch 2.13; a newer torch that changes one fails here
    assert facts["TORCH_NCCL_BLOCKING_WAIT"][:2] == ["TORCH_NCCL_BLOCKING_WAIT", "NCCL_BLOCKING_WAIT"]
    assert facts["default_mode"] == ("3", "SkipCleanUp")
    assert dict(facts["error_modes"]) == {"NoHandling": "0", "TearDown": "1", "CleanUpOnly": "2",
                                          "SkipCleanUp": "3"}
    assert facts["nccl_timeout_min"] == 10 and facts["fr_buffer"] == 2000
