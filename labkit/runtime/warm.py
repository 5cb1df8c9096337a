"""Warm ranks: a torchrun job whose ranks stay up between notebook cells (``%torchrun_start``).

A :class:`WarmGroup` starts the job a cold ``%%torchrun`` cell would (simulated nodes, c10d
rendezvous, the process group joined on every rank: gloo on CPU, nccl with a GPU per rank)
running ``warm_rank``, once; each cell then travels to every rank over the group's channel
(:mod:`labkit.runtime.warm_channel`) and runs in a namespace kept between cells, its output
streamed back prefixed ``[nodeN rankR]``, what rank 0 publishes back as JSON.

A rank that raises: :class:`CellFailedError` with its traceback, the group kept (ranks still in
the cell get ``grace_s`` to finish, then SIGINT and ``grace_s`` more). A rank that dies, a cell
past its timeout, an error that leaves the process group broken, ranks that do not stop: every
process ended, :class:`WarmGroupEnded` says why and how to start again. Ctrl-C: the ranks' cell
interrupted and the group kept, or ended when a rank cannot be interrupted; one line either way.
``stop()``, the idle timeout, a death between cells and the kernel's end leave nothing either.
``grace_s`` is this group's measured start-up time: both grow with the machine's load.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import queue
import secrets
import shutil
import signal
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from labkit.errors import LaunchError, ParameterError
from labkit.runtime.dist import WARM_ENV
from labkit.runtime.failures import RankFailure, collect_failures, failure_details
from labkit.runtime.fleet import Fleet
from labkit.runtime.interrupts import Interrupted, sigint_deferred
from labkit.runtime.launch import Echo, LaunchConfig, agent_environment, local_node_command
from labkit.runtime.ports import free_port
from labkit.runtime.proctree import MARK_ENV, end_launch, launch_processes
from labkit.runtime.publish import PUBLISHED_FILE, read_published
from labkit.runtime.rank_script import rank_script
from labkit.runtime.warm_cell import (
    CellFailedError,
    CellProgress,
    CellResult,
    Ending,
    WarmGroupEnded,
    processes_text,
    ranks_text,
)
from labkit.runtime.warm_channel import FENCE_ENV, HUB_ENV, TOKEN_ENV, Hub, Joined, Lost, Reply

RANK_SCRIPT = rank_script(__name__)
DEFAULT_TIMEOUT_S = 300.0
"""Start-up limit, and each cell's unless the cell sets its own (``--timeout``)."""
DEFAULT_IDLE_TIMEOUT_S = 1800.0
"""A group no cell used for this long is ended (``--idle-timeout``)."""
TICK_S = 0.1  # how often a waiting loop looks at the agents (a poll, not a limit)


class WarmGroup:
    """A torchrun job on ``nnodes`` simulated nodes x ``nproc_per_node`` ranks that runs notebook
    cells until stopped; ``again`` is the line that starts it again (shown in errors)."""

    def __init__(self, nnodes: int = 1, nproc_per_node: int = 1,
                 timeout_s: float = DEFAULT_TIMEOUT_S,
                 idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
                 env: dict[str, str] | None = None, again: str = "") -> None:
        if nnodes < 1 or nproc_per_node < 1:
            raise ParameterError(f"a warm group needs at least 1 node and 1 rank per node, got "
                                 f"--nnodes {nnodes} --nproc-per-node {nproc_per_node}")
        if timeout_s <= 0 or idle_timeout_s <= 0:
            raise ParameterError(f"--timeout and --idle-timeout must be positive seconds, got "
                                 f"{timeout_s:g} and {idle_timeout_s:g}")
        self.nnodes, self.nproc_per_node = nnodes, nproc_per_node
        self.world_size = nnodes * nproc_per_node
        self.timeout_s, self.idle_timeout_s, self.env = timeout_s, idle_timeout_s, dict(env or {})
        self.again = again or f"%torchrun_start --nnodes {nnodes} --nproc-per-node {nproc_per_node}"
        self.ranks: dict[int, dict[str, Any]] = {}  # rank -> its hello (node, pid, ...)
        self.startup_s = 0.0
        self.cells = 0
        self.ending: Ending | None = None
        self.folder: Path | None = None
        self._started = False
        self._lock = threading.RLock()
        self._closing = threading.Event()
        self._events: queue.Queue = queue.Queue()
        self._agent_lines: collections.deque[str] = collections.deque(maxlen=2000)
        self._hub: Hub | None = None
        self._fleet: Fleet | None = None
        self._mark = uuid.uuid4().hex
        self._fence = f"labkit-fence-{secrets.token_hex(8)}"
        self._last_used = time.monotonic()

    @property
    def up(self) -> bool:
        return self._started and self.ending is None

    @property
    def shape(self) -> str:
        return (f"{self.nnodes} node{'s' * (self.nnodes != 1)} x {self.nproc_per_node} "
                f"rank{'s' * (self.nproc_per_node != 1)}")

    @property
    def grace_s(self) -> float:
        """How long ranks get to finish after a peer failed, or to stop after SIGINT: as long
        as this group took to start (measured; it grows with the machine's load)."""
        return self.startup_s

    def processes(self) -> int:
        """How many processes of this group run now (agents, ranks, their stderr taps)."""
        return len(launch_processes(self._mark))

    def start(self, echo: Echo | None = print) -> float:
        """Start the job and wait, at most ``timeout_s``, until every rank has joined the
        process group and the channel; returns the seconds that took."""
        if self._started:
            raise LaunchError("this warm group was started already")
        self._started = True
        cfg = LaunchConfig(str(RANK_SCRIPT), (), self.nnodes, self.nproc_per_node, 0,
                           self.timeout_s, self.env)
        cfg.validate()
        self.folder = Path(tempfile.mkdtemp(prefix="labkit-warm-"))
        (self.folder / "tmp").mkdir()
        token = secrets.token_hex(16)
        self._hub = Hub(self._events, token)
        port, run_id = free_port(), uuid.uuid4().hex[:12]
        commands = [local_node_command(cfg, node, port, run_id) for node in range(self.nnodes)]
        env = {**agent_environment(self.folder, self.folder / "tmp", cfg), HUB_ENV: self._hub.address,
               TOKEN_ENV: token, FENCE_ENV: self._fence, WARM_ENV: "1", MARK_ENV: self._mark}
        self._fleet = Fleet(commands, [f"torchrun{n}" for n in range(self.nnodes)], env,
                            self._events)
        began = time.monotonic()
        try:
            for node in range(self.nnodes):
                self._fleet.start(node)
            self._await_ranks(began + self.timeout_s, echo)
        except KeyboardInterrupt:
            ending = self._end("interrupted while starting")
            raise Interrupted(f"starting the warm group ({self.shape})", ending.ended,
                              ending.left) from None
        except BaseException:
            if self.ending is None:
                self._end("failed to start")
            raise
        self.startup_s = time.monotonic() - began
        self._last_used = time.monotonic()
        threading.Thread(target=self._watch, name="labkit-warm-watch", daemon=True).start()
        return self.startup_s

    def _await_ranks(self, deadline: float, echo: Echo | None) -> None:
        while len(self.ranks) < self.world_size:
            if time.monotonic() > deadline:
                raise self._ended(f"the warm group did not start within its {self.timeout_s:g} s "
                                  f"timeout ({len(self.ranks)} of {self.world_size} ranks ready)")
            if (node := self._agent_exited()) is not None:
                raise self._died(None, "while the group started", node)
            event = self._next_event(deadline)
            if isinstance(event, str):
                self._show(event, echo, None)
            elif isinstance(event, Joined):
                self.ranks[event.rank] = event.hello
            elif isinstance(event, Lost):
                raise self._died(event.rank, "while the group started")

    def run_cell(self, source: str, shared: dict[str, Any] | None = None,
                 timeout_s: float | None = None, echo: Echo | None = print) -> CellResult:
        """Run ``source`` on every rank, with ``shared`` (JSON-able) defined there first; raises
        :class:`CellFailedError`, :class:`WarmGroupEnded` or :class:`Interrupted`."""
        with self._lock:
            self._check_up()
            timeout = self.timeout_s if timeout_s is None else timeout_s
            if timeout <= 0:
                raise ParameterError(f"--timeout must be positive seconds, got {timeout:g}")
            self.cells += 1
            cell = CellProgress(self.cells)
            compile(source, f"<cell {cell.number}>", "exec")  # a SyntaxError raises here, once
            message = {"op": "cell", "cell": cell.number, "source": source,
                       "vars": dict(shared or {})}
            (self.folder / PUBLISHED_FILE).unlink(missing_ok=True)
            began = time.monotonic()
            try:
                for rank in sorted(self.ranks):
                    if self._hub.send(rank, message):
                        cell.sent.add(rank)
                self._follow(cell, began + timeout, timeout, echo)
            except KeyboardInterrupt:
                self._interrupt(cell, echo)
            finally:
                self._last_used = time.monotonic()
            if broken := cell.broken(self.ranks):
                raise self._ended(*broken)
            if failures := cell.failures(self.ranks):
                raise CellFailedError(failures[0], failures[1:])
            return CellResult(cell.number, time.monotonic() - began, read_published(self.folder))

    def _check_up(self) -> None:
        if not self._started:
            raise LaunchError("this warm group was not started")
        if self.ending is None and (self._hub.lost or self._agent_exited() is not None):
            raise self._died(min(self._hub.lost) if self._hub.lost else None, "between cells",
                             self._agent_exited())
        if self.ending is not None:
            raise self.gone()

    def gone(self) -> WarmGroupEnded:
        """The error for a cell sent to this group after it ended."""
        return WarmGroupEnded(
            f"the warm group has ended: {self.ending.reason} ({self.ending.counts}). Start it "
            f"again with {self.again} (its variables are gone), or run %torchrun_stop to go "
            "back to cold cells; --cold runs one cell as a job of its own", self.ending)

    def _follow(self, cell: CellProgress, deadline: float, timeout: float,
                echo: Echo | None) -> None:
        while not cell.complete:
            now = time.monotonic()
            if now > deadline:
                raise self._ended(f"the cell ran past its {timeout:g} s timeout "
                                  f"({cell.waiting_for})")
            if cell.failed_at is not None and cell.interrupted_at is None \
                    and now > cell.failed_at + self.grace_s:
                self._signal(cell.pending, signal.SIGINT)
                cell.interrupted_at = now
            elif cell.interrupted_at is not None and now > cell.interrupted_at + self.grace_s:
                first = cell.failures(self.ranks)[0]
                raise self._ended(
                    f"rank {first.rank} failed ({first.error.splitlines()[0]}) and "
                    f"{ranks_text(cell.pending)} did not stop, not even when interrupted (waiting "
                    "in a collective for it?)", failure_details(first))
            if (node := self._agent_exited()) is not None:
                raise self._died(None, "during the cell", node)
            self._take(cell, self._next_event(deadline), echo)

    def _take(self, cell: CellProgress, event: object, echo: Echo | None) -> None:
        if isinstance(event, str):
            self._show(event, echo, cell)
        elif isinstance(event, Reply) and event.data.get("cell") == cell.number:
            cell.replies[event.rank] = event.data
            if event.data.get("status") == "error" and cell.failed_at is None:
                cell.failed_at = time.monotonic()
        elif isinstance(event, Lost):
            raise self._died(event.rank, "during the cell")

    def _interrupt(self, cell: CellProgress, echo: Echo | None) -> None:
        """Ctrl-C during a cell: SIGINT the ranks still in it; keep the group when they all
        stop within ``grace_s``, else end it. Raises :class:`Interrupted` either way."""
        running, twice = cell.pending, False
        try:
            self._signal(running, signal.SIGINT)
            deadline = time.monotonic() + self.grace_s
            while not cell.complete and time.monotonic() < deadline \
                    and self._agent_exited() is None:
                self._take(cell, self._next_event(deadline), echo)
        except KeyboardInterrupt:
            twice = True  # a second Ctrl-C: end the group now
        except WarmGroupEnded as exc:  # a rank died meanwhile; the group is gone
            raise Interrupted(f"the cell, and the warm group with it ({exc.ending.reason})",
                              exc.ending.ended, exc.ending.left,
                              hint=f"Start it again with {self.again}.") from None
        if cell.complete:
            where = f"on {ranks_text(running)}" if running else "(it had ended on every rank)"
            raise Interrupted(f"the cell {where}", kept=(
                f"the warm group is still up ({processes_text(self.processes())}), ready for "
                "the next cell")) from None
        why = "Ctrl-C came twice" if twice else (
            f"{ranks_text(cell.pending or running)} could not be interrupted (stuck in native "
            "code, such as a collective)" if cell.pending or running else cell.waiting_for)
        ending = self._end(why)
        raise Interrupted(f"the warm group, since {why}", ending.ended, ending.left,
                          hint=f"Start it again with {self.again}.") from None

    def stop(self, reason: str = "stopped by %torchrun_stop") -> Ending:
        """End every process of the group (the ranks first, by closing the channel); returns
        how it ended (the earlier ending when it had ended already)."""
        with self._lock:
            return self.ending or self._end(reason, graceful=True)

    def _watch(self) -> None:
        """Between cells: end the group when it has been idle too long, or when a rank or an
        agent died (it would be half-alive); the next cell says why."""
        while not self._closing.wait(TICK_S):
            if not self._lock.acquire(blocking=False):
                continue  # a cell is running: it watches the group itself
            try:
                if not self.up:
                    return
                if self._hub.lost or self._agent_exited() is not None:
                    self._died(min(self._hub.lost) if self._hub.lost else None, "between cells",
                               self._agent_exited())
                elif time.monotonic() - self._last_used > self.idle_timeout_s:
                    self._end(f"idle for {self.idle_timeout_s:g} s (--idle-timeout)", graceful=True)
            finally:
                self._lock.release()

    def _ended(self, reason: str, details: str = "", ending: Ending | None = None
               ) -> WarmGroupEnded:
        """End the group now (unless ``ending`` says how it ended); the error that says why and
        how to start it again."""
        ending = ending or self._end(reason)
        gone = " (its variables are gone)" if self.startup_s else ""
        text = (f"{reason}. The warm group was ended ({ending.counts}). Start it again with "
                f"{self.again}{gone}.")
        return WarmGroupEnded(text + (f"\n\n{details}" if details else ""), ending)

    def _died(self, rank: int | None, when: str, node: int | None = None) -> WarmGroupEnded:
        """End the group after a rank or an agent died; the error names the first rank that
        died and how (torchrun's report of its exit code and its stderr tap, read after)."""
        if node is None and rank is not None:
            node = self.ranks.get(rank, {}).get("fleet_node")
        before = self.processes()  # counted as ended: torchrun's agent may end some itself
        deadline = time.monotonic() + self.grace_s
        while node is not None and self._fleet.procs[node].poll() is None \
                and time.monotonic() < deadline:  # its agent reports how the rank ended
            self._show(self._next_event(deadline), None, None)
        ending = self._end("died", before=before)
        first: RankFailure | None = ending.failures[0] if ending.failures else None
        if first is not None:
            how = "failed" if first.traceback else "died"
            reason = f"rank {first.rank} (node {first.node}) {how} {when}: {first.error}"
        elif rank is not None:
            reason = f"rank {rank} ended {when} (its connection closed)"
        else:
            reason = f"the torchrun agent of node {node} exited {when}"
        self.ending = dataclasses.replace(ending, reason=reason)
        return self._ended(reason, failure_details(first) if first else "", self.ending)

    def _end(self, reason: str, graceful: bool = False, before: int | None = None) -> Ending:
        """End every process of the group (a Ctrl-C meanwhile waits) and remove its folder.
        ``graceful``: close the channel and give the agents ``grace_s`` to exit first.
        ``before``: how many processes it had when the end began (default: now)."""
        with sigint_deferred():
            before = self.processes() if before is None else before
            self._closing.set()
            if self._hub is not None:
                self._hub.close()  # every rank exits on its own at once
            started = self._fleet.started if self._fleet is not None else []
            deadline = time.monotonic() + (self.grace_s if graceful else 0.0)
            while any(p.poll() is None for p in started) and time.monotonic() < deadline:
                time.sleep(TICK_S / 10)
            end_launch(self._mark, {p.pid for p in started})
            if self._fleet is not None:
                self._fleet.reap()
            while (event := self._next_event(0.0)) is not None:
                self._show(event, None, None)
            left = self.processes()
            failures: list[RankFailure] = []
            if self.folder is not None:
                tails = self.folder / "tmp" / "stderr-tails"
                failures = [dataclasses.replace(f, stderr=tuple(
                    line for line in f.stderr if self._fence not in line))  # the protocol's own
                    for f in collect_failures(self.folder, tails, list(self._agent_lines))]
                shutil.rmtree(self.folder, ignore_errors=True)
        self.ending = Ending(reason, before, left, tuple(failures))
        return self.ending

    def _next_event(self, deadline: float) -> object:
        """The next output line or channel event, waiting at most ``TICK_S`` (None: nothing)."""
        try:
            return self._events.get(timeout=max(0.0, min(TICK_S, deadline - time.monotonic())))
        except queue.Empty:
            return None

    def _show(self, event: object, echo: Echo | None, cell: CellProgress | None) -> None:
        """An output line: a fence is counted, an agent's line kept, the rest echoed."""
        if not isinstance(event, str):
            return
        if self._fence in event:
            if cell is not None and event.rsplit(" ", 1)[-1] == str(cell.number):
                cell.fences += 1
            return
        if not event.startswith("[node"):
            self._agent_lines.append(event)  # torchrun's reports: how a rank ended
            if cell is None:
                return  # outside a cell (the start) torchrun's lines feed a failure's report
        if echo is not None:
            echo(event)

    def _agent_exited(self) -> int | None:
        """The first node whose torchrun agent has exited, else None."""
        procs = self._fleet.procs if self._fleet is not None else []
        return next((n for n, p in enumerate(procs) if p is not None and p.poll() is not None),
                    None)

    def _signal(self, ranks: list[int], sig: int) -> None:
        for rank in ranks:
            try:
                os.kill(int(self.ranks[rank]["pid"]), sig)
            except (ProcessLookupError, KeyError):
                pass
