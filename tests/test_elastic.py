"""Elastic membership through real torchrun agents: scale up, a preemption notice, a kill."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.elastic import ElasticConfig, NodeChange, check_plan, parse_changes, run_elastic
from labkit.errors import ParameterError


def elastic_processes() -> list[str]:
    """Live processes running the elastic rank script (none may outlive a run)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "elastic_rank.py" in text:
            found.append(f"{cmdline.parent.name}: {text}")
    return found


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


def test_scale_up_then_a_preemption_notice_loses_no_step():
    cfg = ElasticConfig(steps=50, work_s=0.1, checkpoint_every_updates=10)
    run = run_elastic(cfg, min_nodes=2, max_nodes=3, changes="join:2@5,preempt:2@25",
                      timeout_s=240)
    assert run.ok, (run.to_dict(), run.output[-80:])
    assert run.worlds == [2, 3, 2]
    assert run.lost_steps == 0  # a join and a notice both checkpoint at the same step
    assert [s.from_step for s in run.segments[1:]] == [s.to_step for s in run.segments[:-1]]
    assert steps_logged(run) == list(range(1, 51))
    assert [e.action for e in run.events][:4] == ["start", "start", "start", "terminate"]
    # The global batch is fixed, so the world size does not change the math: the same
    # trajectory as a run that never changed size, up to float summation order.
    still = run_elastic(cfg, min_nodes=2, max_nodes=2, timeout_s=240)
    assert still.ok and still.worlds == [2]
    assert run.final["final_loss"] == pytest.approx(still.final["final_loss"], rel=1e-4)
    assert elastic_processes() == []


def test_a_killed_node_costs_the_steps_since_the_last_checkpoint():
    cfg = ElasticConfig(steps=40, work_s=0.1, checkpoint_every_updates=10)
    run = run_elastic(cfg, min_nodes=1, max_nodes=2, start_nodes=2, changes="kill:1@15",
                      timeout_s=240)
    assert run.ok, (run.to_dict(), run.output[-80:])
    assert run.worlds == [2, 1]
    first, second = run.segments
    assert second.from_step % 10 == 0 and second.from_step <= first.to_step
    assert second.lost_steps == first.to_step - second.from_step
    assert 0 < second.lost_steps <= 10
    assert steps_logged(run) == list(range(1, 41))
    assert elastic_processes() == []
