"""Elastic membership through real torchrun agents: scale up, a preemption notice, a kill.

The outcome of a plan may not depend on the machine's speed: the group never runs past a change
the scheduler has not carried out, nor finishes while one is in flight, and a rendezvous round
that closed without a started node is re-formed with it. So the world sizes are asserted
exactly, on any machine.
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
def notebook_run(tmp_path_factory) -> tuple[ElasticConfig, ElasticRun]:
    """Lesson 12 at smoke size, through papermill: its elastic job (a node joins, then gets a
    preemption notice) is the suite's one run of that plan (tests/test_notebooks.py leaves the
    notebook to this module); read back from the results it saved."""
    out = tmp_path_factory.mktemp("nb12")
    result = run_course(NOTEBOOKS, out=out, smoke=True, only=["12_orchestration"],
                        progress=False)
    [outcome] = result.results
    assert outcome.ok, f"12_orchestration failed: {outcome.error}"
    saved = json.loads((out / "elastic_main.json").read_text())
    return ElasticConfig.from_json(saved["config"]), ElasticRun.from_dict(saved["run"])


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
