"""Run a script on N nodes x P ranks with torchrun: simulated nodes here, real hosts there.

On one machine each simulated node is its own ``torchrun`` agent (a separate process), and
the agents meet through c10d rendezvous on 127.0.0.1: the same protocol real nodes use. With
c10d the rendezvous assigns node ranks (torchrun's GROUP_RANK) by sorting the agents by address
and pid; ``--node-rank`` only matters for the static backend, so labkit does not pass it.

For a real cluster, ``labkit.cluster`` writes the same job as one torchrun command per host
(run in parallel over ssh) or as a Slurm batch script.
"""

from __future__ import annotations

import math
import os
import queue
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from labkit.errors import LaunchError, ParameterError
from labkit.runtime.dist import SIMULATED_ENV
from labkit.runtime.failures import (
    LaunchTimeoutError,
    RankFailedError,
    RankFailure,
    RankSignaledError,
    collect_failures,
)
from labkit.runtime.fleet import Fleet, FleetEvent
from labkit.runtime.interrupts import Interrupted, sigint_deferred
from labkit.runtime.ports import free_port
from labkit.runtime.proctree import MARK_ENV, end_launch, launch_processes
from labkit.runtime.publish import PUBLISHED_FILE, RUN_DIR_ENV, read_published
from labkit.runtime.worker import STDERR_TAILS_ENV

FAIL_FAST_GRACE_S = 3.0  # after one node fails, how long the others get to record their errors


LAST_CALL_S = 2  # elastic rendezvous: how long a round waits for more nodes past the minimum

Echo = Callable[[str], None]


@dataclass
class LaunchResult:
    """What a launch did: exit codes, output lines, failures and rank 0's published object."""

    returncode: int
    node_returncodes: list[int | None]
    seconds: float
    timed_out: bool
    output: list[str]
    failures: list[RankFailure]  # every rank that raised, exited non-zero or was killed; by time
    published: Any
    commands: list[list[str]]
    timeout_s: float
    events: list[FleetEvent] = field(default_factory=list)  # what on_tick did to the nodes

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def check(self) -> LaunchResult:
        """Raise the error that explains a failed launch (first failing rank first).

        Failures a restart recovered from (``--max-restarts``) stay in ``failures`` but
        don't raise when the job finished well."""
        __tracebackhide__ = True  # IPython shows the rank's traceback, not this frame
        if self.timed_out:
            raise LaunchTimeoutError(
                f"job still running after its {self.timeout_s:g} s timeout: every process was "
                "ended. A rank that hangs in a collective waits for the others; raise the "
                "timeout only if the job is slow, not stuck.\nLast output:\n"
                + "\n".join(self.output[-20:])
            )
        if self.returncode != 0 and self.failures:
            first = self.failures[0]
            error = RankSignaledError if first.signal else RankFailedError
            raise error(first, self.failures[1:])
        if self.returncode != 0:
            raise LaunchError(
                f"torchrun exited with {self.node_returncodes} and no rank recorded an error.\n"
                "Last output:\n" + "\n".join(self.output[-20:])
            )
        return self


@dataclass
class LaunchConfig:
    """One job: which script, how many simulated nodes and ranks, and its limits."""

    script: str
    args: Sequence[str] = ()
    nnodes: int = 1
    nproc_per_node: int = 1
    max_restarts: int = 0
    timeout_s: float = 300.0
    env: dict[str, str] = field(default_factory=dict)
    join_timeout_s: float | None = None  # how long an agent waits for the others to join
    max_nnodes: int | None = None  # elastic: torchrun --nnodes=nnodes:max_nnodes

    @property
    def elastic(self) -> bool:
        return self.max_nnodes is not None and self.max_nnodes != self.nnodes

    @property
    def nnodes_arg(self) -> str:
        """torchrun's ``--nnodes``: ``N``, or ``MIN:MAX`` for an elastic job."""
        return f"{self.nnodes}:{self.max_nnodes}" if self.elastic else str(self.nnodes)

    def validate(self) -> None:
        if self.nnodes < 1 or self.nproc_per_node < 1:
            raise LaunchError(
                f"need at least 1 node and 1 rank per node, got nnodes={self.nnodes}, "
                f"nproc_per_node={self.nproc_per_node}"
            )
        if self.max_nnodes is not None and self.max_nnodes < self.nnodes:
            raise LaunchError(f"max_nnodes={self.max_nnodes} is below nnodes={self.nnodes}: an "
                              "elastic job runs on nnodes (the minimum) to max_nnodes nodes")
        if self.max_restarts < 0:
            raise LaunchError(f"max_restarts must be >= 0, got {self.max_restarts}")
        if self.timeout_s <= 0:
            raise LaunchError(f"timeout must be positive, got {self.timeout_s}")
        if not Path(self.script).is_file():
            raise LaunchError(f"script not found: {self.script}")


def parse_env(pairs: Sequence[str]) -> dict[str, str]:
    """``["KEY=VALUE", ...]`` (the ``--env`` options) as a dict."""
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ParameterError(f"--env wants KEY=VALUE, got {pair!r}")
        env[key] = value
    return env


def torchrun_args(
    nnodes: int | str,
    nproc_per_node: int,
    endpoint: str,
    run_id: str,
    max_restarts: int = 0,
    extra: Sequence[str] = (),
) -> list[str]:
    """The torchrun options shared by every node of one job (c10d rendezvous)."""
    return [
        f"--nnodes={nnodes}",
        f"--nproc-per-node={nproc_per_node}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={endpoint}",
        f"--rdzv-id={run_id}",
        f"--max-restarts={max_restarts}",
        *extra,
    ]


class NodeNetwork(Protocol):
    """Where simulated nodes live: each node's address, and the command prefix that puts its
    agent there (``labkit.runtime.netlab`` gives each node a network namespace and a veth link)."""

    def address(self, node: int) -> str: ...

    def command_prefix(self, node: int) -> list[str]: ...


class Loopback:
    """The default: every simulated node on 127.0.0.1 of this host."""

    def address(self, node: int) -> str:
        return "127.0.0.1"

    def command_prefix(self, node: int) -> list[str]:
        return []


LOOPBACK = Loopback()


def local_node_command(
    cfg: LaunchConfig, node: int, port: int, run_id: str, network: NodeNetwork = LOOPBACK
) -> list[str]:
    """The torchrun command of one simulated node; node 0 hosts the rendezvous store."""
    wait = cfg.join_timeout_s if cfg.join_timeout_s is not None else min(cfg.timeout_s, 600)
    join_timeout = max(1, math.ceil(wait))
    # An elastic round closes LAST_CALL_S after its minimum joined (torchrun's default: 30 s).
    last_call = f",last_call_timeout={LAST_CALL_S}" if cfg.elastic else ""
    extra = [
        f"--local-addr={network.address(node)}",
        f"--rdzv-conf=is_host={'true' if node == 0 else 'false'},join_timeout={join_timeout}"
        f"{last_call}",
    ]
    return [
        *network.command_prefix(node), sys.executable, "-m", "torch.distributed.run",
        *torchrun_args(cfg.nnodes_arg, cfg.nproc_per_node, f"{network.address(0)}:{port}",
                       run_id, cfg.max_restarts, extra),
        "-m", "labkit.runtime.worker", str(cfg.script), *map(str, cfg.args),
    ]


def run_agents(
    commands: list[list[str]],
    labels: list[str],
    env: dict[str, str],
    timeout_s: float,
    echo: Echo | None = print,
    fail_fast: bool = True,
    initial: int | None = None,
    on_tick: Callable[[Fleet], None] | None = None,
    label_all: bool = False,
) -> tuple[list[int | None], list[str], bool, Fleet]:
    """Start the first ``initial`` agent commands (default: all) in parallel, stream their
    output, call ``on_tick(fleet)`` as the job runs, enforce the timeout. Each line is labelled
    with its agent's label (``label_all``: also the ranks' own ``[nodeN rankR]`` lines).

    Every process they start carries a launch mark in its environment, so whatever happens
    (success, failure, timeout, an exception here) nothing of the launch outlives this call.
    Ctrl-C raises :class:`Interrupted` (one line: processes ended and left), the agents' own
    interrupt tracebacks unshown.
    Returns (exit codes, None for a node never started; output lines; timed_out; the fleet).
    """
    mark = uuid.uuid4().hex
    lines: queue.Queue[str] = queue.Queue()
    fleet = Fleet(commands, labels, {**env, MARK_ENV: mark}, lines, label_all)
    output: list[str] = []
    timed_out = False
    deadline = time.monotonic() + timeout_s
    failed_at: float | None = None

    def drain() -> None:
        while True:
            try:
                line = lines.get_nowait()
            except queue.Empty:
                return
            output.append(line)
            if echo is not None:
                echo(line)

    def stop(quiet: bool) -> int:
        """End every process of the launch (a Ctrl-C meanwhile waits); returns how many."""
        with sigint_deferred():
            fleet.unfreeze_all()
            ended = end_launch(mark, {p.pid for p in fleet.started})
            fleet.reap()
            if quiet:  # the agents' dying words (a SignalException traceback each) stay unshown
                while not lines.empty():
                    output.append(lines.get_nowait())
            drain()
        return ended

    try:
        for node in range(len(commands) if initial is None else initial):
            fleet.start(node)
        while fleet.waiting_for:  # polls every agent (a frozen one never ends by itself)
            drain()
            if on_tick is not None:
                on_tick(fleet)
            now = time.monotonic()
            if now > deadline:
                timed_out = True
                break
            if fail_fast and any(p.returncode not in (None, 0) for p in fleet.started):
                failed_at = failed_at or now
                if now - failed_at > FAIL_FAST_GRACE_S:
                    break
            time.sleep(0.05)
    except KeyboardInterrupt:
        ended = stop(quiet=True)
        left = len(launch_processes(mark, {p.pid for p in fleet.started}))
        raise Interrupted(f"the job ({len(fleet.started)} torchrun agents)", ended, left) from None
    except BaseException:
        stop(quiet=False)
        raise
    stop(quiet=False)
    return [None if p is None else p.returncode for p in fleet.procs], output, timed_out, fleet


def _restart_env(max_restarts: int) -> dict[str, str]:
    """With restarts, ranks get a store of their own instead of the agent's shared one: a
    restarted attempt could read the previous attempt's keys from the shared store and fail to
    connect or hang (pytorch/pytorch#135712). ``$TORCH_DISABLE_SHARE_RDZV_TCP_STORE`` wins."""
    if max_restarts < 1:
        return {}
    return {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE":
            os.environ.get("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")}


def agent_environment(folder: Path, scratch: Path, cfg: LaunchConfig) -> dict[str, str]:
    """The environment of a local launch's agents (and so of its ranks): one thread per rank,
    unbuffered output, the run folder for ``publish`` and failures, a ``TMPDIR`` that leaves
    with the run, and the folder where each rank's stderr tap leaves its last lines."""
    return {
        **os.environ,
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        "PYTHONUNBUFFERED": "1",
        SIMULATED_ENV: "1",  # all ranks share this host's GPUs (labkit.runtime.dist)
        **_restart_env(cfg.max_restarts),
        **cfg.env,
        RUN_DIR_ENV: str(folder),
        "TMPDIR": str(scratch),  # torchrun's log folders go here and leave with the run
        STDERR_TAILS_ENV: str(scratch / "stderr-tails"),  # labkit.runtime.worker's stderr taps
    }


def launch_local(
    script: str | Path,
    *args: str,
    nnodes: int = 1,
    nproc_per_node: int = 1,
    max_restarts: int = 0,
    timeout_s: float = 300.0,
    env: dict[str, str] | None = None,
    echo: Echo | None = print,
    run_dir: str | Path | None = None,
    check: bool = False,
    join_timeout_s: float | None = None,
    nodes_started: int | None = None,
    network: NodeNetwork | None = None,
    max_nnodes: int | None = None,
    on_tick: Callable[[Fleet], None] | None = None,
) -> LaunchResult:
    """Run ``script`` on ``nnodes`` simulated nodes x ``nproc_per_node`` ranks on this machine.

    Each node is a separate torchrun agent; ranks print with a ``[nodeN rankR]`` prefix. The
    whole process tree is ended at ``timeout_s``. With ``check=True`` a failed or timed-out job
    raises (:class:`RankFailedError` carries the failing rank's traceback; its subclass
    :class:`RankSignaledError`, for a rank killed by a signal, names the signal and holds the
    rank's last stderr lines).
    ``nodes_started=k`` starts only the first k agents of the job: what a node that never
    shows up does to the others (they wait ``join_timeout_s`` for it, then fail).
    ``network`` places the nodes (default: all on 127.0.0.1; see ``labkit.runtime.netlab``).

    Elastic: with ``max_nnodes`` above ``nnodes`` the job runs on ``nnodes`` to ``max_nnodes``
    agents (torchrun ``--nnodes=MIN:MAX``); ``nodes_started`` agents start at once and
    ``on_tick(fleet)`` (a :class:`Fleet`) starts, preempts or kills nodes while it runs. Nodes
    leaving is then normal: no fail-fast, and the job succeeded when every node that was not
    taken away on purpose exited 0. torchrun restarts the ranks at each membership change (a
    node joining does not use up ``max_restarts``; a node leaving does).
    """
    cfg = LaunchConfig(str(script), args, nnodes, nproc_per_node, max_restarts, timeout_s,
                       dict(env or {}), join_timeout_s, max_nnodes)
    cfg.validate()
    all_nodes = max_nnodes or nnodes
    started_nodes = nnodes if nodes_started is None else nodes_started
    if not 1 <= started_nodes <= all_nodes:
        bound = f"max_nnodes={max_nnodes}" if cfg.elastic else f"nnodes={nnodes}"
        raise LaunchError(f"nodes_started must be between 1 and {bound}")
    own_dir = run_dir is None
    folder = Path(tempfile.mkdtemp(prefix="labkit-launch-") if own_dir else run_dir)
    folder.mkdir(parents=True, exist_ok=True)  # ranks write published.json and failures/ here
    (folder / PUBLISHED_FILE).unlink(missing_ok=True)  # a reused folder: no stale results
    shutil.rmtree(folder / "failures", ignore_errors=True)
    scratch = folder / "tmp"
    scratch.mkdir(exist_ok=True)
    try:
        port, run_id = free_port(), uuid.uuid4().hex[:12]
        network = network or LOOPBACK
        commands = [local_node_command(cfg, node, port, run_id, network)
                    for node in range(all_nodes)]
        agent_env = agent_environment(folder, scratch, cfg)
        started = time.monotonic()
        codes, output, timed_out, fleet = run_agents(
            commands, [f"torchrun{i}" for i in range(all_nodes)], agent_env, timeout_s, echo,
            fail_fast=not cfg.elastic, initial=started_nodes, on_tick=on_tick,
        )
        stayed = [c for node, c in enumerate(codes) if c is not None and node not in fleet.departed]
        result = LaunchResult(
            returncode=0 if stayed and all(c == 0 for c in stayed) else 1,
            node_returncodes=codes[:started_nodes] if on_tick is None else codes,
            seconds=time.monotonic() - started,
            timed_out=timed_out,
            output=output,
            failures=collect_failures(folder, scratch / "stderr-tails", output),
            published=read_published(folder),
            commands=commands[:started_nodes] if on_tick is None else commands,
            timeout_s=timeout_s,
            events=fleet.events,
        )
    finally:
        shutil.rmtree(folder if own_dir else scratch, ignore_errors=True)
    return result.check() if check else result


def launch_code(code: str, **options: Any) -> LaunchResult:
    """Run a piece of Python source on every rank (written to a temp script); options as for
    :func:`launch_local`. This is what ``%%torchrun`` does with a cell."""
    with tempfile.TemporaryDirectory(prefix="labkit-code-") as run_dir:
        script = Path(run_dir) / "cell.py"
        script.write_text(code)
        return launch_local(script, run_dir=run_dir, **options)
