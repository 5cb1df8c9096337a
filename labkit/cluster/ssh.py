"""The same job on a real cluster: one torchrun command per host, started all at once.

``ssh_commands`` writes them (``launch_hosts`` runs them in parallel over ssh, output prefixed
by host), ``slurm_script`` writes an sbatch script in which ``srun`` starts one agent per node.
The first host (or the allocation's first node) serves the c10d rendezvous on port 29400.
"""

from __future__ import annotations

import argparse
import os
import shlex
import time
import uuid
from collections.abc import Sequence
from typing import Any

from labkit.errors import LaunchError
from labkit.runtime.launch import Echo, LaunchResult, run_agents, torchrun_args

RDZV_PORT = 29400  # torchrun's default c10d endpoint port


def _env_prefix(env: dict[str, str] | None) -> list[str]:
    return ["env", *(f"{k}={v}" for k, v in sorted((env or {}).items()))] if env else []


def host_torchrun_command(
    hosts: Sequence[str],
    nproc_per_node: int,
    script: str,
    args: Sequence[str] = (),
    *,
    run_id: str,
    rdzv_port: int = RDZV_PORT,
    max_restarts: int = 0,
    env: dict[str, str] | None = None,
    torchrun: str = "torchrun",
) -> list[str]:
    """The torchrun command every host runs: identical on all of them (c10d needs no rank)."""
    return [
        *_env_prefix(env), torchrun,
        *torchrun_args(len(hosts), nproc_per_node, f"{hosts[0]}:{rdzv_port}", run_id,
                       max_restarts),
        script, *args,
    ]


def ssh_commands(
    hosts: Sequence[str],
    nproc_per_node: int,
    script: str,
    args: Sequence[str] = (),
    *,
    run_id: str | None = None,
    workdir: str | None = None,
    rdzv_port: int = RDZV_PORT,
    max_restarts: int = 0,
    env: dict[str, str] | None = None,
    torchrun: str = "torchrun",
) -> list[list[str]]:
    """One ``ssh HOST '<torchrun ...>'`` command per host, to be started in parallel.

    The first host serves the c10d rendezvous on ``rdzv_port``. Use addresses the hosts can
    reach each other by; ``workdir`` is where the script lives on every host.
    """
    if not hosts:
        raise LaunchError("--hosts needs at least one host")
    run_id = run_id or uuid.uuid4().hex[:12]
    remote = shlex.join(host_torchrun_command(
        hosts, nproc_per_node, script, args, run_id=run_id, rdzv_port=rdzv_port,
        max_restarts=max_restarts, env=env, torchrun=torchrun,
    ))
    if workdir:
        remote = f"cd {shlex.quote(workdir)} && {remote}"
    return [["ssh", "-o", "BatchMode=yes", host, remote] for host in hosts]


def launch_hosts(
    hosts: Sequence[str],
    nproc_per_node: int,
    script: str,
    args: Sequence[str] = (),
    *,
    timeout_s: float = 3600.0,
    echo: Echo | None = print,
    **options: Any,
) -> LaunchResult:
    """Run the job on real hosts over ssh, all nodes at once, output prefixed by host."""
    commands = ssh_commands(hosts, nproc_per_node, script, args, **options)
    started = time.monotonic()
    codes, output, timed_out, _ = run_agents(commands, list(hosts), dict(os.environ),
                                             timeout_s, echo)
    return LaunchResult(
        returncode=0 if all(c == 0 for c in codes) else 1, node_returncodes=codes,
        seconds=time.monotonic() - started, timed_out=timed_out, output=output, failures=[],
        published=None, commands=commands, timeout_s=timeout_s,
    )


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--hosts", help="real hosts, comma-separated: run over ssh in parallel")
    group.add_argument("--workdir", help="with --hosts: folder to cd into on every host")
    group.add_argument("--dry-run", action="store_true", help="with --hosts: print commands")


def run(args: argparse.Namespace, env: dict[str, str]) -> LaunchResult | None:
    """``labkit launch --hosts``: print the commands (``--dry-run``, returns None) or run them."""
    hosts = [h for h in args.hosts.split(",") if h]
    options = dict(workdir=args.workdir, max_restarts=args.max_restarts, env=env)
    if args.dry_run:
        for command in ssh_commands(hosts, args.nproc_per_node, args.script, args.args,
                                    **options):
            print(shlex.join(command))
        return None
    return launch_hosts(hosts, args.nproc_per_node, args.script, args.args,
                        timeout_s=args.timeout or 3600.0, **options)
