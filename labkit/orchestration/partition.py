"""Collectives under a network partition (lesson 12), and the ``labkit partition`` command.

:func:`collective_partition` runs a real gloo job, one rank per simulated node
(``partition_rank.py``), that all_reduces in a loop while one node is cut off
(``network_cut``). Collectives have no majority semantics of their own: every rank, on both
sides of the cut, blocks until the collective timeout and fails; the job stops. Compare
``election``, where a quorum rule keeps the majority side working.

``labkit partition election|collective ...`` runs an experiment and prints its summary (or JSON).
Both need what :mod:`labkit.runtime.netlab` needs (Linux, root, iproute2).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import threading
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from labkit.errors import ParameterError
from labkit.orchestration.election import (
    RULES,
    ElectionResult,
    election_experiment,
    format_election,
)
from labkit.orchestration.network_cut import PartitionError, cut, heal, heal_quietly, require_lab
from labkit.runtime.netlab import NetLab
from labkit.runtime.rank_script import rank_script

RANK_SCRIPT = rank_script(__name__)

WARMUP_ITERATIONS = 5  # all_reduces every rank completes before the cut

ITERATION_PAUSE_S = 0.05  # between all_reduces: a few tens per second are plenty here

AFTER_CUT_SLACK_S = 20.0  # past 3 collective timeouts after the cut: the job is ended


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

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CollectiveResult:
        """The result ``to_dict`` wrote, read back."""
        names = {f.name for f in fields(cls)}
        kept = {k: v for k, v in data.items() if k in names}
        return cls(**{**kept, "ranks": [RankOutcome(**r) for r in data["ranks"]]})


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
    from labkit.runtime.fleet import Fleet
    from labkit.runtime.launch import launch_local
    from labkit.runtime.pace import startup_allowance_s

    if nodes < 2 or not 0 <= cut_node < nodes:
        raise ParameterError(f"need nodes >= 2 and 0 <= cut_node < nodes, got {nodes}, {cut_node}")
    if timeout_s <= 0:
        raise ParameterError(f"timeout must be positive, got {timeout_s}")
    require_lab()
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
        cleanup.callback(heal_quietly, lab, cut_node)

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
            RANK_SCRIPT, json.dumps({"records": str(records_dir), "pause_s": ITERATION_PAUSE_S}),
            nnodes=nodes,
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
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``labkit partition election|collective``."""
    sub = parser.add_subparsers(dest="command", required=True)
    election = sub.add_parser("election", help="run the leader election experiment")
    election.add_argument("--rule", choices=RULES, default="naive")
    collective = sub.add_parser("collective", help="run the gloo collective experiment")
    collective.add_argument("--timeout", type=float, default=5.0,
                            help="the collective timeout, s")
    for p in (election, collective):
        p.add_argument("--nnodes", "--nodes", dest="nodes", type=int, default=3,
                       help="simulated nodes")
        p.add_argument("--cut", type=int, default=None, help="node to cut (default: last)")
        p.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args: argparse.Namespace) -> int:
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
