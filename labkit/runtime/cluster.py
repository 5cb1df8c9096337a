"""The same job on a real cluster: one torchrun command per host, started all at once.

``ssh_commands`` writes them (``launch_hosts`` runs them in parallel over ssh, output prefixed
by host), ``slurm_script`` writes an sbatch script in which ``srun`` starts one agent per node.
The first host (or the allocation's first node) serves the c10d rendezvous on port 29400.
"""

from __future__ import annotations

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


def slurm_script(
    nnodes: int,
    nproc_per_node: int,
    script: str,
    args: Sequence[str] = (),
    *,
    job_name: str = "labkit",
    time_limit: str = "01:00:00",
    partition: str | None = None,
    gpus_per_node: int | None = None,
    rdzv_port: int = RDZV_PORT,
    max_restarts: int = 0,
    env: dict[str, str] | None = None,
) -> str:
    """An sbatch script: one torchrun per node (``srun --ntasks-per-node=1``), c10d on the
    first node of the allocation, the Slurm job id as the rendezvous id."""
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={job_name}",
        f"#SBATCH --nodes={nnodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --time={time_limit}",
    ]
    if partition:
        lines.append(f"#SBATCH --partition={partition}")
    if gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={gpus_per_node}")
    lines += ["", "set -euo pipefail",
              'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)']
    lines += [f"export {k}={shlex.quote(v)}" for k, v in sorted((env or {}).items())]
    torchrun = " ".join([
        "torchrun", '--nnodes="$SLURM_NNODES"', f"--nproc-per-node={nproc_per_node}",
        "--rdzv-backend=c10d", f'--rdzv-endpoint="$head_node:{rdzv_port}"',
        '--rdzv-id="$SLURM_JOB_ID"', f"--max-restarts={max_restarts}", shlex.join([script, *args]),
    ])
    lines += ["", f"srun {torchrun}", ""]
    return "\n".join(lines)
