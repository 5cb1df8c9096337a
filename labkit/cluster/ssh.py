"""The same job on real hosts over ssh: one torchrun agent per host, all started at once.

Each host runs the lab's own interpreter (``<workdir>/.venv/bin/python -m
torch.distributed.run``, or ``python``): a non-interactive ssh shell has the login PATH, not
the lab's venv. The first host serves the c10d store (``is_host=true``, the others ``false``)
and every agent advertises the name it was given (``--local-addr``), because a host whose own
name resolves to loopback (Debian's ``127.0.1.1 <hostname>``) would otherwise advertise an
address no other host can reach. The rendezvous port is one that is free on the first host
when the launch starts, so two jobs never share a store. When the host's interpreter has labkit,
each rank runs under labkit's worker, so its lines arrive whole and labelled ``[nodeN rankR]``.

Remote processes end on every exit path: each ssh has a terminal (``-tt``), so a connection
that drops hangs up its torchrun, and afterwards ``labkit.cluster.remote`` ends and counts
whatever still carries the launch's mark on each host.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from labkit.cluster import remote
from labkit.cluster.hosts import Host, SshSettings, parse_hosts
from labkit.errors import LaunchError
from labkit.runtime.failures import LaunchTimeoutError
from labkit.runtime.fleet import Fleet
from labkit.runtime.launch import Echo, LaunchResult, run_agents, torchrun_args
from labkit.runtime.ports import REMOTE_FREE_PORT
from labkit.runtime.proctree import MARK_ENV

RDZV_PORT = 29400  # torchrun's default c10d endpoint port: only in a dry run's commands
# What the first host is asked before the launch: a port free there, and whether its interpreter
# has labkit (then each rank runs under labkit's worker: whole lines, each labelled by its rank).
HOST_PROBE = (f"{REMOTE_FREE_PORT}; import importlib.util; "
              "print(port, importlib.util.find_spec('labkit') is not None)")
WORKER = ("-m", "labkit.runtime.worker")
SSH_FAILED = 255  # ssh's own exit code: it could not connect or authenticate
NOT_FOUND = 127  # the shell's: the interpreter (or cd's folder) is not there
LOOPBACK_PEER = re.compile(r"remote=\[127\.")  # gloo dialled a rank that advertised loopback
LOOPBACK_HINT = (". A rank advertised a loopback address (its hostname resolves to 127.x, as "
                 "Debian's 127.0.1.1 does): set GLOO_SOCKET_IFNAME (and NCCL_SOCKET_IFNAME) to "
                 "the interface the hosts share, e.g. --env GLOO_SOCKET_IFNAME=eth0")


def remote_python(python: str | None, workdir: str | None) -> str:
    """The interpreter each host runs: ``python``, else the lab's venv in ``workdir``, else
    the path of this one (the same path on every host, as on a shared filesystem)."""
    if python:
        return python
    return f"{workdir.rstrip('/')}/.venv/bin/python" if workdir else sys.executable


def host_command(
    hosts: Sequence[Host], node: int, nproc_per_node: int, script: str, args: Sequence[str] = (),
    *, run_id: str, rdzv_port: int, mark: str = "", python: str = "python",
    workdir: str | None = None, max_restarts: int = 0, env: dict[str, str] | None = None,
    worker: bool = False,
) -> str:
    """The shell command host ``node`` runs: cd, a ``TMPDIR`` of the launch's own (removed by
    the cleanup after the job), then its torchrun agent with the launch mark.
    With ``worker`` each rank runs under labkit's worker (``[nodeN rankR]`` on whole lines:
    torchrun's ranks write unbuffered, so lines of two ranks would interleave)."""
    extra = [f"--local-addr={hosts[node].name}",
             f"--rdzv-conf=is_host={'true' if node == 0 else 'false'}"]
    # No PYTHONUNBUFFERED: on the remote terminal Python's stdout is line-buffered already,
    # and unbuffered ranks write a line and its newline apart, so lines of two ranks interleave.
    variables = {**(env or {}), **({MARK_ENV: mark} if mark else {})}
    argv = [
        "env", *(f"{k}={v}" for k, v in sorted(variables.items())),
        python, "-m", "torch.distributed.run",
        *torchrun_args(len(hosts), nproc_per_node, f"{hosts[0].name}:{rdzv_port}", run_id,
                       max_restarts, extra),
        *(WORKER if worker else ()), script, *args,
    ]
    command = "exec " + shlex.join(argv)
    if mark:  # torchrun's log folders (and the ranks' temp files) go where the cleanup removes
        scratch = remote.scratch_folder(mark)
        command = f'export TMPDIR={scratch} && mkdir -p "$TMPDIR" && {command}'
    return f"cd {shlex.quote(workdir)} && {command}" if workdir else command


def ssh_commands(
    hosts: Sequence[str | Host], nproc_per_node: int, script: str, args: Sequence[str] = (),
    *, run_id: str | None = None, rdzv_port: int = RDZV_PORT, mark: str = "",
    python: str | None = None, workdir: str | None = None, max_restarts: int = 0,
    env: dict[str, str] | None = None, ssh: SshSettings | None = None, worker: bool = False,
) -> list[list[str]]:
    """One ``ssh -tt HOST '<torchrun ...>'`` command per host, to be started in parallel."""
    parsed = [h if isinstance(h, Host) else Host.parse(h) for h in hosts]
    if not parsed:
        raise LaunchError("--hosts needs at least one host")
    run_id = run_id or uuid.uuid4().hex[:12]
    interpreter = remote_python(python, workdir)
    settings = ssh or SshSettings()
    return [
        [*settings.argv(host, "-tt", "-o", "LogLevel=ERROR"),
         host_command(parsed, node, nproc_per_node, script, args, run_id=run_id,
                      rdzv_port=rdzv_port, mark=mark, python=interpreter, workdir=workdir,
                      max_restarts=max_restarts, env=env, worker=worker)]
        for node, host in enumerate(parsed)
    ]


def probe_host(host: Host, python: str, workdir: str | None, ssh: SshSettings
               ) -> tuple[int, bool]:
    """Asked of ``host`` itself (one short ssh): a port free there now, and whether its
    interpreter has labkit. A host that cannot be reached or has no such interpreter is
    explained here, before anything starts."""
    probe = f"{python} -c {shlex.quote(HOST_PROBE)}"
    if workdir:
        probe = f"cd {shlex.quote(workdir)} && {probe}"
    try:
        proc = subprocess.run([*ssh.argv(host), probe], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=remote.CLEANUP_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise LaunchError(f"{host.name}: no answer over ssh in {exc.timeout:g} s") from None
    words = proc.stdout.split()
    if proc.returncode != 0 or len(words) != 2 or not words[0].isdigit():
        why = explain_failure(proc.returncode, proc.stderr.splitlines(), python)
        raise LaunchError(f"{host.name}: {why}")
    return int(words[0]), words[1] == "True"


def explain_failure(code: int | None, lines: Sequence[str], python: str) -> str:
    """One phrase for how a host's ssh ended: ssh itself (255), not found (127) or torchrun."""
    last = next((line.strip() for line in reversed(lines) if line.strip()), "")
    if code == SSH_FAILED:
        hint = (" (host keys must be in known_hosts: ssh once by hand, or ssh-keyscan)"
                if "verification" in last else "")
        return f"ssh failed (exit 255): {last or 'no message'}{hint}"
    if code == NOT_FOUND:
        return (f"not found on the host (exit 127): {last}. The host runs {python}: pass "
                "--workdir with the lab's folder (its .venv) or --python")
    cause = _root_cause(lines)
    hint = LOOPBACK_HINT if any(LOOPBACK_PEER.search(line) for line in lines) else ""
    return f"torchrun exited with code {code}" + (f": {cause}" if cause else "") + hint


def _root_cause(lines: Sequence[str]) -> str:
    """torchrun's "Root Cause (first observed failure)" as one phrase, e.g. ``rank 2
    (local_rank: 0) exited with code 1``; empty when the agent printed none."""
    starts = [i for i, line in enumerate(lines) if line.startswith("Root Cause")]
    if not starts:
        return ""
    fields = {}
    for line in lines[starts[-1]:]:
        key, sep, value = line.strip().partition(":")
        if sep and key.strip() in ("rank", "exitcode"):
            fields.setdefault(key.strip(), value.strip())
    rank, code = fields.get("rank", "?"), fields.get("exitcode", "?").split(" (")[0]
    return f"rank {rank} exited with code {code} (its output is above)"


@dataclass
class HostsResult(LaunchResult):
    """A launch over ssh, with the host that failed first and what each host had left."""

    hosts: list[str] = field(default_factory=list)
    first_failure: str = ""  # "h2: ssh failed (exit 255): ...", empty when none failed
    cleanup: list[remote.RemoteCleanup] = field(default_factory=list)

    def check(self) -> HostsResult:
        """Raise one line that names the host that failed first (or the timeout) and what the
        cleanup found; return self when the job succeeded."""
        after = remote.describe(self.cleanup)
        if self.timed_out:
            raise LaunchTimeoutError(f"job still running after its {self.timeout_s:g} s timeout; "
                                     f"{after}")
        if self.returncode != 0:
            raise LaunchError(f"{self.first_failure or 'a host failed'}; {after}")
        return self


class _FirstFailure:
    """on_tick: notes which host's agent ended badly first."""

    def __init__(self) -> None:
        self.node: int | None = None

    def __call__(self, fleet: Fleet) -> None:
        if self.node is None:
            for node, proc in enumerate(fleet.procs):
                if proc is not None and proc.poll() not in (None, 0):
                    self.node = node
                    return


def launch_hosts(
    hosts: Sequence[str | Host], nproc_per_node: int, script: str, args: Sequence[str] = (), *,
    timeout_s: float | None = None, echo: Echo | None = print, rdzv_port: int | None = None,
    python: str | None = None, workdir: str | None = None, max_restarts: int = 0,
    env: dict[str, str] | None = None, ssh: SshSettings | None = None,
) -> HostsResult:
    """Run the job on real hosts over ssh, all at once, output prefixed by host.

    No time limit unless ``timeout_s`` is given. On any exit (success, a failed or unreachable
    host, the timeout, Ctrl-C, SIGTERM) every remote process of the job is ended and counted.
    """
    parsed = [h if isinstance(h, Host) else Host.parse(h) for h in hosts]
    if timeout_s is not None and timeout_s <= 0:
        raise LaunchError(f"timeout must be positive, got {timeout_s}")
    settings = ssh or SshSettings()
    interpreter = remote_python(python, workdir)
    free, has_labkit = probe_host(parsed[0], interpreter, workdir, settings)
    mark = uuid.uuid4().hex
    commands = ssh_commands(parsed, nproc_per_node, script, args, rdzv_port=rdzv_port or free,
                            mark=mark, python=interpreter, workdir=workdir,
                            max_restarts=max_restarts, env=env, ssh=settings, worker=has_labkit)
    labels = [h.name for h in parsed]
    first = _FirstFailure()
    started = time.monotonic()
    codes: list[int | None] = [None] * len(parsed)
    output: list[str] = []
    timed_out = False
    try:
        codes, output, timed_out, _ = run_agents(
            commands, labels, dict(os.environ), math.inf if timeout_s is None else timeout_s, echo,
            on_tick=first, label_all=True)
    finally:
        cleanup = remote.end_remote(parsed, settings, mark)
        if echo is not None:
            echo(remote.describe(cleanup))
    failure = ""
    if first.node is not None:
        node = first.node
        mine = [line.removeprefix(f"[{labels[node]}] ") for line in output
                if line.startswith(f"[{labels[node]}] ")]
        failure = f"{labels[node]}: {explain_failure(codes[node], mine, interpreter)}"
    return HostsResult(
        returncode=0 if all(c == 0 for c in codes) else 1, node_returncodes=codes,
        seconds=time.monotonic() - started, timed_out=timed_out, output=output, failures=[],
        published=None, commands=commands, timeout_s=math.inf if timeout_s is None else timeout_s,
        hosts=labels, first_failure=failure, cleanup=cleanup,
    )


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--hosts", help="real hosts, comma-separated ([user@]host): one agent "
                       "each, started in parallel over ssh")
    group.add_argument("--workdir", help="folder to cd into on every host (the lab's; its "
                       ".venv/bin/python runs torchrun unless --python)")
    group.add_argument("--python", help="interpreter on every host or node (--hosts default: "
                       "WORKDIR/.venv/bin/python, else this one's path; --slurm: this one's)")
    group.add_argument("--rdzv-port", type=int, help="c10d port on the first host (default: "
                       "one free there when the launch starts)")
    group.add_argument("--ssh-port", type=int, help="ssh port of every host")
    group.add_argument("--ssh-user", help="ssh user for hosts given without user@")
    group.add_argument("--ssh-identity", metavar="FILE", help="ssh -i FILE")
    group.add_argument("--ssh-config", metavar="FILE", help="ssh -F FILE")
    group.add_argument("--ssh-option", action="append", default=[], metavar="KEY=VALUE",
                       help="ssh -o KEY=VALUE (repeatable)")
    group.add_argument("--dry-run", action="store_true", help="print the ssh commands only")


def settings_from(args: argparse.Namespace) -> SshSettings:
    return SshSettings(port=args.ssh_port, user=args.ssh_user, identity=args.ssh_identity,
                       config=args.ssh_config, options=tuple(args.ssh_option))


def run(args: argparse.Namespace, env: dict[str, str]) -> HostsResult | None:
    """``labkit launch --hosts``: print the commands (``--dry-run``, returns None) or run them."""
    hosts = parse_hosts(args.hosts)
    options = dict(workdir=args.workdir, python=args.python, max_restarts=args.max_restarts,
                   env=env, ssh=settings_from(args))
    if args.dry_run:
        port = args.rdzv_port or RDZV_PORT
        if not args.rdzv_port:
            print(f"# a real launch asks {hosts[0].name} for a free rendezvous port instead of "
                  f"{RDZV_PORT}")
        for command in ssh_commands(hosts, args.nproc_per_node, args.script, args.args,
                                    rdzv_port=port, **options):
            print(shlex.join(command))
        return None
    return launch_hosts(hosts, args.nproc_per_node, args.script, args.args,
                        timeout_s=args.timeout, rdzv_port=args.rdzv_port, **options)
