"""Elastic membership: a job on MIN..MAX simulated nodes that nodes join and leave mid-run.

    labkit elastic --min-nodes 1 --max-nodes 3 --changes join:2@10,preempt:2@60,kill:1@85 --json

torchrun's elastic agent does the orchestration (``--nnodes=MIN:MAX``, c10d rendezvous): a node
that joins makes every agent restart its ranks into a bigger group; a node that leaves makes
the others' ranks fail or re-form, and the agents re-form the group without it. The ranks
(``labkit.elastic_rank``) train a small model on a fixed global batch, checkpoint replicated
state that loads at any world size, and turn a SIGTERM into "checkpoint now, then leave", so
a preemption notice or a scale-up loses no step; a node that is killed outright costs the steps
since the last checkpoint. Every step lands in a progress log; :class:`ElasticRun` reads it
back as world size and progress over time, and the steps each change cost.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from labkit.cadence import add_cadence_arguments, cadence_fields, cadence_of
from labkit.control import JOB_ENV, URL_ENV
from labkit.dist import TIMEOUT_ENV
from labkit.errors import ParameterError
from labkit.launch import Echo, Fleet, FleetEvent, launch_local
from labkit.runlog import LogTail, read_records

PROGRESS_FILE = "progress.jsonl"
EXIT_GRACE_S = 15.0  # after the last step, how long agents get to exit before they are ended
REFORM_EXIT = 3  # a rank that left because a peer was preempted: its agent re-forms the group
RANK_SCRIPT = Path(__file__).with_name("elastic_rank.py")
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
    take effect (a group formed after it), then for its step; a joining node boots for seconds
    while the old group trains on, so space the steps out or a group may last only a few."""
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

    @property
    def worlds(self) -> list[int]:
        """World size of each segment, in order (e.g. [2, 3, 2])."""
        return [s.world for s in self.segments]

    @property
    def lost_steps(self) -> int:
        return sum(s.lost_steps for s in self.segments)

    def timeline(self) -> list[tuple[float, int, int]]:
        """(seconds since the first start, step, world size) of every finished step."""
        t0 = min((r["t"] for r in self.records if "t" in r), default=0.0)
        return [(r["t"] - t0, r["step"], r["world"]) for r in self.records
                if "event" not in r and "step" in r]

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "min_nodes": self.min_nodes, "max_nodes": self.max_nodes,
                "changes": self.changes, "worlds": self.worlds, "lost_steps": self.lost_steps,
                "seconds": round(self.seconds, 2), "final": self.final,
                "ended_after_finish": self.ended_after_finish,
                "events": [asdict(e) for e in self.events],
                "segments": [asdict(s) for s in self.segments]}


def segments_of(records: list[dict[str, Any]]) -> list[Segment]:
    """Cut the progress log at each (re)start of the group."""
    t0 = min((r["t"] for r in records if "t" in r), default=0.0)
    segments: list[Segment] = []
    for record in records:
        if record.get("event") == "start":
            segments.append(Segment(record["attempt"], record["world"], record["from_step"],
                                    record["from_step"], record["lost_steps"],
                                    record["t"] - t0, record["t"] - t0))
        elif "event" not in record and segments:
            segments[-1].to_step = max(segments[-1].to_step, record["step"])
            segments[-1].end_s = record["t"] - t0
    return segments


class _Scheduler:
    """Carries out the changes in order, each once the job reached its step in a group that
    formed after the change before it (so "preempt 2" waits for node 2 to be in the group).

    It also ends agents left waiting after the job finished: torchrun's agents wait up to
    300 s (its exit barrier) for every agent of the last group, and a node preempted just as
    the job ends never arrives."""

    def __init__(self, log: Path, changes: Sequence[NodeChange], steps: int) -> None:
        self.tail, self.todo, self.steps = LogTail(log), list(changes), steps
        self.records: list[dict[str, Any]] = []
        self.starts_seen_at_last_change = 0
        self.finished_at: float | None = None
        self.ended_after_finish: list[int] = []

    def _finish(self, fleet: Fleet, records: list[dict[str, Any]]) -> None:
        if self.finished_at is None:
            if any(r.get("event") == "checkpoint" and r["step"] >= self.steps for r in records):
                self.finished_at = fleet.elapsed_s
            return
        if fleet.elapsed_s - self.finished_at > EXIT_GRACE_S:
            for node in range(len(fleet.procs)):
                if fleet.running(node):
                    fleet.terminate(node)
                    self.ended_after_finish.append(node)

    def __call__(self, fleet: Fleet) -> None:
        self.records += self.tail.new_records()
        records = self.records
        self._finish(fleet, records)
        if not self.todo:
            return
        starts = [i for i, r in enumerate(records) if r.get("event") == "start"]
        if len(starts) <= self.starts_seen_at_last_change:
            return  # the group has not re-formed since the last change
        reached = max((r["step"] for r in records[starts[-1]:] if "event" not in r), default=-1)
        change = self.todo[0]
        if reached < change.at_step:
            return
        self.todo.pop(0)
        self.starts_seen_at_last_change = len(starts)
        act = {"join": "start", "preempt": "terminate", "kill": "kill", "freeze": "freeze"}
        getattr(fleet, act[change.action])(change.node)


def run_elastic(
    cfg: ElasticConfig | None = None,
    *,
    min_nodes: int = 2,
    max_nodes: int = 3,
    start_nodes: int | None = None,
    nproc_per_node: int = 1,
    changes: Sequence[NodeChange] | str = (),
    max_restarts: int = 10,
    timeout_s: float = 300.0,
    collective_timeout_s: float | None = None,
    control: tuple[str, str] | None = None,
    echo: Echo | None = None,
) -> ElasticRun:
    """Run the elastic job on ``start_nodes`` (default ``min_nodes``) simulated nodes and
    apply ``changes`` as it goes; returns what happened. ``cfg.ckpt_dir`` empty: a temporary
    folder, removed afterwards. ``collective_timeout_s``: how long ranks wait in a collective
    for a peer that stopped answering (a frozen node) before they fail. ``control=(redis_url,
    job)``: every rank heartbeats its state and step there (``labkit agents status --job``)."""
    cfg = ElasticConfig(**asdict(cfg)) if cfg else ElasticConfig()
    cfg.validate()
    plan = parse_changes(changes) if isinstance(changes, str) else list(changes)
    start_nodes = min_nodes if start_nodes is None else start_nodes
    check_plan(min_nodes, max_nodes, start_nodes, plan)
    if max_restarts < sum(c.action != "join" for c in plan):
        raise ParameterError(f"max_restarts={max_restarts} is fewer than the nodes that leave: "
                             "each departure uses up one restart of the others")
    with tempfile.TemporaryDirectory(prefix="labkit-elastic-") as scratch:
        cfg.ckpt_dir = cfg.ckpt_dir or str(Path(scratch) / "ckpt")
        Path(cfg.ckpt_dir).mkdir(parents=True, exist_ok=True)
        log = Path(cfg.ckpt_dir) / PROGRESS_FILE
        scheduler = _Scheduler(log, plan, cfg.steps)
        started_at = time.time()
        result = launch_local(
            RANK_SCRIPT, cfg.to_json(), nnodes=min_nodes, max_nnodes=max_nodes,
            nproc_per_node=nproc_per_node, nodes_started=start_nodes, max_restarts=max_restarts,
            timeout_s=timeout_s, echo=echo, run_dir=Path(scratch) / "run",
            on_tick=scheduler, join_timeout_s=min(timeout_s, 60),
            env={**({} if collective_timeout_s is None else {TIMEOUT_ENV: str(collective_timeout_s)}),
                 **({} if control is None else {URL_ENV: control[0], JOB_ENV: control[1]})},
        )
        records = read_progress(log)
    done = isinstance(result.published, dict) and result.published.get("steps") == cfg.steps
    ok = done and not result.timed_out and (result.ok or bool(scheduler.ended_after_finish))
    return ElasticRun(ok, min_nodes, max_nodes, [str(c) for c in plan],
                      result.events, segments_of(records), records,
                      result.published if done else None, result.seconds,
                      scheduler.ended_after_finish, started_at, result.output)


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
    parser.add_argument("--timeout-s", type=float, default=300.0)
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
        print(f"ok={run.ok} worlds={run.worlds} lost_steps={run.lost_steps}")
    return 0 if run.ok else 1


__all__ = ["ElasticConfig", "ElasticRun", "NodeChange", "Segment", "check_plan",
           "parse_changes", "read_progress", "run_elastic"]


if __name__ == "__main__":
    raise SystemExit(main())
