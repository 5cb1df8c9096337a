"""Split brain on real processes: leader election and gloo collectives with one node cut off.

The rules and the phase sweep are checked on made-up samples anywhere; the experiments need
root and iproute2 (a lab network) and are skipped with ``netlab.available()``'s reason
otherwise. Every experiment test checks that no namespace of this process and no process of
the experiment (member, rank, torchrun agent) is left.

No wall-clock thresholds: the phases wait for the members to notice, and what a busy machine can
do to a liveness window (a member's tick late by more than ``ALIVE_S - INTERVAL_S`` drops it,
network or not) is measured by the members and checked against, not allowed for with slack.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from process_helpers import session_processes

from labkit.errors import ParameterError
from labkit.orchestration import (
    WARMUP_ITERATIONS,
    ElectionSample,
    collective_partition,
    cut,
    decide,
    election,
    election_experiment,
    format_collective,
    heal,
    majority,
    network_cut,
    summarize_phase,
)
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
        lambda cmdline: "labkit.orchestration.partition member" in cmdline
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


@pytest.mark.slow
@needs_lab
@pytest.mark.parametrize("nodes,rule", [(3, "naive"), (3, "quorum"), (2, "naive"),
                                        (2, "quorum")])
def test_election_under_a_partition(nodes, rule, leaves_nothing):
    cut_node = nodes - 1
    result = election_experiment(nodes, rule, cut_node)
    print(election.format_election(result))
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
@needs_lab
def test_collective_under_a_partition_fails_on_every_rank(leaves_nothing):
    timeout_s = 3.0
    result = collective_partition(nodes=3, cut_node=2, timeout_s=timeout_s)
    print(format_collective(result))
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
