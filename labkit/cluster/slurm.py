"""The same job under Slurm: an sbatch script in which ``srun`` starts one torchrun agent per
node; the allocation's first node serves the c10d rendezvous."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Sequence
from pathlib import Path

from labkit.cluster.ssh import RDZV_PORT


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


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--slurm", metavar="FILE", help="write an sbatch script instead")
    group.add_argument("--gpus-per-node", type=int, help="with --slurm: #SBATCH --gpus-per-node")


def run(args: argparse.Namespace, env: dict[str, str]) -> int:
    """Write the sbatch script ``labkit launch --slurm FILE`` asks for."""
    text = slurm_script(args.nnodes, args.nproc_per_node, args.script, args.args,
                        max_restarts=args.max_restarts, env=env,
                        gpus_per_node=args.gpus_per_node)
    Path(args.slurm).write_text(text)
    print(f"wrote {args.slurm}: submit it with `sbatch {args.slurm}`")
    return 0
