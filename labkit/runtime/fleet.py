"""What a scheduler does to the nodes of a running launch: start one late (a scale-up), send it a
preemption notice (SIGTERM), kill it, kill one of its ranks, or freeze it (SIGSTOP), each
recorded as a ``FleetEvent`` with the time it happened.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import threading
import time
from dataclasses import dataclass

from labkit.errors import LaunchError
from labkit.runtime.dist import NODE_ENV
from labkit.runtime.proctree import children


def pump_lines(stream, label: str, lines: queue.Queue,  # noqa: ANN001 (a text stream)
               label_all: bool = False) -> None:
    """Put each line on ``lines`` labelled ``[label] ``; a rank's ``[nodeN rankR]`` line keeps
    its own label unless ``label_all`` (a real host's name goes in front of it)."""
    for line in stream:
        line = line.rstrip("\r\n")  # \r: a remote terminal's (ssh -tt) line ends
        lines.put(line if line.startswith("[node") and not label_all else f"[{label}] {line}")
    stream.close()


@dataclass(frozen=True)
class FleetEvent:
    """Something a scheduler did to a node during a launch, ``seconds`` after it started."""

    seconds: float
    node: int
    action: str  # "start", "terminate" (SIGTERM: a preemption notice), "kill", "kill_rank",


class Fleet:
    """The running agents of one launch, as a scheduler sees them: start a node late (scale
    up), send it a preemption notice (SIGTERM to its torchrun agent, which forwards it to its
    ranks and gives them 30 s) or take it away hard (SIGKILL the agent and its ranks).

    ``launch_local(on_tick=f)`` calls ``f(fleet)`` about every 50 ms while the job runs."""

    def __init__(self, commands: list[list[str]], labels: list[str], env: dict[str, str],
                 lines: queue.Queue, label_all: bool = False) -> None:
        self._commands, self._labels, self._env, self._lines = commands, labels, env, lines
        self._label_all = label_all
        self.procs: list[subprocess.Popen | None] = [None] * len(commands)
        self.pumps: list[threading.Thread] = []
        self.events: list[FleetEvent] = []
        self.departed: set[int] = set()  # nodes terminated, killed or frozen on purpose
        self.frozen: dict[int, list[int]] = {}  # node: its stopped pids (agent first)
        self.started_at = time.monotonic()

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started_at

    def _record(self, node: int, action: str) -> None:
        self.events.append(FleetEvent(round(self.elapsed_s, 3), node, action))

    def start(self, node: int) -> None:
        """Start node ``node``'s agent (once); in an elastic job it joins the running one."""
        if self.procs[node] is not None:
            raise LaunchError(f"node {node} was started already")
        proc = subprocess.Popen(
            self._commands[node], env={**self._env, NODE_ENV: str(node)}, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, errors="replace",
            start_new_session=True,
        )
        self.procs[node] = proc
        pump = threading.Thread(target=pump_lines, args=(proc.stdout, self._labels[node], self._lines,
                                                          self._label_all),
                                daemon=True)
        pump.start()
        self.pumps.append(pump)
        self._record(node, "start")

    def running(self, node: int) -> bool:
        proc = self.procs[node]
        return proc is not None and proc.poll() is None and node not in self.departed

    def terminate(self, node: int) -> None:
        """A preemption notice: SIGTERM to the node's agent (torchrun passes it to its ranks)."""
        self._signal(node, signal.SIGTERM, "terminate")

    def kill(self, node: int) -> None:
        """The node is gone at once: SIGKILL its agent and the agent's ranks (torchrun ranks
        live in sessions of their own and would outlive a killed agent)."""
        proc = self.procs[node]
        ranks = children(proc.pid) if proc is not None and proc.poll() is None else []
        self._signal(node, signal.SIGKILL, "kill")
        for pid in ranks:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def kill_rank(self, node: int, pid: int) -> None:
        """One rank process dies (an OOM kill, a segfault): SIGKILL ``pid``, a rank of
        ``node``. Its agent stays and, with restarts left, re-forms the group."""
        proc = self.procs[node]
        if proc is None or proc.poll() is not None or pid not in children(proc.pid):
            raise LaunchError(f"pid {pid} is not a running rank of node {node}")
        os.kill(pid, signal.SIGKILL)
        self._record(node, "kill_rank")

    def freeze(self, node: int) -> None:
        """The node stops answering but its sockets stay open (a hung host, a network that
        drops packets): SIGSTOP its agent and ranks. Peers learn only from their timeouts."""
        proc = self.procs[node]
        ranks = children(proc.pid) if proc is not None and proc.poll() is None else []
        self._signal(node, signal.SIGSTOP, "freeze")
        self.frozen[node] = [proc.pid, *ranks]
        for pid in ranks:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass

    def unfreeze_all(self) -> None:
        """SIGKILL what was frozen: a stopped process would sit on a SIGTERM forever."""
        for pids in self.frozen.values():
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.frozen.clear()

    @property
    def waiting_for(self) -> list[subprocess.Popen]:
        """The agents the job still waits for: started, not frozen, not exited."""
        return [p for node, p in enumerate(self.procs)
                if p is not None and node not in self.frozen and p.poll() is None]

    def _signal(self, node: int, sig: int, action: str) -> None:
        proc = self.procs[node]
        if proc is None or proc.poll() is not None:
            raise LaunchError(f"node {node} is not running")
        self.departed.add(node)
        proc.send_signal(sig)
        self._record(node, action)

    def reap(self, wait_s: float = 10.0) -> None:
        """Wait for every started agent to exit (SIGKILL one still there after ``wait_s``) and
        for the rest of its output to be read."""
        for proc in self.started:
            try:
                proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for pump in self.pumps:
            pump.join(timeout=5)

    @property
    def started(self) -> list[subprocess.Popen]:
        return [p for p in self.procs if p is not None]
