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
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from labkit.errors import ParameterError
from labkit.orchestration.control import JOB_ENV
from labkit.orchestration.elastic_plan import (
    HORIZON_FILE,
    Horizon,
    NodeChange,
    check_plan,
    parse_changes,
    write_horizon,
)
from labkit.orchestration.elastic_report import (
    PROGRESS_FILE,
    ChangeOutcome,
    ElasticRun,
    holds_of,
    read_progress,
    segments_of,
)
from labkit.reliability.cadence import add_cadence_arguments, cadence_fields, cadence_of
from labkit.runtime.config import add_config_arguments, config_from_args, from_json, to_json
from labkit.runtime.dist import DEFAULT_TIMEOUT_S, TIMEOUT_ENV
from labkit.runtime.fleet import Fleet
from labkit.runtime.launch import Echo, launch_local
from labkit.runtime.pace import startup_allowance_s
from labkit.runtime.rank_script import rank_script
from labkit.runtime.runlog import LogTail
from labkit.services.base import CHILD_REDIS_URL_ENV

HOLD_POLL_S = 0.05  # how often a holding group looks again: a response time, not a wait for work

EXIT_GRACE_S = 15.0  # after the last step, how long agents get to exit before they are ended

KEEP_ALIVE_WINDOW_S = 15.0  # torchrun's rendezvous: keep_alive_interval 5 s x max_attempt 3

REFORM_EXIT = 3  # a rank that left because a peer was preempted: its agent re-forms the group

RANK_SCRIPT = rank_script(__name__)


@dataclass
class ElasticConfig:
    """What the ranks train: ``steps`` updates of a small MLP on a fixed global batch."""

    ckpt_dir: str = ""  # where checkpoints and the progress log go (default: a temporary folder)
    steps: int = 120  # updates the job makes, whatever its world size
    global_batch: int = 96  # rows per update, split over the ranks of the moment
    dim: int = 16  # inputs of the MLP
    hidden: int = 64  # width of its hidden layer
    lr: float = 0.02  # SGD learning rate (momentum 0.9)
    work_s: float = 0.2  # stands for a real step's compute, so changes land mid-training
    checkpoint_every_updates: int | None = 10  # after every N-th step (one update each) ...
    checkpoint_every_s: float | None = None  # ... or every S s; neither: at notices and the end
    reform_wait_s: float = 1.0  # how long a rank waits for its own notice before re-forming
    seed: int = 0  # the model's and the batches' seed

    def validate(self) -> None:
        if self.steps < 1 or self.global_batch < 1 or self.dim < 1 or self.hidden < 1:
            raise ParameterError("steps, global_batch, dim and hidden must be at least 1")
        if self.work_s < 0 or self.reform_wait_s < 0:
            raise ParameterError("work_s and reform_wait_s must be >= 0")
        cadence_of(self).validate()

    def to_json(self) -> str:
        return to_json(self)

    @classmethod
    def from_json(cls, text: str) -> ElasticConfig:
        return from_json(cls, text)


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
                     **({} if control is None else {CHILD_REDIS_URL_ENV: control[0], JOB_ENV: control[1]})},
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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``labkit elastic``: the job (``ElasticConfig``'s fields) and its fleet."""
    parser.add_argument("--min-nodes", type=int, default=1, help="the job's minimum (MIN)")
    parser.add_argument("--max-nodes", type=int, default=3, help="the job's maximum (MAX)")
    parser.add_argument("--start-nodes", type=int, default=2, help="nodes started at once")
    parser.add_argument("--nproc-per-node", type=int, default=1, help="ranks per node")
    parser.add_argument("--changes", default="join:2@10,preempt:2@60,kill:1@85",
                        help="ACTION:NODE@STEP,... with ACTION join, preempt, kill or freeze")
    add_config_arguments(parser, ElasticConfig,
                         skip=("ckpt_dir", "checkpoint_every_updates", "checkpoint_every_s"))
    add_cadence_arguments(parser, default_updates=ElasticConfig.checkpoint_every_updates,
                          what="step")
    parser.add_argument("--max-restarts", type=int, default=10, help="torchrun restarts")
    parser.add_argument("--timeout", "--timeout-s", dest="timeout_s", type=float, default=None,
                        help="the launch's limit (default: derived from this machine's pace)")
    parser.add_argument("--collective-timeout", "--collective-timeout-s",
                        dest="collective_timeout_s", type=float, default=None,
                        help="how long ranks wait for a frozen peer (default: labkit's 60 s)")
    parser.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    cfg = config_from_args(ElasticConfig, args,
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
