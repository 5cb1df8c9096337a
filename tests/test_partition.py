"""Split brain on real processes: leader election and gloo collectives with one node cut off.

The rules and the phase sweep are checked on made-up samples anywhere; the cut itself and an
experiment that fails midway need root and iproute2 (a lab network) and are skipped with
``netlab.available()``'s reason otherwise, and check that no namespace of this process and no
process of the experiment (member, rank, torchrun agent) is left. The elections and the
collective under a cut are lesson 12's own runs, asserted in tests/test_elastic.py.

No wall-clock thresholds: the phases wait for the members to notice, and what a busy machine can
do to a liveness window (a member's tick late by more than ``ALIVE_S - INTERVAL_S`` drops it,
network or not) is measured by the members and checked against, not allowed for with slack.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from process_helpers import session_processes

from labkit.errors import ParameterError
from labkit.orchestration import (
    ElectionSample,
    collective_partition,
    cut,
    decide,
    election,
    election_experiment,
    heal,
    majority,
    network_cut,
    summarize_phase,
)
from labkit.orchestration.election import ElectionResult
from labkit.orchestration.partition import CollectiveResult, RankOutcome
from labkit.runtime import netlab
from labkit.runtime.netlab import PREFIX, NetLab, NetLabError

OK, WHY = netlab.available()
needs_lab = pytest.mark.skipif(not OK, reason=f"no lab network here: {WHY}")


def netns() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def experiment_processes() -> list[str]:
    """Children of this process (zombies too) and any member or rank process of this session
    still running."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid():
            found.append(f"{entry.name}: {cmdline.strip()}")
    return found + [p for p in session_processes(
        lambda cmdline: "labkit.orchestration.election_member" in cmdline
        or "partition_rank.py" in cmdline) if p not in found]


@pytest.fixture
def leaves_nothing():
    yield
    assert [n for n in netns() if n.startswith(f"{PREFIX}{os.getpid()}x")] == []
    assert experiment_processes() == []


# --- the rules and the sweep, no network needed ---------------------------------------------
def test_majority_and_rules():
    assert [majority(n) for n in (1, 2, 3, 4, 5)] == [1, 2, 2, 3, 3]
    assert decide(0, {0, 1, 2}, 3, "naive") == (True, True)
    assert decide(2, {2}, 3, "naive") == (True, True)  # alone, and still sure it leads
    assert decide(1, {0, 1}, 3, "naive") == (False, True)
    assert decide(0, {0, 1}, 3, "quorum") == (True, True)
    assert decide(1, {0, 1}, 3, "quorum") == (False, True)
    assert decide(2, {2}, 3, "quorum") == (False, False)  # minority: steps down, stops
    assert decide(0, {0}, 2, "quorum") == (False, False)  # 1 of 2 is no majority
    with pytest.raises(ParameterError, match="rule"):
        decide(0, {0}, 2, "bully")


def test_phase_sweep_measures_overlapping_leadership():
    def s(t: float, node: int, leader: bool, working: bool = True) -> ElectionSample:
        return ElectionSample(t, node, leader, working, [node])

    samples = [s(-0.1, 0, True), s(-0.1, 1, False),  # before the phase: carried in
               s(0.2, 1, True), s(0.5, 0, False), s(0.6, 1, True, working=False)]
    phase = summarize_phase(samples, "cut", 0.0, 1.0, 2)
    assert phase.leaders == [0, 1] and phase.leaders_at_end == [1]
    assert phase.split_brain and phase.max_simultaneous_leaders == 2
    assert phase.split_brain_s == pytest.approx(0.3)  # 0.2 .. 0.5
    assert phase.working_at_end == [0] and phase.working_throughout == [0]
    calm = summarize_phase(samples, "later", 0.55, 1.0, 2)
    assert not calm.split_brain and calm.leaders == [1]


def test_results_read_back_from_their_json():
    samples = [ElectionSample(0.1, 0, True, True, [0, 1]), ElectionSample(0.2, 1, False, True, [0])]
    phases = [summarize_phase(samples, name, start, start + 1.0, 2)
              for name, start in (("healthy", 0.0), ("cut", 1.0), ("healed", 2.0))]
    election = ElectionResult(2, "quorum", 1, 1.0, 2.0, 3.0, phases, {0: 0.4, 1: None},
                              {0: 0.2, 1: 0.3}, samples)
    again = ElectionResult.from_dict(json.loads(json.dumps(election.to_dict())))
    assert again == election and again.busy_phases == election.busy_phases
    rank = RankOutcome(0, 0, "10.0.0.1", 5, 0, None, "RuntimeError: Timed out", 3.0, -0.2)
    collective = CollectiveResult(3, 2, 3.0, 5.8, 3.1, 4.0, [rank], 9.0, False, [1, 1, 1],
                                  ["a line"], False, 60.0)
    assert CollectiveResult.from_dict(json.loads(json.dumps(collective.to_dict()))) == collective


def test_experiments_need_a_lab_network(monkeypatch):
    monkeypatch.setattr(network_cut, "available", lambda: (False, "needs root, says the test"))
    with pytest.raises(NetLabError, match="says the test"):
        election_experiment(3, "naive", 2)
    with pytest.raises(NetLabError, match="says the test"):
        collective_partition()


# --- real processes in network namespaces --------------------------------------------------
@pytest.mark.slow
@needs_lab
def test_cut_and_heal_unplug_a_node(leaves_nothing):
    with NetLab(3) as lab:
        cut(lab, 2)
        assert not lab.ping(0, 2, timeout_s=1) and not lab.ping(2, 1, timeout_s=1)
        assert lab.ping(0, 1)  # the others still reach each other
        heal(lab, 2)
        # The first connection after the heal can be lost while the neighbour (ARP) entries
        # that failed during the cut are resolved again: retry for a few seconds.
        deadline = time.monotonic() + 10
        while not lab.ping(0, 2, timeout_s=1):
            assert time.monotonic() < deadline, "node 2 unreachable 10 s after the heal"
        assert lab.ping(2, 1)
        with pytest.raises(NetLabError):
            cut(lab, 3)


@pytest.mark.slow
@needs_lab
def test_an_error_mid_experiment_still_heals_and_cleans_up(monkeypatch, leaves_nothing):
    real_cut = election.cut

    def cut_then_fail(lab: NetLab, node: int) -> None:
        real_cut(lab, node)
        raise RuntimeError("boom")

    monkeypatch.setattr(election, "cut", cut_then_fail)
    with pytest.raises(RuntimeError, match="boom"):
        election_experiment(3, "naive", 2)
