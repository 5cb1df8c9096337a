"""labkit.hangs: the diagnosis on hand-made dumps, the recorder and file locks in-process, the
live watch's reading of real exporters, the command line with a stand-in driver, and every
scenario for real (gloo, 2-3 ranks), watched live, with torch's flight recorder and analyzer.

Each real launch costs ~6-12 s on a 2-core machine (every rank imports torch, plus the
scenario's 5 s timeout, plus torch's analyzer in a subprocess), so there is one launch per
scenario, shared by every test of it (a module-scoped fixture), and one healthy launch.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import find_leftover_processes

from labkit.errors import ParameterError
from labkit.hangs import SCENARIOS, Recorder, diagnose, file_lock, nccl_hang_env
from labkit.hangs import run as hang_run
from labkit.hangs.diagnose import main_thread_stack, stack_summary
from labkit.hangs.file_locks import FileLockTimeoutError
from labkit.hangs.fr_analyze import first_finding, verdict_from
from labkit.hangs.recorder import dump_path
from labkit.hangs.run import (
    DETECTION_SLACK_S,
    WATCH_SHARE,
    HangReport,
    run_scenario,
    torchrun_exit_codes,
)
from labkit.hangs.watch_view import count_verdict, counts_disagree, read_view

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
    for name in nccl_hang_env():  # TORCH_FR_DUMP_TEMP_FILE is in the library's strings only
        if name.startswith(("TORCH_NCCL_", "TORCH_FR_")) and name != "TORCH_FR_DUMP_TEMP_FILE":
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
    assert hang_run.run(parse("watch")) == 2  # needs --job, --world-size and a Redis
    assert "labkit hang watch: needs --job" in capsys.readouterr().err
    with pytest.raises(ParameterError, match="unknown hang scenario"):
        run_scenario("nope")


def test_json_for_one_and_for_all(monkeypatch, capsys):
    calls = []

    def fake(name, timeout_s=None, detail=None, echo=None, **_):
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


# --- what the live watch reads ---------------------------------------------------------------
def test_the_watch_reads_real_exporters_and_tells_ahead_behind_and_gone():
    from labkit.observability.exporter import RankMetrics

    metrics = [RankMetrics(r, 3) for r in range(3)]
    try:
        for r, m in enumerate(metrics):
            m.serve()
            for _ in range(5 if r == 2 else 4):  # rank 2 enters one all_reduce more
                m.enter("collective", "all_reduce")
            for _ in range(4):
                m.leave("collective", "all_reduce")
                m.observe_collective("all_reduce", 16, 0.001)
            m.observe_step(0.003)
        views = [read_view(r, m.url, 5.0) for r, m in enumerate(metrics)]
        assert [v.started for v in views] == [{"all_reduce": 4}] * 2 + [{"all_reduce": 5}]
        assert [v.returned for v in views] == [{"all_reduce": 4}] * 3
        assert [v.busy for v in views] == [False, False, True] and views[0].steps == 1
        assert views[0].slowest_step_s == 0.005  # the bucket the 3 ms step fell in
        assert counts_disagree(views) and count_verdict(views)[:2] == (2, "ahead")
        views[2].started["all_reduce"] = 3  # now rank 2 entered one fewer: behind
        assert count_verdict(views)[:2] == (2, "behind")
        metrics[0].enter("lock", "flock")
        metrics[0].leave("lock", "flock", failed=True)  # a lock wait that timed out
        assert read_view(0, metrics[0].url, 5.0).failed == {"lock flock": 1}
        metrics[1].close()
        views = [read_view(r, m.url, 5.0) for r, m in enumerate(metrics)]
        assert not views[1].reachable and count_verdict(views)[:2] == (1, "gone")
    finally:
        for m in metrics:
            m.close()


def test_torch_analyzer_output_is_read_into_a_verdict():
    report = ("Not all ranks joining collective, sequence number: 5\ninternal record id: 4\n"
              "group info: 0:default_pg\ncollective: gloo:all_reduce\nmissing ranks: {0, 1}\n"
              "input sizes: [[4]]\n")
    assert first_finding(report) == ("Not all ranks joining collective, sequence number: 5; "
                                      "collective: gloo:all_reduce; missing ranks: {0, 1}")
    found = {"dumps": 3, "cli": {"argv": ["torchfrtrace", "d", "-p", "fr_rank_"], "ok": False,
                                 "error": "KeyError: ('0', 2)", "text": ""},
             "db": {"repaired": True, "collectives": [
                 {"seq": 4, "name": "gloo:all_reduce", "state": "scheduled", "pass_check": True,
                  "missing_ranks": [], "mismatches": {}},
                 {"seq": 5, "name": "gloo:all_reduce", "state": "scheduled", "pass_check": True,
                  "missing_ranks": [0, 1], "mismatches": {}}]}}
    verdict = verdict_from(found)
    assert (verdict.ranks, verdict.kind, verdict.seq) == ([0, 1], "missing", 5)
    assert verdict.cli_says == "KeyError: ('0', 2)" and verdict.repaired


# --- every scenario for real, watched live: one launch each, shared by the tests below ---------
# What notices first. A dead rank's peers may be stopped by torchrun first; when one waiting
# rank times out and exits, a peer can record the lost connection a moment before its own timeout.
DETECTED_BY = {
    "extra_collective": ("gloo collective timeout", "peer connection lost"),
    "wrong_order": ("TORCH_DISTRIBUTED_DEBUG=DETAIL fingerprint check",),
    "shape_mismatch": ("gloo collective timeout", "peer connection lost"),
    "stuck_rank": ("monitored_barrier",),
    "dead_rank": ("peer connection lost", "SIGTERM stopped the ranks"),
    "lock_deadlock": ("lock wait timeout",),
}
END_JOB = "shape_mismatch"  # the watch ends this one at its alarm, long before the timeout
MARK = "LABKIT_HANG_TEST_MARK"


def _launch(tmp: Path, run) -> SimpleNamespace:  # noqa: ANN001
    from labkit.services.shared import redis_url

    redis_url()  # the lab's Redis starts before the temporary folder is watched
    mark = uuid.uuid4().hex
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tempfile, "tempdir", str(tmp))  # the run dir goes here
        report = run({MARK: mark})
    return SimpleNamespace(report=report, mark=mark, tmp=tmp)


@pytest.fixture(scope="module", params=list(SCENARIOS))
def scenario_run(request, tmp_path_factory) -> SimpleNamespace:  # noqa: ANN001
    name = request.param
    return _launch(tmp_path_factory.mktemp(name), lambda env: run_scenario(
        name, env=env, end_job=name == END_JOB))


@pytest.mark.slow
def test_scenario_is_detected_in_time_with_the_right_culprit(scenario_run):
    report = scenario_run.report
    name, shown = report.scenario, hang_run.format_report(report)
    assert report.culprit_rank == report.expected_culprit_rank == SCENARIOS[name].culprit, shown
    assert not report.launch_timed_out, shown
    assert report.seq is not None and report.op, shown
    if name == END_JOB:  # the watch's SIGTERM ended it before any timeout: nothing timed out
        # A rank blocked in the collective may see its peers vanish before its own SIGTERM
        # is handled and exit 1 from that lost connection; every rank still stopped.
        assert report.watch.ended_job and report.detected_by.startswith("SIGTERM"), shown
        assert report.watch.ended_at is not None, shown
        assert set(report.exit_codes.values()) <= {143, -15, 1}, shown
        return
    # Measured on the ranks' clocks from the moment the hang began, so the launch's start-up
    # (seconds of `import torch` on a slow machine) is not in it: the slack only covers a
    # loaded machine waking the process up late.
    assert report.detected_within_s is not None, shown
    assert report.detected_within_s <= report.timeout_s + DETECTION_SLACK_S, shown
    assert report.ok, shown
    assert report.detected_by.startswith(DETECTED_BY[name]), shown
    if name == "stuck_rank":  # its stack shows where it is stuck, outside any collective
        assert "slow_tool_call" in report.stacks[1], shown
    if name == "dead_rank":
        assert report.exit_codes.get(1) == -9 and 1 not in report.stacks, shown


@pytest.mark.slow
def test_the_live_watch_names_the_culprit_within_half_the_timeout(scenario_run):
    report = scenario_run.report
    watch, shown = report.watch, hang_run.format_report(report)
    assert watch is not None, report.watch_error
    assert watch.outcome in ("hang", "failed"), shown
    assert watch.culprit_rank == report.culprit_rank == report.expected_culprit_rank, shown
    assert (watch.kind, watch.op, watch.seq) == (report.kind, report.op, report.seq), shown
    assert report.watch_within_s is not None, shown
    assert report.watch_within_s <= WATCH_SHARE * report.timeout_s, shown  # the stated goal
    if watch.outcome == "hang":  # caught alive: its threshold came from this job's own steps
        assert watch.threshold_s and watch.slowest_step_s and watch.poll_s, shown
        assert set(watch.dumped) == set(range(report.world_size)), shown  # all answered SIGUSR1
        assert set(watch.stacks) == set(range(report.world_size)), shown


@pytest.mark.slow
def test_torch_flight_recorder_dumps_say_who_wrote_them_and_its_analyzer_ran(scenario_run):
    report = scenario_run.report
    torch, shown = report.torch, hang_run.format_report(report)
    alive = [r for r in range(report.world_size) if report.exit_codes.get(r) != -9]
    assert torch is not None and torch.ran, shown
    assert torch.dumps == len(alive) and sorted(report.torch_writers) == alive, shown
    for rank, writer in report.torch_writers.items():
        assert (writer["rank"], writer["world_size"], writer["attempt"]) == \
            (rank, report.world_size, 0), writer
        assert writer["host"] and writer["job"] and writer["backend"] == "gloo", writer
    assert torch.cli_command.startswith("torchfrtrace ") and torch.cli_says, shown
    # gloo in torch 2.13: no start or end time in any entry, measured from the dumps
    assert any("start time in 0 of" in line for line in report.torch_gaps), shown
    if report.scenario == "extra_collective":  # torch names the ranks that did not join
        assert (torch.ranks, torch.kind, torch.seq) == ([0, 1], "missing", 5), shown
    if report.scenario == "shape_mismatch":
        assert torch.ranks == [2] and "SIZE" in torch.kind, shown


@pytest.mark.slow
def test_a_scenario_leaves_no_process_and_no_file(scenario_run):
    assert find_leftover_processes(scenario_run.mark, name=MARK) == []
    assert list(scenario_run.tmp.iterdir()) == [], "the run dir is removed"


@pytest.fixture(scope="module")
def healthy_run(tmp_path_factory) -> SimpleNamespace:  # noqa: ANN001
    from labkit.hangs import run_healthy

    return _launch(tmp_path_factory.mktemp("healthy"), lambda env: run_healthy())


@pytest.mark.slow
def test_the_live_watch_raises_no_alarm_on_a_healthy_job(healthy_run):
    report = healthy_run.report
    shown = json.dumps(report.to_dict(), default=str)[:3000]
    assert report.exit_ok and report.watch is not None, shown
    assert not report.false_alarm and report.watched_all_of_it, shown
    assert report.watch.threshold_s is not None, shown  # it was armed the whole time
    assert report.duration_s == report.timeout_s  # watched for as long as a hang would last
    assert find_leftover_processes(healthy_run.mark, name=MARK) == []
    assert list(healthy_run.tmp.iterdir()) == []


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
