"""Split brain, for real: cut one simulated node off the network and watch what the rest do.

The orchestration lesson says "test with 3 nodes: 2 hide split-brain problems". These
experiments show why, on real processes in :mod:`labkit.runtime.netlab` namespaces, with the network
really cut (the node's port on the lab's switch set down, as when a cable or a top-of-rack
port fails):

* :func:`election_experiment`: one small member process per node heartbeats the others over UDP
  and decides, every tick, whether it is the leader. Rule ``"naive"`` (a common home-grown
  orchestrator rule): "I lead if I am the lowest-numbered node I can see". Rule ``"quorum"``:
  the same, but only while I see a strict majority of the configured nodes, else I step down
  and stop work. With 3 nodes, the naive rule gives two leaders when one node is cut off
  (split brain); the quorum rule keeps the majority side working with one leader and stops the
  cut node. With 2 nodes there is no majority side: naive gives split brain, quorum stops
  everyone. A 2-node test can therefore never show that a quorum rule keeps a cluster working.
* :func:`collective_partition`: a real gloo job, one rank per node, all_reduces in a loop while
  one node is cut. Collectives have no majority semantics of their own: every rank, on both
  sides of the cut, blocks until the collective timeout and fails; the job stops.

:func:`cut` and :func:`heal` set a node's switch-side link down and up. Every experiment heals,
ends its processes and closes its lab in ``finally``. Needs what :mod:`labkit.runtime.netlab` needs
(Linux, root, iproute2); without it the experiments raise :class:`NetLabError` with the reason.

``python -m labkit.orchestration.partition member ...`` is the member process (started by the experiment);
``python -m labkit.orchestration.partition election|collective ...`` runs an experiment and prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from labkit.errors import LabkitError
from labkit.runtime.netlab import NetLab, NetLabError, available
from labkit.runtime.rank_script import rank_script

HEARTBEAT_PORT = 7946  # UDP, on each node's own lab address (namespaces keep labs apart)
INTERVAL_S = 0.1  # a member's tick: send heartbeats, decide, record
ALIVE_S = 0.5  # a peer heard from within this is "visible"
STARTUP_LIMIT_S = 30.0  # members must start and see each other within this
PHASE_LIMIT_S = 30.0  # every member must notice a cut, or the heal, within this (takes ~ALIVE_S)
RULES = ("naive", "quorum")
RANK_SCRIPT = rank_script(__name__)
WARMUP_ITERATIONS = 5  # all_reduces every rank completes before the cut
ITERATION_PAUSE_S = 0.05  # between all_reduces: a few tens per second are plenty here
AFTER_CUT_SLACK_S = 20.0  # past 3 collective timeouts after the cut: the job is ended


class PartitionError(LabkitError):
    """A partition experiment could not run (a member did not start, the job never got going)."""


# --- cutting and healing ------------------------------------------------------------------
def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise NetLabError(f"`ip {' '.join(args)}` failed: {proc.stderr.strip() or proc.returncode}")


def _require_lab() -> None:
    ok, why = available()
    if not ok:
        raise NetLabError(why)


def cut(lab: NetLab, node: int) -> None:
    """Unplug ``node``: set its veth end on the lab's switch (bridge) down. The node's own
    interface stays configured but loses its carrier; nothing reaches or leaves it."""
    lab.address(node)  # checks the node number
    _ip("-n", lab.switch, "link", "set", lab.interfaces[node].peer, "down")


def heal(lab: NetLab, node: int) -> None:
    """Plug ``node`` back in (the switch-side port up again); undoes :func:`cut`. The first
    packets after it can still be lost while neighbour (ARP) entries that failed during the
    cut are resolved again: allow a second or so before a new connection gets through."""
    lab.address(node)
    _ip("-n", lab.switch, "link", "set", lab.interfaces[node].peer, "up")


def _heal_quietly(lab: NetLab, node: int) -> None:
    """Heal in a ``finally``: a failure here must not hide the experiment's own error."""
    try:
        heal(lab, node)
    except NetLabError:
        pass  # the lab is being closed anyway


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
    raise ValueError(f"unknown rule {rule!r}; one of {RULES}")


def run_member(node: int, addresses: list[str], rule: str, out: Path, lifetime_s: float,
               port: int = HEARTBEAT_PORT, interval_s: float = INTERVAL_S,
               alive_s: float = ALIVE_S) -> None:
    """The member loop (run inside node's namespace): every ``interval_s`` send a heartbeat to
    every peer, take in what arrived, decide by ``rule`` and append one JSON line to ``out``:
    ``{"t": wall time, "node", "leader", "working", "visible": [...]}``. Ends after
    ``lifetime_s`` (a safety net: the experiment ends it long before). ``"late"`` in each
    line: how late the tick ran on a busy machine (a peer drops a member whose ticks are late
    by more than ``alive_s - interval_s``, network or not)."""
    nodes = len(addresses)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((addresses[node], port))
    sock.setblocking(False)
    heard: dict[int, float] = {}
    message = json.dumps({"node": node}).encode()
    end = time.monotonic() + lifetime_s
    next_tick = time.monotonic()
    with out.open("a", buffering=1) as log:
        while time.monotonic() < end:
            for peer, address in enumerate(addresses):
                if peer != node:
                    try:
                        sock.sendto(message, (address, port))
                    except OSError:
                        pass  # cut off: no route, no carrier; the peer will miss us
            next_tick += interval_s
            while (wait := next_tick - time.monotonic()) > 0:
                ready, _, _ = select.select([sock], [], [], wait)
                while ready:
                    try:
                        data = sock.recv(512)
                    except BlockingIOError:
                        break
                    except OSError:
                        continue  # an ICMP error from an earlier send: ignore
                    try:
                        peer = int(json.loads(data)["node"])
                    except (ValueError, KeyError, TypeError):
                        continue
                    if 0 <= peer < nodes and peer != node:
                        heard[peer] = time.monotonic()
            now = time.monotonic()
            visible = {node} | {p for p, t in heard.items() if now - t <= alive_s}
            leader, working = decide(node, visible, nodes, rule)
            log.write(json.dumps({"t": time.time(), "node": node, "leader": leader,
                                  "working": working, "visible": sorted(visible),
                                  "late": round(max(0.0, now - next_tick), 4)}) + "\n")
            if next_tick < time.monotonic():  # fell behind (a busy machine): don't burst
                next_tick = time.monotonic()


# --- the election experiment ----------------------------------------------------------------
@dataclass(frozen=True)
class Sample:
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
    samples: list[Sample] = field(repr=False, default_factory=list)
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


def summarize_phase(samples: list[Sample], name: str, start: float, end: float,
                    nodes: int) -> Phase:
    """Sweep the merged ticks of every node over [start, end): a node holds its last decision
    until its next tick (its state at ``start`` is its last tick before it)."""
    state: dict[int, Sample] = {}
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


def _first_after(samples: list[Sample], node: int, after: float, pred) -> float | None:  # noqa: ANN001
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
        raise ValueError(f"unknown rule {rule!r}; one of {RULES}")
    if nodes < 2 or not 0 <= cut_node < nodes:
        raise ValueError(f"need nodes >= 2 and 0 <= cut_node < nodes, got {nodes}, {cut_node}")
    _require_lab()
    with ExitStack() as cleanup:  # runs every step, in reverse order, even when one fails
        folder = Path(tempfile.mkdtemp(prefix="labkit-election-"))
        cleanup.callback(shutil.rmtree, folder, ignore_errors=True)
        lab = NetLab(nodes)
        cleanup.callback(lab.close)
        procs: list[subprocess.Popen] = []
        cleanup.callback(_stop, procs)
        cleanup.callback(_heal_quietly, lab, cut_node)  # a no-op unless still cut
        addresses = [lab.address(n) for n in range(nodes)]
        outs = [folder / f"node{n}.jsonl" for n in range(nodes)]
        lifetime = STARTUP_LIMIT_S + 2 * PHASE_LIMIT_S + healthy_s + cut_s + healed_s + 10
        for n in range(nodes):
            cmd = [*lab.command_prefix(n), sys.executable, "-m", "labkit.orchestration.partition", "member",
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
                                     "`python -m labkit.orchestration.partition member --help` to check one")
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
    samples = [Sample(round(r["t"] - t0, 3), r["node"], r["leader"], r["working"], r["visible"],
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


# --- collectives under a partition -----------------------------------------------------------
@dataclass(frozen=True)
class RankOutcome:
    """One rank of the collective job: where it ran, what it completed around the cut, and how
    (and how long after the cut) it ended. ``error`` is the first line of its exception, None
    when it raised nothing (finished, or was ended by the launcher)."""

    rank: int
    node: int | None
    address: str
    iterations: int
    iterations_after_cut: int
    last_ok_after_cut_s: float | None
    error: str | None
    failed_after_s: float | None
    last_ok_s: float | None = None  # its last all_reduce that completed (negative: before the cut)


@dataclass
class CollectiveResult:
    """A gloo job of one rank per node, all_reducing in a loop while ``cut_node`` is cut off.
    Times are seconds after the cut (wall clock of this machine, shared by every rank), except
    ``cut_after_launch_s`` (start-up: torch imports, rendezvous, warm-up). ``healed_after_s``:
    when the link came back (once every rank had failed; None: only after the job ended);
    ``job_ended_after_s``: when the last process of the launch was gone. ``ended_by_limit``:
    still running ``3 * timeout_s + AFTER_CUT_SLACK_S`` after the cut, so the experiment ended
    it; ``launch_limit_s``: the hard limit of the whole launch (start-up included)."""

    nodes: int
    cut_node: int
    timeout_s: float
    cut_after_launch_s: float
    healed_after_s: float | None
    job_ended_after_s: float
    ranks: list[RankOutcome]
    launch_seconds: float
    launch_timed_out: bool
    node_returncodes: list[int | None]
    output_tail: list[str] = field(repr=False, default_factory=list)
    ended_by_limit: bool = False
    launch_limit_s: float = 0.0

    @property
    def all_failed(self) -> bool:
        """Every rank, on both sides of the cut, raised an error."""
        return bool(self.ranks) and all(r.error is not None for r in self.ranks)

    @property
    def detected_within_s(self) -> float | None:
        """When the last rank failed, after the cut; None if some rank never failed."""
        times = [r.failed_after_s for r in self.ranks]
        return None if not times or None in times else max(times)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "all_failed": self.all_failed,
                "detected_within_s": self.detected_within_s}


def _rank_records(folder: Path) -> dict[int, list[dict]]:
    records: dict[int, list[dict]] = {}
    for path in sorted(folder.glob("rank*.jsonl")):
        rows = []
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue
        if rows:
            records[rows[0]["rank"]] = rows
    return records


def _outcome(rows: list[dict], cut_at: float, node_of: dict[str, int]) -> RankOutcome:
    done = [r for r in rows if r["event"] == "iteration"]
    after = [r for r in done if r["t"] >= cut_at]
    error = next((r for r in rows if r["event"] == "error"), None)
    address = rows[0].get("address", "")
    return RankOutcome(
        rank=rows[0]["rank"], node=node_of.get(address), address=address,
        iterations=len(done), iterations_after_cut=len(after),
        last_ok_after_cut_s=round(after[-1]["t"] - cut_at, 3) if after else None,
        error=error["error"] if error else None,
        failed_after_s=round(error["t"] - cut_at, 3) if error else None,
        last_ok_s=round(done[-1]["t"] - cut_at, 3) if done else None)


def collective_partition(nodes: int = 3, cut_node: int = 2, timeout_s: float = 5.0,
                         warmup_iterations: int = WARMUP_ITERATIONS,
                         echo: Any = None) -> CollectiveResult:
    """Launch a gloo job (one rank per node, ``GLOO_SOCKET_IFNAME`` = the lab link, collective
    timeout ``timeout_s``) that all_reduces in a loop; once every rank has done
    ``warmup_iterations``, cut ``cut_node`` and keep it cut until every rank has failed (or
    the job ended). Reports who failed, with what, and how long after the cut. Limits: start-up
    gets this machine's measured allowance for all its processes (``labkit.runtime.pace``: a bound only
    a hang reaches), and the job is ended ``3 * timeout_s + AFTER_CUT_SLACK_S`` after the cut,
    counted from the cut; every process it started is ended and the lab is healed and closed in
    any case."""
    from labkit.runtime.dist import TIMEOUT_ENV
    from labkit.runtime.launch import Fleet, launch_local
    from labkit.runtime.pace import startup_allowance_s

    if nodes < 2 or not 0 <= cut_node < nodes:
        raise ValueError(f"need nodes >= 2 and 0 <= cut_node < nodes, got {nodes}, {cut_node}")
    if timeout_s <= 0:
        raise ValueError(f"timeout must be positive, got {timeout_s}")
    _require_lab()
    finished = threading.Event()
    cut_state: dict[str, Any] = {"at": None, "healed": None, "error": None, "ended": False}
    after_cut_s = 3 * timeout_s + AFTER_CUT_SLACK_S
    limit_s = startup_allowance_s(2 * nodes) + after_cut_s  # agents and ranks start together

    def end_after_the_cut(fleet: Fleet) -> None:
        """The hang bound after the cut counts from the cut, not from the launch."""
        at = cut_state["at"]
        if at is None or cut_state["ended"] or time.time() - at < after_cut_s:
            return
        cut_state["ended"] = True
        for node in range(len(fleet.procs)):
            if fleet.running(node):
                fleet.kill(node)

    with ExitStack() as cleanup:  # runs every step, in reverse order, even when one fails
        run_dir = Path(tempfile.mkdtemp(prefix="labkit-partition-"))
        cleanup.callback(shutil.rmtree, run_dir, ignore_errors=True)
        records_dir = run_dir / "records"
        records_dir.mkdir()
        lab = NetLab(nodes)
        cleanup.callback(lab.close)
        cleanup.callback(_heal_quietly, lab, cut_node)

        def count(event: str) -> list[int]:
            return [sum(f'"{event}"' in line for line in path.read_text().splitlines())
                    for path in records_dir.glob("rank*.jsonl")]

        def cut_and_heal() -> None:
            """Cut after the warm-up; heal once every rank has failed, so that the cut node's
            torchrun agent (stuck on the rendezvous store on node 0) can reach it and exit."""
            try:
                while not finished.wait(0.02):
                    counts = count("iteration")
                    if len(counts) == nodes and min(counts) >= warmup_iterations:
                        cut(lab, cut_node)
                        cut_state["at"] = time.time()
                        break
                while not finished.wait(0.05):
                    if sum(count("error")) >= nodes:
                        heal(lab, cut_node)
                        cut_state["healed"] = time.time()
                        return
            except BaseException as exc:  # raised again by the caller
                cut_state["error"] = exc
                (records_dir / "stop").touch()  # the ranks stop after their next all_reduce

        cutter = threading.Thread(target=cut_and_heal, daemon=True)
        cleanup.callback(cutter.join, 5)
        cleanup.callback(finished.set)
        cutter.start()
        launched = time.time()
        result = launch_local(
            RANK_SCRIPT, str(records_dir), str(ITERATION_PAUSE_S), nnodes=nodes,
            nproc_per_node=1, network=lab, echo=echo, run_dir=run_dir, timeout_s=limit_s,
            on_tick=end_after_the_cut,
            env={"GLOO_SOCKET_IFNAME": lab.ifname, TIMEOUT_ENV: str(timeout_s)})
        ended = time.time()
        finished.set()
        cutter.join(timeout=5)
        if cut_state["error"] is not None:
            raise cut_state["error"]
        records = _rank_records(records_dir)
        node_of = {lab.address(n): n for n in range(nodes)}
    cut_at, healed = cut_state["at"], cut_state["healed"]
    if cut_at is None:
        raise PartitionError(f"the job never completed its warm-up within the launch's "
                             f"{limit_s:.0f} s limit (start-up allowance measured here), so "
                             "nothing was cut:\n" + "\n".join(result.output[-20:]))
    return CollectiveResult(
        nodes=nodes, cut_node=cut_node, timeout_s=timeout_s,
        cut_after_launch_s=round(cut_at - launched, 3),
        healed_after_s=None if healed is None else round(healed - cut_at, 3),
        job_ended_after_s=round(ended - cut_at, 3),
        ranks=[_outcome(rows, cut_at, node_of) for _, rows in sorted(records.items())],
        launch_seconds=round(result.seconds, 1), launch_timed_out=result.timed_out,
        node_returncodes=result.node_returncodes, output_tail=result.output[-30:],
        ended_by_limit=cut_state["ended"], launch_limit_s=round(limit_s, 1))


def format_collective(result: CollectiveResult) -> str:
    """A few lines for a terminal or a notebook cell."""
    lines = [f"gloo all_reduce loop on {result.nodes} nodes, node {result.cut_node} cut off, "
             f"collective timeout {result.timeout_s:g} s"]
    for r in result.ranks:
        end = "no error" if r.error is None else f"failed {r.failed_after_s:.2f} s after the " \
            f"cut: {r.error}"
        lines.append(f"  rank {r.rank} (node {r.node}): {r.iterations_after_cut} all_reduces "
                     f"after the cut, {end}")
    healed = "after the job ended" if result.healed_after_s is None \
        else f"{result.healed_after_s:.2f} s after the cut"
    lines.append(f"  start-up {result.cut_after_launch_s:.1f} s; link healed {healed}; job gone "
                 f"{result.job_ended_after_s:.1f} s after the cut, agents' exit codes "
                 f"{result.node_returncodes}")
    if result.ended_by_limit:
        lines.append(f"  still running {3 * result.timeout_s + AFTER_CUT_SLACK_S:g} s after the "
                     "cut: every process was ended")
    if result.launch_timed_out:
        lines.append(f"  the launch ran past its hard limit ({result.launch_limit_s:g} s): every "
                     "process was ended")
    return "\n".join(lines)


# --- command line ------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labkit.orchestration.partition")
    sub = parser.add_subparsers(dest="command", required=True)
    member = sub.add_parser("member", help="one election member (started by the experiment)")
    member.add_argument("--node", type=int, required=True)
    member.add_argument("--addresses", required=True, help="every node's address, comma-separated")
    member.add_argument("--rule", choices=RULES, required=True)
    member.add_argument("--out", type=Path, required=True)
    member.add_argument("--lifetime", type=float, default=60.0)
    member.add_argument("--port", type=int, default=HEARTBEAT_PORT)
    member.add_argument("--interval", type=float, default=INTERVAL_S)
    member.add_argument("--alive", type=float, default=ALIVE_S)
    election = sub.add_parser("election", help="run the leader election experiment")
    election.add_argument("--nodes", type=int, default=3)
    election.add_argument("--rule", choices=RULES, default="naive")
    election.add_argument("--cut", type=int, default=None, help="node to cut (default: last)")
    collective = sub.add_parser("collective", help="run the gloo collective experiment")
    collective.add_argument("--nodes", type=int, default=3)
    collective.add_argument("--cut", type=int, default=None, help="node to cut (default: last)")
    collective.add_argument("--timeout", type=float, default=5.0)
    for p in (election, collective):
        p.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    if args.command == "member":
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # flush the log on the way out
        run_member(args.node, args.addresses.split(","), args.rule, args.out, args.lifetime,
                   args.port, args.interval, args.alive)
        return 0
    cut_node = args.nodes - 1 if args.cut is None else args.cut
    if args.command == "election":
        res: ElectionResult | CollectiveResult = election_experiment(args.nodes, args.rule,
                                                                     cut_node)
        text = format_election(res)
    else:
        res = collective_partition(args.nodes, cut_node, args.timeout)
        text = format_collective(res)
    print(json.dumps(res.to_dict(), indent=2) if args.json else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
