"""Leader election under a network partition: why "test with 3 nodes: 2 hide split-brain problems".

:func:`election_experiment` starts one small member process per simulated node
(``election_member``); each heartbeats the others over UDP and decides, every tick, whether it
is the leader. Rule ``"naive"`` (a common home-grown orchestrator rule): "I lead if I am the
lowest-numbered node I can see". Rule ``"quorum"``: the same, but only while I see a strict
majority of the configured nodes, else I step down and stop work. With 3 nodes, the naive rule
gives two leaders when one node is cut off (split brain); the quorum rule keeps the majority side
working with one leader and stops the cut node. With 2 nodes there is no majority side: naive
gives split brain, quorum stops everyone. A 2-node test can therefore never show that a quorum
rule keeps a cluster working. The experiment heals, ends its processes and closes its lab in
``finally``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from labkit.errors import ParameterError
from labkit.orchestration.network_cut import PartitionError, cut, heal, heal_quietly, require_lab
from labkit.runtime.netlab import NetLab

HEARTBEAT_PORT = 7946  # UDP, on each node's own lab address (namespaces keep labs apart)

INTERVAL_S = 0.1  # a member's tick: send heartbeats, decide, record

ALIVE_S = 0.5  # a peer heard from within this is "visible"

STARTUP_LIMIT_S = 30.0  # members must start and see each other within this

PHASE_LIMIT_S = 30.0  # every member must notice a cut, or the heal, within this (takes ~ALIVE_S)

RULES = ("naive", "quorum")


# --- the member: heartbeats and a leader rule ----------------------------------------------
def majority(nodes: int) -> int:
    """Strict majority of ``nodes``: 2 of 3, 2 of 2, 3 of 4, 3 of 5."""
    return nodes // 2 + 1


def decide(node: int, visible: set[int], nodes: int, rule: str) -> tuple[bool, bool]:
    """(leader, working) of ``node`` that currently sees ``visible`` (itself included).

    naive: leader if lowest visible; it never knows to stop, so it always works.
    quorum: leader if lowest visible and a strict majority is visible; works only while it
    sees a majority (a minority node steps down and stops)."""
    if rule == "naive":
        return node == min(visible), True
    if rule == "quorum":
        quorum = len(visible) >= majority(nodes)
        return quorum and node == min(visible), quorum
    raise ParameterError(f"unknown rule {rule!r}; one of {RULES}")


# --- the election experiment ----------------------------------------------------------------
@dataclass(frozen=True)
class ElectionSample:
    """One member's decision at one tick; ``t`` in seconds since the healthy phase began."""

    t: float
    node: int
    leader: bool
    working: bool
    visible: list[int]
    late: float = 0.0  # how late the member's tick ran (a busy machine)


@dataclass(frozen=True)
class Phase:
    """What the members did during one phase (healthy, cut, healed).

    ``leaders``: every node that claimed leadership at some tick of the phase;
    ``leaders_at_end``/``working_at_end``: each node's last decision in the phase (the settled
    state); ``working_throughout``: nodes that worked at every tick of it. ``split_brain``: two
    or more nodes held leadership at the same time, for ``split_brain_s`` seconds in all.
    ``max_late_s``: the latest any member's tick ran in the phase (machine load)."""

    name: str
    start_s: float
    end_s: float
    leaders: list[int]
    leaders_at_end: list[int]
    max_simultaneous_leaders: int
    split_brain: bool
    split_brain_s: float
    working_at_end: list[int]
    working_throughout: list[int]
    max_late_s: float = 0.0


@dataclass
class ElectionResult:
    """One election run. ``detect_s[node]``: from the cut to that node's first tick that saw the
    partition (a peer missing); ``rejoin_s[node]``: from the heal to its first tick that saw every
    node again; None when it never did. Times are the members' own, relative to the start of the
    healthy phase (``cut_at_s``, ``heal_at_s``). ``busy_phases``: phases in which a member's
    tick ran ``alive_s - interval_s`` late or more, so a peer could drop it with no network
    problem at all (a machine too busy for the liveness window, not a partition)."""

    nodes: int
    rule: str
    cut_node: int
    cut_at_s: float
    heal_at_s: float
    end_s: float
    phases: list[Phase]
    detect_s: dict[int, float | None]
    rejoin_s: dict[int, float | None]
    samples: list[ElectionSample] = field(repr=False, default_factory=list)
    interval_s: float = INTERVAL_S
    alive_s: float = ALIVE_S

    @property
    def busy_phases(self) -> list[str]:
        window = self.alive_s - self.interval_s
        return [p.name for p in self.phases if p.max_late_s >= window]

    def phase(self, name: str) -> Phase:
        return next(p for p in self.phases if p.name == name)

    @property
    def split_brain(self) -> bool:
        """Two leaders at once in any phase."""
        return any(p.split_brain for p in self.phases)

    @property
    def detected_within_s(self) -> float | None:
        """When every node had noticed the cut (the slowest node's ``detect_s``)."""
        times = list(self.detect_s.values())
        return None if None in times else max(times)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "split_brain": self.split_brain,
                "detected_within_s": self.detected_within_s, "busy_phases": self.busy_phases}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ElectionResult:
        """The result ``to_dict`` wrote, read back (JSON turns the nodes' keys into strings)."""
        names = {f.name for f in fields(cls)}
        kept = {k: v for k, v in data.items() if k in names}
        return cls(**{
            **kept,
            "phases": [Phase(**p) for p in data["phases"]],
            "samples": [ElectionSample(**s) for s in data.get("samples", [])],
            "detect_s": {int(k): v for k, v in data["detect_s"].items()},
            "rejoin_s": {int(k): v for k, v in data["rejoin_s"].items()},
        })


def _read_samples(paths: list[Path]) -> list[dict]:
    rows = []
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue  # a line cut short by the end of the member
    return sorted(rows, key=lambda r: r["t"])


def _settled(rows: list[dict], nodes: int) -> bool:
    """Every member's latest tick sees every node, and exactly one of them leads."""
    last = {r["node"]: r for r in rows}
    return (len(last) == nodes and all(len(r["visible"]) == nodes for r in last.values())
            and sum(r["leader"] for r in last.values()) == 1)


def _seen_by_all(rows: list[dict], nodes: int, since: float, sees) -> bool:  # noqa: ANN001
    """Every member has ticked since ``since`` (wall clock) and its latest tick ``sees(node,
    visible)``: the cut noticed on both sides, or every node visible again after the heal."""
    last = {r["node"]: r for r in rows if r["t"] >= since}
    return len(last) == nodes and all(sees(n, set(r["visible"])) for n, r in last.items())


def _wait_for(outs: list[Path], nodes: int, since: float, sees, interval_s: float) -> None:  # noqa: ANN001
    """Until every member's latest tick agrees (:func:`_seen_by_all`), at most PHASE_LIMIT_S:
    a phase lasts as long as noticing takes on this machine, never less."""
    deadline = time.monotonic() + PHASE_LIMIT_S
    while not _seen_by_all(_read_samples(outs), nodes, since, sees):
        if time.monotonic() > deadline:
            return  # the result says who never noticed (detect_s / rejoin_s None)
        time.sleep(interval_s)


def summarize_phase(samples: list[ElectionSample], name: str, start: float, end: float,
                    nodes: int) -> Phase:
    """Sweep the merged ticks of every node over [start, end): a node holds its last decision
    until its next tick (its state at ``start`` is its last tick before it)."""
    state: dict[int, ElectionSample] = {}
    for s in samples:
        if s.t < start:
            state[s.node] = s
    inside = [s for s in samples if start <= s.t < end]
    max_late = max((s.late for s in inside), default=0.0)
    leaders = {s.node for s in inside if s.leader} | {n for n, s in state.items() if s.leader}
    worked_all = {n for n in range(nodes)
                  if all(s.working for s in inside if s.node == n)
                  and any(s.node == n for s in inside)
                  and (n not in state or state[n].working)}

    def leading() -> int:
        return sum(x.leader for x in state.values())

    max_leaders, overlap, t_prev = leading(), 0.0, start
    for s in inside:
        if leading() >= 2:
            overlap += s.t - t_prev
        state[s.node], t_prev = s, s.t
        max_leaders = max(max_leaders, leading())
    if leading() >= 2:
        overlap += end - t_prev
    return Phase(
        name=name, start_s=round(start, 3), end_s=round(end, 3), leaders=sorted(leaders),
        leaders_at_end=sorted(n for n, s in state.items() if s.leader),
        max_simultaneous_leaders=max_leaders, split_brain=max_leaders >= 2,
        split_brain_s=round(overlap, 3),
        working_at_end=sorted(n for n, s in state.items() if s.working),
        working_throughout=sorted(worked_all), max_late_s=round(max_late, 3))


def _first_after(samples: list[ElectionSample], node: int, after: float, pred) -> float | None:  # noqa: ANN001
    for s in samples:
        if s.node == node and s.t >= after and pred(s):
            return round(s.t - after, 3)
    return None


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM each member's process group, SIGKILL what is left, reap them all."""
    for proc in procs:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    for proc in procs:
        try:
            proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


def election_experiment(nodes: int, rule: str, cut_node: int, healthy_s: float = 1.0,
                        cut_s: float = 1.5, healed_s: float = 0.5,
                        interval_s: float = INTERVAL_S, alive_s: float = ALIVE_S) -> ElectionResult:
    """Run one member per node in its own namespace, let them settle on one leader, then:
    ``healthy_s`` healthy; cut ``cut_node`` and keep it cut until every member noticed (both
    sides lost each other), then ``cut_s`` more; heal, and once every member sees every node
    again ``healed_s`` more. Returns who led and who worked in each phase, whether two leaders
    overlapped, and how fast each node noticed the cut and the heal. Waiting for the members
    instead of a fixed time keeps the phases meaningful on a slow machine."""
    if rule not in RULES:
        raise ParameterError(f"unknown rule {rule!r}; one of {RULES}")
    if nodes < 2 or not 0 <= cut_node < nodes:
        raise ParameterError(f"need nodes >= 2 and 0 <= cut_node < nodes, got {nodes}, {cut_node}")
    require_lab()
    with ExitStack() as cleanup:  # runs every step, in reverse order, even when one fails
        folder = Path(tempfile.mkdtemp(prefix="labkit-election-"))
        cleanup.callback(shutil.rmtree, folder, ignore_errors=True)
        lab = NetLab(nodes)
        cleanup.callback(lab.close)
        procs: list[subprocess.Popen] = []
        cleanup.callback(_stop, procs)
        cleanup.callback(heal_quietly, lab, cut_node)  # a no-op unless still cut
        addresses = [lab.address(n) for n in range(nodes)]
        outs = [folder / f"node{n}.jsonl" for n in range(nodes)]
        lifetime = STARTUP_LIMIT_S + 2 * PHASE_LIMIT_S + healthy_s + cut_s + healed_s + 10
        for n in range(nodes):
            cmd = [*lab.command_prefix(n), sys.executable, "-m", "labkit.orchestration.election_member",
                   "--node", str(n), "--addresses", ",".join(addresses), "--rule", rule,
                   "--out", str(outs[n]), "--lifetime", str(lifetime),
                   "--interval", str(interval_s), "--alive", str(alive_s)]
            procs.append(subprocess.Popen(cmd, start_new_session=True, stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + STARTUP_LIMIT_S
        while not _settled(_read_samples(outs), nodes):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                codes = [p.poll() for p in procs]
                raise PartitionError("the members did not settle on one leader within "
                                     f"{STARTUP_LIMIT_S:g} s (exit codes {codes}); run "
                                     "`python -m labkit.orchestration.election_member --help` to check one")
            time.sleep(interval_s)
        t0 = time.time()
        time.sleep(healthy_s)
        cut_at = time.time()
        cut(lab, cut_node)
        _wait_for(outs, nodes, cut_at, lambda n, seen: (seen == {n}) if n == cut_node
                  else cut_node not in seen, interval_s)
        time.sleep(cut_s)
        heal_at = time.time()
        heal(lab, cut_node)
        _wait_for(outs, nodes, heal_at, lambda n, seen: len(seen) == nodes, interval_s)
        time.sleep(healed_s)
        end = time.time()
        _stop(procs)
        rows = _read_samples(outs)
    samples = [ElectionSample(round(r["t"] - t0, 3), r["node"], r["leader"], r["working"], r["visible"],
                      r.get("late", 0.0)) for r in rows if r["t"] <= end]
    cut_rel, heal_rel, end_rel = cut_at - t0, heal_at - t0, end - t0
    phases = [summarize_phase(samples, name, a, b, nodes) for name, a, b in (
        ("healthy", 0.0, cut_rel), ("cut", cut_rel, heal_rel), ("healed", heal_rel, end_rel))]
    return ElectionResult(
        nodes=nodes, rule=rule, cut_node=cut_node, cut_at_s=round(cut_rel, 3),
        heal_at_s=round(heal_rel, 3), end_s=round(end_rel, 3), phases=phases,
        detect_s={n: _first_after(samples, n, cut_rel, lambda s: len(s.visible) < nodes)
                  for n in range(nodes)},
        rejoin_s={n: _first_after(samples, n, heal_rel, lambda s: len(s.visible) == nodes)
                  for n in range(nodes)},
        samples=[s for s in samples if s.t >= 0], interval_s=interval_s, alive_s=alive_s)


def format_election(result: ElectionResult) -> str:
    """A few lines for a terminal or a notebook cell."""
    lines = [f"{result.nodes} nodes, rule {result.rule}, node {result.cut_node} cut off at "
             f"{result.cut_at_s:.2f} s, healed at {result.heal_at_s:.2f} s"]
    for p in result.phases:
        brain = f"SPLIT BRAIN ({p.split_brain_s:.2f} s with 2+ leaders)" if p.split_brain \
            else "one leader at a time"
        lines.append(f"  {p.name:<8} leaders {p.leaders} (at end {p.leaders_at_end}), {brain}; "
                     f"working at end {p.working_at_end}")
    detect = ", ".join(f"node {n}: {'-' if s is None else f'{s:.2f} s'}"
                       for n, s in result.detect_s.items())
    rejoin = ", ".join(f"node {n}: {'-' if s is None else f'{s:.2f} s'}"
                       for n, s in result.rejoin_s.items())
    lines.append(f"  cut noticed after: {detect}")
    lines.append(f"  all nodes seen again after the heal: {rejoin}")
    for p in result.phases:
        if p.name in result.busy_phases:
            lines.append(f"  {p.name}: a member's tick ran {p.max_late_s:.2f} s late (a busy "
                         f"machine), more than the {result.alive_s - result.interval_s:.2f} s a "
                         "peer allows before it drops it: read that phase with care")
    return "\n".join(lines)
