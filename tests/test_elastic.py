"""Elastic membership through real torchrun agents: scale up, a preemption notice, a kill; and
lesson 12's split-brain experiments (leader election and a gloo collective with one node cut off).

The outcome of a plan may not depend on the machine's speed: the group never runs past a change
the scheduler has not carried out, nor finishes while one is in flight, and a rendezvous round
that closed without a started node is re-formed with it. So the world sizes are asserted
exactly, on any machine. The join-then-notice plan, the elections and the collective are lesson
12's own runs at smoke size, read back from the results it saved; the split-brain ones need
root and iproute2 (a lab network) and are skipped with the lesson's reason otherwise.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from process_helpers import session_processes

from labkit.course.runner import run_course
from labkit.errors import ParameterError
from labkit.orchestration import (
    ElasticConfig,
    Horizon,
    NodeChange,
    check_plan,
    parse_changes,
    run_elastic,
)
from labkit.orchestration.elastic import _Scheduler
from labkit.orchestration.elastic_model import reference_loss
from labkit.orchestration.elastic_report import ElasticRun
from labkit.orchestration.election import ElectionResult, format_election
from labkit.orchestration.partition import WARMUP_ITERATIONS, CollectiveResult, format_collective
from labkit.runtime import netlab

# Node 1's torchrun agent starts only once the first group has formed without it: what a node
# that boots more than the rendezvous' last call after node 0 does on a busy machine.
LATE_NODE_HOOK = """
import os, pathlib, sys, time
if os.environ.get("LABKIT_NODE") == "1" and "torch.distributed.run" in sys.orig_argv:
    log = pathlib.Path(os.environ["LABKIT_TEST_PROGRESS_LOG"])
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and '"event": "start"' not in (
            log.read_text() if log.exists() else ""):
        time.sleep(0.05)
"""


NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def elastic_processes() -> list[str]:
    """Live processes of this session running the elastic rank script (none may outlive a
    run)."""
    return session_processes(lambda cmdline: "elastic_rank.py" in cmdline)


def test_changes_parse_in_order():
    assert parse_changes("join:2@10, preempt:2@30,kill:1@40") == [
        NodeChange("join", 2, 10), NodeChange("preempt", 2, 30), NodeChange("kill", 1, 40)]


@pytest.mark.parametrize(("text", "message"), [
    ("jump:2@10", "ACTION:NODE@STEP"),
    ("kill:0@10", "node 0 hosts the c10d rendezvous store"),
    ("preempt:2@10", "node 2 is not running then"),
    ("join:1@10", "node 1 has already been started"),
    ("kill:1@10", "below the minimum of 2"),
    ("join:2@20,preempt:2@10", "step order"),
    ("join:5@10", "outside 0..2"),
])
def test_impossible_plans_are_refused_before_anything_starts(text, message):
    with pytest.raises(ParameterError, match=message):
        check_plan(2, 3, 2, parse_changes(text))


def test_bad_sizes_are_refused():
    with pytest.raises(ParameterError, match="min_nodes"):
        run_elastic(min_nodes=3, max_nodes=2)
    with pytest.raises(ParameterError, match="at least 1"):
        run_elastic(ElasticConfig(steps=0))
    with pytest.raises(ParameterError, match="max_restarts"):
        run_elastic(changes="join:2@5,preempt:2@10", max_restarts=0)


def steps_logged(run) -> list[int]:
    return sorted({step for _, step, _ in run.timeline()})


def test_the_horizon_holds_a_short_round_and_a_group_at_the_next_change():
    late = Horizon(step=45, world=3, since=100.0)
    assert late.hold_reason(10, 2, formed_at=50.0) is None  # the old group trains on ...
    assert late.hold_reason(45, 2, formed_at=50.0) == "horizon"  # ... up to the next change
    assert late.hold_reason(10, 2, formed_at=150.0) == "short"  # formed without the new node
    assert late.hold_reason(10, 3, formed_at=150.0) is None
    assert Horizon().hold_reason(10**6, 1, formed_at=0.0) is None  # no scheduler: no limit


def test_changes_that_could_not_apply_say_why(tmp_path):
    plan = parse_changes("join:2@5,preempt:2@80")
    scheduler = _Scheduler(tmp_path, plan, steps=50, nproc_per_node=1, start_nodes=2)
    outcomes = scheduler.explain(finished=True)
    assert [o.applied for o in outcomes] == [False, False]
    assert "before the change before it took effect" in outcomes[0].why_not
    assert "never reached step 80" in outcomes[1].why_not


@pytest.fixture(scope="module")
def lesson(tmp_path_factory) -> Path:
    """Lesson 12 at smoke size, through papermill: its elastic job (a node joins, then gets a
    preemption notice), its elections and its collective under a cut are the suite's one run
    of each (tests/test_notebooks.py leaves the notebook to this module); the results folder."""
    out = tmp_path_factory.mktemp("nb12")
    result = run_course(NOTEBOOKS, out=out, smoke=True, only=["12_orchestration"],
                        progress=False)
    [outcome] = result.results
    assert outcome.ok, f"12_orchestration failed: {outcome.error}"
    return out


@pytest.fixture(scope="module")
def notebook_run(lesson) -> tuple[ElasticConfig, ElasticRun]:
    saved = json.loads((lesson / "elastic_main.json").read_text())
    return ElasticConfig.from_json(saved["config"]), ElasticRun.from_dict(saved["run"])


@pytest.fixture(scope="module")
def split_brain(lesson) -> dict:
    """The lesson's election and collective runs, skipped with its reason where it had none."""
    saved = json.loads((lesson / "orchestration.json").read_text())
    if saved["partition_skipped"]:
        pytest.skip(f"lesson 12 skipped its split-brain experiments: {saved['partition_skipped']}")
    return saved


@pytest.mark.slow
def test_scale_up_then_a_preemption_notice_loses_no_step(notebook_run):
    cfg, run = notebook_run
    join, notice = parse_changes(",".join(run.changes))
    assert (join.action, notice.action, notice.node) == ("join", "preempt", join.node)
    assert run.ok, run.to_dict()
    assert run.worlds == [2, 3, 2]
    assert run.unapplied == [] and [o.at_step for o in run.outcomes] == [join.at_step, notice.at_step]
    assert run.lost_steps == 0  # a join and a notice both checkpoint at the same step
    assert [s.from_step for s in run.segments[1:]] == [s.to_step for s in run.segments[:-1]]
    assert all(s.to_step <= notice.at_step for s in run.segments[:2])  # nobody ran past the notice
    assert steps_logged(run) == list(range(1, cfg.steps + 1))
    assert [e.action for e in run.events] == ["start", "start", "start", "terminate"]
    for row in run.change_rows():  # a hold is part of its change's stall
        assert row.stall_s is not None and 0 <= row.held_s <= row.stall_s, row
    # The global batch is fixed, so the world size does not change the math: the same
    # trajectory as one process that trained every step, up to float summation order.
    assert run.final["final_loss"] == pytest.approx(reference_loss(cfg), rel=1e-4)
    assert elastic_processes() == []


@pytest.mark.slow
def test_a_run_survives_its_json(notebook_run):
    _, run = notebook_run
    again = ElasticRun.from_dict(json.loads(json.dumps(run.to_dict(records=True))))
    assert again.to_dict(records=True) == run.to_dict(records=True)
    assert again.timeline() == run.timeline() and again.change_rows() == run.change_rows()
    with pytest.raises(ValueError, match="records"):
        ElasticRun.from_dict(run.to_dict())


@pytest.mark.slow
def test_a_killed_node_costs_the_steps_since_the_last_checkpoint(tmp_path, monkeypatch):
    (tmp_path / "hook").mkdir()
    (tmp_path / "hook" / "sitecustomize.py").write_text(LATE_NODE_HOOK)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        filter(None, [str(tmp_path / "hook"), os.environ.get("PYTHONPATH")])))
    cfg = ElasticConfig(ckpt_dir=str(tmp_path / "ckpt"), steps=40, work_s=0.1,
                        checkpoint_every_updates=10)
    monkeypatch.setenv("LABKIT_TEST_PROGRESS_LOG", str(tmp_path / "ckpt" / "progress.jsonl"))
    run = run_elastic(cfg, min_nodes=1, max_nodes=2, start_nodes=2, changes="kill:1@15")
    assert run.ok, (run.to_dict(), run.output[-80:])
    # Node 1 missed the first round: that group held untrained until it was re-formed with it.
    [short] = [h for h in run.holds if h.reason == "short"]
    assert (short.world, short.expected_world, short.step, short.ended) == (1, 2, 0, "notice")
    assert run.worlds == [2, 1]
    first, second = run.segments
    assert (first.from_step, run.outcomes[0].at_step) == (0, 15)  # the kill came at its step
    assert second.from_step == 10 and second.lost_steps == first.to_step - 10 == 5
    assert steps_logged(run) == list(range(1, 41))
    assert elastic_processes() == []


# --- split brain: lesson 12's elections and collective under a cut -----------------------------
@pytest.mark.slow
@pytest.mark.parametrize("nodes,rule", [(3, "naive"), (3, "quorum"), (2, "naive"),
                                        (2, "quorum")])
def test_election_under_a_partition(split_brain, nodes, rule):
    [result] = [ElectionResult.from_dict(e) for e in split_brain["election_runs"]
                if (e["nodes"], e["rule"]) == (nodes, rule)]
    print(format_election(result))
    cut_node = result.cut_node
    assert cut_node == nodes - 1
    healthy, during, healed = (result.phase(n) for n in ("healthy", "cut", "healed"))
    everyone = list(range(nodes))

    # Every node noticed the cut, and the heal (each phase waits for that).
    assert all(d is not None and d >= 0 for d in result.detect_s.values()), result.detect_s
    assert all(r is not None and r >= 0 for r in result.rejoin_s.values()), result.rejoin_s
    # What holds however busy the machine: the cut node, alone, crowns itself under the naive
    # rule (two leaders) and stops under the quorum rule; 2 nodes under quorum: nobody works.
    if rule == "naive":
        assert during.split_brain and {0, cut_node} <= set(during.leaders_at_end)
        assert cut_node in during.working_at_end  # both sides carry on: diverging work
    else:
        assert cut_node not in during.leaders + during.working_at_end
        if nodes == 2:
            assert during.leaders_at_end == [] and during.working_at_end == []
    # The rest needs every member's ticks on time: a peer drops a member that is late by more
    # than the liveness window allows, network or not. The members measure their lateness, and
    # a phase they flag busy would test this machine's scheduler, not the rule.
    busy = result.busy_phases
    if "healthy" not in busy:
        assert healthy.leaders == [0] and not healthy.split_brain
        assert healthy.working_throughout == everyone
    if "healed" not in busy:
        assert healed.leaders_at_end == [0] and healed.working_at_end == everyone
    if "cut" not in busy:
        if rule == "naive":
            assert during.leaders_at_end == [0, cut_node] and during.working_at_end == everyone
        elif nodes == 3:  # the majority side keeps one leader and keeps working
            assert during.max_simultaneous_leaders == 1 and during.leaders == [0]
            assert during.working_throughout == [0, 1] and during.working_at_end == [0, 1]


@pytest.mark.slow
def test_collective_under_a_partition_fails_on_every_rank(split_brain):
    assert split_brain["collective"], "the lesson's gloo job never got to the cut"
    result = CollectiveResult.from_dict(split_brain["collective"])
    print(format_collective(result))
    timeout_s = result.timeout_s
    assert (result.nodes, result.cut_node) == (3, 2)
    assert not result.launch_timed_out
    assert sorted(r.node for r in result.ranks) == [0, 1, 2]
    # No rank completes an all_reduce after the cut, and none errors early (TCP does not notice
    # a pulled cable): every rank, majority side included, fails at the collective timeout.
    assert result.all_failed, "\n".join(result.output_tail)
    assert not result.ended_by_limit
    timed_out = f"Timed out waiting {timeout_s * 1000:.0f}ms"
    # The failing all_reduce began after each rank's last good one, so no rank can have timed
    # out (nor heard that a peer did) before the earliest of those plus the timeout.
    earliest_start = min(r.last_ok_s for r in result.ranks)
    for r in result.ranks:
        assert r.iterations >= WARMUP_ITERATIONS and r.iterations_after_cut <= 1
        assert r.failed_after_s >= earliest_start + timeout_s - 0.01, r
        # A majority-side rank may hear first that a peer on its side gave up (the peer's
        # timeout closes its connections): "Connection closed by peer", a few ms earlier.
        assert timed_out in r.error or "Connection closed by peer" in r.error, r
    cut_rank = next(r for r in result.ranks if r.node == 2)
    assert timed_out in cut_rank.error  # nothing reaches it: it can only time out
    assert result.healed_after_s is not None  # healed once all had failed
    assert all(code not in (0, None) for code in result.node_returncodes)


@pytest.mark.slow
def test_the_split_brain_experiments_leave_no_namespace_and_no_process(split_brain):
    """Nothing of the lesson's experiments is left: no namespace of a process that has ended
    (the kernel that built them), no election member, no rank."""
    assert netlab.stale_namespaces() == []
    assert session_processes(lambda cmdline: "labkit.orchestration.election_member" in cmdline
                             or "partition_rank.py" in cmdline) == []
