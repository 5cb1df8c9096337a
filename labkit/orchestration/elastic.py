"""Elastic membership: a job on MIN..MAX simulated nodes that nodes join and leave mid-run.

    labkit elastic --min-nodes 1 --max-nodes 3 --changes join:2@10,preempt:2@60,kill:1@85 --json

torchrun's elastic agent does the orchestration (``--nnodes=MIN:MAX``, c10d rendezvous): a node
that joins makes every agent restart its ranks into a bigger group; a node that leaves makes
the others' ranks fail or re-form, and the agents re-form the group without it. The ranks
(``labkit.orchestration.elastic_rank``) train a small model on a fixed global batch, checkpoint replicated
state that loads at any world size, and turn a SIGTERM into "checkpoint now, then leave", so
a preemption notice or a scale-up loses no step; a node that is killed outright costs the steps
since the last checkpoint. Every step lands in a progress log; :class:`ElasticRun` reads it
back as world size and progress over time, and the steps each change cost.

The same plan gives the same world sizes on any machine. The old group trains on while a
joining node boots, but only up to a *horizon* (:class:`Horizon`, a file the scheduler writes
and rank 0 reads before every step): it never passes the step of a change the scheduler has
not carried out yet, and never finishes while the last change is still in flight (its new group
not formed). There the whole group holds, together and still answering notices, and the hold
is part of that change's stall. A rendezvous round that closed without a node that is running
(torchrun closes a round ``last_call`` seconds after the minimum joined, and on a busy machine
a node can boot later than that) holds the same way until the agents re-form it with that node.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from labkit.errors import ParameterError
from labkit.orchestration.control import JOB_ENV, URL_ENV
from labkit.reliability.cadence import add_cadence_arguments, cadence_fields, cadence_of
from labkit.runtime.dist import DEFAULT_TIMEOUT_S, TIMEOUT_ENV
from labkit.runtime.fleet import Fleet, FleetEvent
from labkit.runtime.launch import Echo, launch_local
from labkit.runtime.pace import startup_allowance_s
from labkit.runtime.rank_script import rank_script
from labkit.runtime.runlog import LogTail, read_records

PROGRESS_FILE = "progress.jsonl"
HORIZON_FILE = "horizon.json"
HOLD_POLL_S = 0.05  # how often a holding group looks again: a response time, not a wait for work
EXIT_GRACE_S = 15.0  # after the last step, how long agents get to exit before they are ended
KEEP_ALIVE_WINDOW_S = 15.0  # torchrun's rendezvous: keep_alive_interval 5 s x max_attempt 3
REFORM_EXIT = 3  # a rank that left because a peer was preempted: its agent re-forms the group
RANK_SCRIPT = rank_script(__name__)
Action = Literal["join", "preempt", "kill", "freeze"]
_CHANGE = re.compile(r"^(join|preempt|kill|freeze):(\d+)@(\d+)$")


@dataclass
class ElasticConfig:
    """What the ranks train: ``steps`` updates of a small MLP on a fixed global batch."""

    ckpt_dir: str = ""
    steps: int = 120
    global_batch: int = 96
    dim: int = 16
    hidden: int = 64
    lr: float = 0.02
    work_s: float = 0.2  # stands for a real step's compute, so changes land mid-training
    checkpoint_every_updates: int | None = 10  # after every N-th step (one update each) ...
    checkpoint_every_s: float | None = None  # ... or every S s; neither: at notices and the end
    reform_wait_s: float = 1.0  # how long a rank waits for its own notice before re-forming
    seed: int = 0

    def validate(self) -> None:
        if self.steps < 1 or self.global_batch < 1 or self.dim < 1 or self.hidden < 1:
            raise ParameterError("steps, global_batch, dim and hidden must be at least 1")
        if self.work_s < 0 or self.reform_wait_s < 0:
            raise ParameterError("work_s and reform_wait_s must be >= 0")
        cadence_of(self).validate()

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ElasticConfig:
        return cls(**json.loads(text))


def make_model(cfg: ElasticConfig) -> torch.nn.Module:
    torch.manual_seed(cfg.seed)
    return torch.nn.Sequential(torch.nn.Linear(cfg.dim, cfg.hidden), torch.nn.Tanh(),
                               torch.nn.Linear(cfg.hidden, 1))


def global_batch(cfg: ElasticConfig, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Step ``step``'s whole batch, the same on every rank and at every world size."""
    gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)
    x = torch.randn(cfg.global_batch, cfg.dim, generator=gen)
    teacher = torch.Generator().manual_seed(cfg.seed + 7)
    w = torch.randn(cfg.dim, 1, generator=teacher)
    return x, torch.sin(x @ w) + 0.1 * x[:, :1] ** 2


def reference_loss(cfg: ElasticConfig) -> float:
    """The loss of step ``cfg.steps`` trained here in one process: what the elastic job reaches
    whatever its world sizes, since every step takes the same global batch (up to the order of
    float sums in the all-reduce)."""
    model = make_model(cfg)
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)
    loss = torch.tensor(float("nan"))
    for step in range(cfg.steps):
        x, y = global_batch(cfg, step)
        loss = ((model(x) - y) ** 2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return loss.item()


@dataclass(frozen=True)
class NodeChange:
    """``action`` node ``node`` once the job has reached step ``at_step``."""

    action: Action
    node: int
    at_step: int

    def __str__(self) -> str:
        return f"{self.action}:{self.node}@{self.at_step}"


def parse_changes(text: str) -> list[NodeChange]:
    """``"join:2@20,preempt:2@45"`` as NodeChanges, in order. Each waits for the one before to
    take effect (a group formed after it), then for its step. A joining node boots for seconds
    while the old group trains on, up to the next change's step, where it holds until the node
    is in (see :class:`Horizon`): space the steps out to let the old group train meanwhile."""
    changes = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        match = _CHANGE.match(part)
        if not match:
            raise ParameterError(f"a change is ACTION:NODE@STEP with ACTION join, preempt, kill "
                                 f"or freeze, e.g. join:2@20; got {part!r}")
        changes.append(NodeChange(match[1], int(match[2]), int(match[3])))  # type: ignore[arg-type]
    return changes


def check_plan(min_nodes: int, max_nodes: int, start_nodes: int,
               changes: Sequence[NodeChange]) -> None:
    """Refuse a plan the launcher cannot carry out, before anything starts."""
    if not 1 <= min_nodes <= start_nodes <= max_nodes:
        raise ParameterError(f"need 1 <= min_nodes ({min_nodes}) <= start_nodes ({start_nodes})"
                             f" <= max_nodes ({max_nodes})")
    present, gone = set(range(start_nodes)), set()
    for change in changes:
        if not 0 <= change.node < max_nodes:
            raise ParameterError(f"{change}: node {change.node} is outside 0..{max_nodes - 1}")
        if change.action == "join":
            if change.node in present or change.node in gone:
                raise ParameterError(f"{change}: node {change.node} has already been started")
            present.add(change.node)
            continue
        if change.node == 0:
            raise ParameterError(f"{change}: node 0 hosts the c10d rendezvous store, and the job "
                                 "ends with it. On a cluster, put the store where no preemption "
                                 "reaches it (a stable host, or etcd).")
        if change.node not in present:
            raise ParameterError(f"{change}: node {change.node} is not running then")
        if len(present) - 1 < min_nodes:
            raise ParameterError(f"{change}: {len(present) - 1} node(s) would be left, below "
                                 f"the minimum of {min_nodes}")
        present.discard(change.node)
        gone.add(change.node)
    steps = [c.at_step for c in changes]
    if steps != sorted(steps):
        raise ParameterError(f"changes must come in step order, got {list(map(str, changes))}")


def read_progress(path: str | Path) -> list[dict[str, Any]]:
    """Every record of a progress log (a line cut short by a kill is skipped)."""
    return read_records(path)


# --- the horizon: how far the running group may train ----------------------------------------
@dataclass(frozen=True)
class Horizon:
    """What the scheduler lets the running group do (``horizon.json`` beside the checkpoints).

    ``step``: the group holds before it passes this step (None: no limit). It is the step of
    the next change, which the scheduler carries out once the group stands there, or, while the
    last change is in flight (no group has formed since it), the end of the job; while a node is
    on its way out (preempt, kill, freeze) it stays at the step that change was made. ``world`` and
    ``since``: a group that formed after ``since`` (wall clock) with fewer than ``world`` ranks
    is *short*: a running node missed its rendezvous round. It holds until its agents re-form it
    with that node, which torchrun does as soon as the node waits for the next round.
    ``waiting_for``: the change in flight; ``next``: the change ``step`` belongs to."""

    step: int | None = None
    world: int = 0
    since: float = 0.0
    waiting_for: str | None = None
    next: str | None = None

    def hold_reason(self, step: int, world: int, formed_at: float) -> str | None:
        """Why a group of ``world`` ranks that formed at ``formed_at`` (wall clock) may not
        train past ``step`` now: ``"short"``, ``"horizon"``, or None (it may go on)."""
        if world < self.world and formed_at >= self.since:
            return "short"
        if self.step is not None and step >= self.step:
            return "horizon"
        return None


def write_horizon(folder: str | Path, horizon: Horizon) -> None:
    """Replace the horizon file atomically: a reader sees the old one or the new one."""
    path = Path(folder) / HORIZON_FILE
    tmp = path.with_name(f".{HORIZON_FILE}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(asdict(horizon)))
    os.replace(tmp, path)


def read_horizon(folder: str | Path) -> Horizon:
    """The scheduler's current horizon; without a file (no scheduler): no limit."""
    try:
        return Horizon(**json.loads((Path(folder) / HORIZON_FILE).read_text()))
    except (FileNotFoundError, ValueError, TypeError):
        return Horizon()


# --- what a run did --------------------------------------------------------------------------
@dataclass
class Segment:
    """One attempt of the group: its world size, where it resumed and what that cost."""

    attempt: int
    world: int
    from_step: int
    to_step: int
    lost_steps: int
    start_s: float
    end_s: float


@dataclass
class Hold:
    """A stretch in which the group stood still on purpose (seconds since the first group's
    start). ``reason`` ``"horizon"``: at the step of ``next`` (or the end of the job), until
    the scheduler carried it out, or while ``waiting_for``, a change in flight, had not formed
    its group yet; ``"short"``: the group formed with ``world`` of ``expected_world`` ranks (a
    running node missed the round) and waited to be re-formed with it. ``ended``: ``"notice"``
    (its ranks were told to leave: a re-form) or ``"released"`` (the scheduler let it go on)."""

    step: int
    world: int
    expected_world: int
    attempt: int
    reason: str
    waiting_for: str | None
    next: str | None
    ended: str
    start_s: float
    end_s: float

    @property
    def seconds(self) -> float:
        return self.end_s - self.start_s


@dataclass
class ChangeOutcome:
    """What became of one planned change. ``applied``: the scheduler carried it out ``at_s``
    seconds after the launch, the job at step ``at_step``; ``formed``: a new group formed after
    it. ``why_not``: why it was not applied, or formed no group, in words."""

    change: str
    applied: bool = False
    at_s: float | None = None
    at_step: int | None = None
    formed: bool = False
    why_not: str | None = None
    at_wall: float | None = field(default=None, repr=False)  # time.time() when applied


@dataclass
class ChangeRow:
    """One applied change against the groups around it, on the launch's clock (seconds since it
    began): the step the job had reached when the scheduler acted, the old group's last step,
    where the new group resumed, the steps lost, and the *stall*, from the old group's last step
    to the new group's start (nobody trained). ``held_s`` of the stall the old group stood at
    its horizon (for a join: while the node booted); ``short_rounds``: rounds that closed
    without a running node and were re-formed with it, inside the stall."""

    change: str
    at_s: float
    acted_at_step: int
    world: str | None = None
    stopped_at_step: int | None = None
    resumed_from: int | None = None
    lost_steps: int | None = None
    stall_s: float | None = None
    resumed_after_s: float | None = None
    held_s: float = 0.0
    short_rounds: int = 0


@dataclass
class ElasticRun:
    """What an elastic job did, from its progress log and the launcher's fleet events."""

    ok: bool
    min_nodes: int
    max_nodes: int
    changes: list[str]
    events: list[FleetEvent]
    segments: list[Segment]
    records: list[dict[str, Any]] = field(repr=False)
    final: dict[str, Any] | None
    seconds: float
    ended_after_finish: list[int] = field(default_factory=list)  # agents stuck in exit barrier
    started_at: float = 0.0  # wall clock (time.time()) when the launch began: events count from it
    output: list[str] = field(default_factory=list, repr=False)  # the agents' and ranks' lines
    outcomes: list[ChangeOutcome] = field(default_factory=list)  # one per planned change
    holds: list[Hold] = field(default_factory=list)
    timeout_s: float = 0.0  # the launch's limit

    @property
    def worlds(self) -> list[int]:
        """World size of each segment, in order (e.g. [2, 3, 2])."""
        return [s.world for s in self.segments]

    @property
    def lost_steps(self) -> int:
        return sum(s.lost_steps for s in self.segments)

    @property
    def offset_s(self) -> float:
        """From the launch to the first group's start (start-up); segments and holds count
        from there, events and change rows from the launch."""
        return _first_time(self.records) - self.started_at if self.records else 0.0

    @property
    def unapplied(self) -> list[ChangeOutcome]:
        """Planned changes that were not carried out or formed no group, with the reason."""
        return [o for o in self.outcomes if not (o.applied and o.formed)]

    def timeline(self) -> list[tuple[float, int, int]]:
        """(seconds since the first start, step, world size) of every finished step."""
        t0 = _first_time(self.records)
        return [(r["t"] - t0, r["step"], r["world"]) for r in self.records
                if "event" not in r and "step" in r]

    def change_rows(self) -> list[ChangeRow]:
        """One row per change the scheduler carried out (see :class:`ChangeRow`)."""
        offset, rows = self.offset_s, []
        for outcome in self.outcomes:
            if not outcome.applied or outcome.at_s is None or outcome.at_step is None:
                continue
            row = ChangeRow(outcome.change, outcome.at_s, outcome.at_step)
            after = next((i for i, s in enumerate(self.segments)
                          if s.start_s + offset > outcome.at_s), None)
            if after:
                old, new = self.segments[after - 1], self.segments[after]
                inside = [h for h in self.holds if old.end_s <= h.start_s < new.start_s]
                row.world = f"{old.world}->{new.world}"
                row.stopped_at_step, row.resumed_from = old.to_step, new.from_step
                row.lost_steps, row.stall_s = new.lost_steps, new.start_s - old.end_s
                row.resumed_after_s = new.start_s + offset - outcome.at_s
                row.held_s = sum(h.seconds for h in inside if h.reason == "horizon")
                row.short_rounds = sum(h.reason == "short" for h in inside)
            rows.append(row)
        return rows

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "min_nodes": self.min_nodes, "max_nodes": self.max_nodes,
                "changes": self.changes, "worlds": self.worlds, "lost_steps": self.lost_steps,
                "seconds": round(self.seconds, 2), "timeout_s": round(self.timeout_s, 1),
                "final": self.final, "ended_after_finish": self.ended_after_finish,
                "events": [asdict(e) for e in self.events],
                "segments": [asdict(s) for s in self.segments],
                "outcomes": [{k: v for k, v in asdict(o).items() if k != "at_wall"}
                             for o in self.outcomes],
                "holds": [asdict(h) for h in self.holds]}


def _first_time(records: list[dict[str, Any]]) -> float:
    return min((r["t"] for r in records if "t" in r), default=0.0)


def segments_of(records: list[dict[str, Any]]) -> list[Segment]:
    """Cut the progress log at each (re)start of the group. A short round (see
    :class:`Horizon`) is no segment: it trained nothing and was re-formed at once."""
    t0 = _first_time(records)
    segments: list[Segment] = []
    for record in records:
        if record.get("event") == "start" and not record.get("short"):
            segments.append(Segment(record["attempt"], record["world"], record["from_step"],
                                    record["from_step"], record["lost_steps"],
                                    record["t"] - t0, record["t"] - t0))
        elif "event" not in record and segments:
            segments[-1].to_step = max(segments[-1].to_step, record["step"])
            segments[-1].end_s = record["t"] - t0
    return segments


def holds_of(records: list[dict[str, Any]]) -> list[Hold]:
    """Every hold rank 0 logged, in seconds since the first group's start."""
    t0 = _first_time(records)
    return [Hold(r["step"], r["world"], r.get("expected_world", r["world"]), r["attempt"],
                 r["reason"], r.get("waiting_for"), r.get("next"), r["ended"],
                 r["t"] - t0, r["until"] - t0)
            for r in records if r.get("event") == "hold"]


class _Scheduler:
    """Carries out the changes in order, each once the job reached its step in a group that
    formed after the change before it (so "preempt 2" waits for node 2 to be in the group), and
    keeps the :class:`Horizon` up to date, so the group waits for it instead of running ahead.

    It also ends agents left waiting after the job finished: torchrun's agents wait up to
    300 s (its exit barrier) for every agent of the last group, and a node preempted just as
    the job ends never arrives."""

    def __init__(self, folder: Path, changes: Sequence[NodeChange], steps: int,
                 nproc_per_node: int, start_nodes: int) -> None:
        self.folder, self.plan, self.steps, self.nproc = folder, list(changes), steps, nproc_per_node
        self.tail = LogTail(folder / PROGRESS_FILE)
        self.outcomes = [ChangeOutcome(str(c)) for c in self.plan]
        self.next = 0  # index of the next change to carry out
        self.in_flight: int | None = None  # index of the change whose group has not formed
        self.reached: int | None = None  # furthest step of the latest group (None: none yet)
        self.last_step = 0
        self.since = 0.0
        self.done = False
        self.finished_at: float | None = None
        self.ended_after_finish: list[int] = []
        self.written = Horizon()
        self._write(Horizon(self.plan[0].at_step if self.plan else None,
                            start_nodes * nproc_per_node, 0.0, None,
                            str(self.plan[0]) if self.plan else None))

    def __call__(self, fleet: Fleet) -> None:
        for record in self.tail.new_records():
            self._read(record)
        self._finish(fleet)
        self._settle(fleet)
        self._apply(fleet)
        self._write(self._horizon(fleet))

    def _read(self, record: dict[str, Any]) -> None:
        event = record.get("event")
        if event == "start" and not record.get("short"):
            self.reached = record["from_step"]
            flight = None if self.in_flight is None else self.outcomes[self.in_flight]
            if flight is not None and flight.at_wall is not None and record["t"] > flight.at_wall:
                flight.formed, self.in_flight = True, None
        elif event is None and "step" in record and self.reached is not None:
            self.reached = max(self.reached, record["step"])
            self.last_step = max(self.last_step, record["step"])
        elif event == "finish":
            self.done = True

    def _finish(self, fleet: Fleet) -> None:
        if self.finished_at is None:
            if self.done:
                self.finished_at = fleet.elapsed_s
            return
        if fleet.elapsed_s - self.finished_at > EXIT_GRACE_S:
            for node in range(len(fleet.procs)):
                if fleet.running(node):
                    fleet.terminate(node)
                    self.ended_after_finish.append(node)

    def _settle(self, fleet: Fleet) -> None:
        """A joining node whose agent exited before its group formed never will."""
        if self.in_flight is None:
            return
        change = self.plan[self.in_flight]
        proc = fleet.procs[change.node]
        if change.action == "join" and proc is not None and proc.poll() is not None:
            self.outcomes[self.in_flight].why_not = (
                f"node {change.node}'s agent exited with code {proc.returncode} before it was "
                "in a group; its output is in the run's output lines")
            self.in_flight = None

    def _apply(self, fleet: Fleet) -> None:
        while (self.in_flight is None and self.next < len(self.plan) and not self.done
               and self.reached is not None and self.reached >= self.plan[self.next].at_step):
            index, change = self.next, self.plan[self.next]
            outcome = self.outcomes[index]
            self.next += 1
            if change.action != "join" and not fleet.running(change.node):
                outcome.why_not = (f"node {change.node} was not running when the job reached "
                                   f"step {change.at_step}")
                continue
            self.since = outcome.at_wall = time.time()
            act = {"join": "start", "preempt": "terminate", "kill": "kill", "freeze": "freeze"}
            getattr(fleet, act[change.action])(change.node)
            outcome.applied, outcome.at_step = True, self.reached
            outcome.at_s = fleet.events[-1].seconds
            self.in_flight = index

    def _horizon(self, fleet: Fleet) -> Horizon:
        upcoming = self.plan[self.next] if self.next < len(self.plan) else None
        flight = None if self.in_flight is None else self.plan[self.in_flight]
        if flight is not None and flight.action != "join":
            # a node on its way out: the group holds where the change was made until it has
            # re-formed without it, so no step is trained before the notice reaches the ranks
            step = self.outcomes[self.in_flight].at_step
        else:
            step = upcoming.at_step if upcoming else (self.steps if flight else None)
        world = self.nproc * sum(fleet.running(n) for n in range(len(fleet.procs)))
        return Horizon(step, world, self.since, None if flight is None else str(flight),
                       None if upcoming is None else str(upcoming))

    def _write(self, horizon: Horizon) -> None:
        if horizon != self.written:
            write_horizon(self.folder, horizon)
            self.written = horizon

    def explain(self, finished: bool) -> list[ChangeOutcome]:
        """Every change's outcome, with a reason for each that did not take effect."""
        for outcome, change in zip(self.outcomes, self.plan, strict=True):
            if outcome.why_not is not None or (outcome.applied and outcome.formed):
                continue
            if outcome.applied:
                outcome.why_not = "the job ended before a group formed after it"
            elif finished and change.at_step > self.steps:
                outcome.why_not = (f"the job has {self.steps} steps: it never reached step "
                                   f"{change.at_step}")
            elif finished:
                outcome.why_not = "the job finished before the change before it took effect"
            else:
                outcome.why_not = (f"the job stopped (failed or ran past its limit) at step "
                                   f"{self.last_step}, before this change was due")
        return self.outcomes


def elastic_limit_s(cfg: ElasticConfig, changes: Sequence[NodeChange], max_nodes: int,
                    nproc_per_node: int = 1, collective_timeout_s: float | None = None) -> float:
    """A limit on a whole elastic run that only a hang reaches, from this machine's measured
    pace (:mod:`labkit.runtime.pace`): every group start (the first, one per change and one spare for
    a re-formed short round; each starts every rank anew) at the start-up allowance of all the
    job's processes, the steps at 3x their simulated compute, and 3x each change's waits
    (torchrun's keep-alive window; for a freeze, the collective timeout too)."""
    processes = max_nodes * (1 + nproc_per_node)  # agents and ranks
    collective = DEFAULT_TIMEOUT_S if collective_timeout_s is None else collective_timeout_s
    waits = sum(KEEP_ALIVE_WINDOW_S + (collective if c.action == "freeze" else 0.0)
                for c in changes)
    return ((2 + len(changes)) * startup_allowance_s(processes) + 3 * cfg.steps * cfg.work_s
            + 3 * waits + EXIT_GRACE_S)


def run_elastic(
    cfg: ElasticConfig | None = None,
    *,
    min_nodes: int = 2,
    max_nodes: int = 3,
    start_nodes: int | None = None,
    nproc_per_node: int = 1,
    changes: Sequence[NodeChange] | str = (),
    max_restarts: int = 10,
    timeout_s: float | None = None,
    collective_timeout_s: float | None = None,
    control: tuple[str, str] | None = None,
    echo: Echo | None = None,
) -> ElasticRun:
    """Run the elastic job on ``start_nodes`` (default ``min_nodes``) simulated nodes and
    apply ``changes`` as it goes; returns what happened. ``cfg.ckpt_dir`` empty: a temporary
    folder, removed afterwards. ``timeout_s``: the launch's limit (default: derived from this
    machine's measured pace, :func:`elastic_limit_s`). ``collective_timeout_s``: how long ranks
    wait in a collective for a peer that stopped answering (a frozen node) before they fail.
    ``control=(redis_url, job)``: every rank heartbeats its state and step there
    (``labkit agents status --job``)."""
    cfg = ElasticConfig(**asdict(cfg)) if cfg else ElasticConfig()
    cfg.validate()
    plan = parse_changes(changes) if isinstance(changes, str) else list(changes)
    start_nodes = min_nodes if start_nodes is None else start_nodes
    check_plan(min_nodes, max_nodes, start_nodes, plan)
    if max_restarts < sum(c.action != "join" for c in plan):
        raise ParameterError(f"max_restarts={max_restarts} is fewer than the nodes that leave: "
                             "each departure uses up one restart of the others")
    limit = timeout_s if timeout_s is not None else elastic_limit_s(
        cfg, plan, max_nodes, nproc_per_node, collective_timeout_s)
    # How long an agent waits for its round: a node that boots late must still make it.
    join_timeout = min(limit, max(60.0, startup_allowance_s(max_nodes * (1 + nproc_per_node))))
    with tempfile.TemporaryDirectory(prefix="labkit-elastic-") as scratch:
        cfg.ckpt_dir = cfg.ckpt_dir or str(Path(scratch) / "ckpt")
        folder = Path(cfg.ckpt_dir)
        folder.mkdir(parents=True, exist_ok=True)
        scheduler = _Scheduler(folder, plan, cfg.steps, nproc_per_node, start_nodes)
        started_at = time.time()
        try:
            result = launch_local(
                RANK_SCRIPT, cfg.to_json(), nnodes=min_nodes, max_nnodes=max_nodes,
                nproc_per_node=nproc_per_node, nodes_started=start_nodes,
                max_restarts=max_restarts, timeout_s=limit, echo=echo,
                run_dir=Path(scratch) / "run", on_tick=scheduler, join_timeout_s=join_timeout,
                env={**({} if collective_timeout_s is None
                        else {TIMEOUT_ENV: str(collective_timeout_s)}),
                     **({} if control is None else {URL_ENV: control[0], JOB_ENV: control[1]})},
            )
        finally:
            (folder / HORIZON_FILE).unlink(missing_ok=True)  # a reused folder starts unlimited
        records = read_progress(folder / PROGRESS_FILE)
    done = isinstance(result.published, dict) and result.published.get("steps") == cfg.steps
    ok = done and not result.timed_out and (result.ok or bool(scheduler.ended_after_finish))
    return ElasticRun(ok, min_nodes, max_nodes, [str(c) for c in plan],
                      result.events, segments_of(records), records,
                      result.published if done else None, result.seconds,
                      scheduler.ended_after_finish, started_at, result.output,
                      scheduler.explain(done), holds_of(records), limit)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="labkit elastic", description=__doc__.split("\n")[0])
    add_arguments(parser)
    return run_from_args(parser.parse_args(argv))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--min-nodes", type=int, default=1, help="the job's minimum (MIN)")
    parser.add_argument("--max-nodes", type=int, default=3, help="the job's maximum (MAX)")
    parser.add_argument("--start-nodes", type=int, default=2, help="nodes started at once")
    parser.add_argument("--nproc-per-node", type=int, default=1)
    parser.add_argument("--changes", default="join:2@10,preempt:2@60,kill:1@85",
                        help="ACTION:NODE@STEP,... with ACTION join, preempt, kill or freeze")
    parser.add_argument("--steps", type=int, default=120)
    add_cadence_arguments(parser, default_updates=ElasticConfig.checkpoint_every_updates,
                          what="step")
    parser.add_argument("--work-s", type=float, default=0.2, help="simulated compute per step")
    parser.add_argument("--max-restarts", type=int, default=10)
    parser.add_argument("--timeout-s", type=float, default=None,
                        help="the launch's limit (default: derived from this machine's pace)")
    parser.add_argument("--collective-timeout-s", type=float, default=None,
                        help="how long ranks wait for a frozen peer (default: labkit's 60 s)")
    parser.add_argument("--json", action="store_true")


def run_from_args(args: argparse.Namespace) -> int:
    cfg = ElasticConfig(steps=args.steps, work_s=args.work_s,
                        **cadence_fields(args, ElasticConfig.checkpoint_every_updates))
    run = run_elastic(cfg, min_nodes=args.min_nodes, max_nodes=args.max_nodes,
                      start_nodes=args.start_nodes, nproc_per_node=args.nproc_per_node,
                      changes=args.changes, max_restarts=args.max_restarts,
                      timeout_s=args.timeout_s, collective_timeout_s=args.collective_timeout_s,
                      echo=None if args.json else print)
    if args.json:
        print(json.dumps(run.to_dict(), indent=2))
    else:
        for s in run.segments:
            print(f"attempt {s.attempt}: world {s.world}, steps {s.from_step}->{s.to_step}, "
                  f"lost {s.lost_steps}, {s.start_s:.1f}-{s.end_s:.1f} s")
        for h in run.holds:
            if h.seconds >= 0.5:  # longer than the scheduler's own reaction
                print(f"held {h.seconds:.1f} s at step {h.step} ({h.reason}: "
                      f"{h.waiting_for or h.next or 'a node missing from the round'})")
        for o in run.unapplied:
            print(f"{o.change} did not take effect: {o.why_not}")
        print(f"ok={run.ok} worlds={run.worlds} lost_steps={run.lost_steps}")
    return 0 if run.ok else 1


__all__ = ["ChangeOutcome", "ChangeRow", "ElasticConfig", "ElasticRun", "Hold", "Horizon",
           "NodeChange", "Segment", "check_plan", "elastic_limit_s", "parse_changes",
           "read_horizon", "read_progress", "reference_loss", "run_elastic", "write_horizon"]


if __name__ == "__main__":
    raise SystemExit(main())
