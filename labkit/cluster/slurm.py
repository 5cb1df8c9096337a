"""The same job under Slurm: ``labkit launch --slurm job.sbatch`` writes a batch script in which
``srun`` starts one torchrun agent per node; the node the script runs on (the allocation's
first) serves the c10d rendezvous on a port picked free there for this job.

What each line is for (docs/cluster.md, "Slurm", has the why with Slurm's documentation):

- the interpreter by absolute path, as ``python -m torch.distributed.run``: the nodes need no
  ``torchrun`` on their PATH, and every node runs the lab's own environment;
- the training script by absolute path and ``#SBATCH --chdir`` set to the folder the batch
  script was written from: ``sbatch`` works from any directory;
- ``#SBATCH --cpus-per-task`` (default: one CPU per rank) and ``SRUN_CPUS_PER_TASK``: since
  Slurm 22.05 ``srun`` does not inherit ``--cpus-per-task`` from ``sbatch``, and with CPU
  binding on, a node's agent and all its ranks would share one CPU;
- a ``TMPDIR`` of the job's own on each node, removed when the agent exits: torchrun writes a
  log folder per agent there and never removes it;
- ``srun --kill-on-bad-exit=1``: one node's agent failing ends the whole job instead of leaving
  the other nodes waiting in a collective until the time limit;
- ``#SBATCH --time`` from ``--timeout`` (whole minutes, rounded up), else the partition's
  default limit;
- a rendezvous port of the job's own, and ``is_host`` set on every node: the first node must
  host the store (a busy port fails the job), the others only join it, so a job never joins
  another job's store.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from labkit.errors import LaunchError, ParameterError
from labkit.runtime.ports import REMOTE_FREE_PORT

JOB_NAME = "labkit"
# Asks the kernel for a free TCP port on the node the batch script runs on.
_FREE_PORT = f"{REMOTE_FREE_PORT}; print(port)"
# On every node: one torchrun agent. $0 is the interpreter, "$@" the torchrun options and the
# training script; the rendezvous node hosts the store (is_host=1), the others connect to it.
# The agent's TMPDIR is a folder of the job's own on the node, removed when the agent exits or
# the step is signalled (torchrun writes a log folder per agent there and never removes it).
_PER_NODE = ('if [ "$SLURMD_NODENAME" = "$LABKIT_RDZV_HOST" ]; then is_host=1; '
             'else is_host=0; fi; '
             'export TMPDIR="${TMPDIR:-/tmp}/labkit-$SLURM_JOB_ID-$SLURMD_NODENAME"; '
             'mkdir -p "$TMPDIR"; trap \'rm -rf "$TMPDIR"\' EXIT; '
             '"$0" -m torch.distributed.run '
             '--local-addr="$SLURMD_NODENAME" --rdzv-conf=is_host=$is_host "$@"')
_WORD = re.compile(r"[^\s'\"\\]+")  # a partition, account or job name: one plain word
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def time_limit(seconds: float) -> str:
    """``seconds`` as Slurm's ``--time``: whole minutes rounded up (Slurm's resolution), written
    ``hours:minutes:seconds`` or ``days-hours:minutes:seconds``."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) \
            or not math.isfinite(seconds) or seconds <= 0:
        raise ParameterError(f"--timeout wants a positive number of seconds, got {seconds!r} "
                             "(leave it out for the partition's default time limit)")
    days, minutes = divmod(math.ceil(seconds / 60), 24 * 60)
    hours, minutes = divmod(minutes, 60)
    clock = f"{hours:02d}:{minutes:02d}:00"
    return f"{days}-{clock}" if days else clock


def _positive(name: str, value: int | None, minimum: int = 1) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ParameterError(f"{name} wants a whole number >= {minimum}, got {value!r}")


def _word(name: str, value: str | None) -> None:
    if value is not None and not _WORD.fullmatch(value):
        raise ParameterError(f"{name} wants one word without spaces or quotes, got {value!r}")


def _absolute(path: str, base: str) -> str:
    """``path`` made absolute against ``base``, symlinks kept (a venv's python is a link)."""
    return os.path.normpath(os.path.join(base, os.path.expanduser(path)))


def slurm_script(
    nnodes: int,
    nproc_per_node: int,
    script: str,
    args: Sequence[str] = (),
    *,
    python: str | None = None,
    workdir: str | None = None,
    job_name: str = JOB_NAME,
    timeout_s: float | None = None,
    partition: str | None = None,
    account: str | None = None,
    output: str | None = None,
    cpus_per_task: int | None = None,
    gpus_per_node: int | None = None,
    rdzv_port: int | None = None,
    max_restarts: int = 0,
    env: dict[str, str] | None = None,
) -> str:
    """An sbatch script: ``srun`` starts one torchrun agent per node (``python -m
    torch.distributed.run``), c10d on the node the script runs on, the job id as run id.

    ``python`` (default: this interpreter) and ``script`` are written as absolute paths,
    relative ones taken from ``workdir`` (default: the current folder), which also becomes
    ``#SBATCH --chdir``: the nodes must see these paths (a shared filesystem).
    ``cpus_per_task`` defaults to ``nproc_per_node`` (one CPU per rank); ``timeout_s`` becomes
    ``#SBATCH --time`` (whole minutes, rounded up), none means the partition's default limit;
    ``rdzv_port`` None picks a port free on the first node when the job starts.
    """
    _positive("--nnodes", nnodes)
    _positive("--nproc-per-node", nproc_per_node)
    _positive("--cpus-per-task", cpus_per_task)
    _positive("--gpus-per-node", gpus_per_node)
    _positive("--max-restarts", max_restarts, minimum=0)
    _positive("--rdzv-port", rdzv_port)
    if rdzv_port is not None and rdzv_port > 65535:
        raise ParameterError(f"--rdzv-port wants a TCP port (1-65535), got {rdzv_port}")
    for name, value in (("--job-name", job_name), ("--partition", partition),
                        ("--account", account)):
        _word(name, value)
    if not script:
        raise LaunchError("no training script given: labkit launch --slurm FILE ... SCRIPT")
    for name, value in (("--output", output), ("script", script), ("--python", python),
                        ("workdir", workdir), *(("argument", a) for a in args)):
        if value is not None and "\n" in value:
            raise ParameterError(f"{name} must not contain a newline: {value!r}")
    for key in env or {}:
        if not _ENV_KEY.fullmatch(key):
            raise ParameterError(f"--env {key}=...: not a variable name a shell can export")
    if output is not None and not output.strip():
        raise ParameterError("--output wants a file name (Slurm's patterns such as %j work)")

    workdir = os.path.abspath(workdir or os.getcwd())
    python = _absolute(python or sys.executable, workdir)
    script = _absolute(script, workdir)
    cpus = cpus_per_task or nproc_per_node

    lines = [
        "#!/bin/bash",
        f"# labkit launch --slurm: {nnodes} node(s) x {nproc_per_node} rank(s) of {script}",
        f"#SBATCH --job-name={job_name}",
        f"#SBATCH --nodes={nnodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --cpus-per-task={cpus}",
        f"#SBATCH --chdir={_directive_value(workdir)}",
    ]
    if timeout_s is None:
        lines.append("# no --time: the partition's default time limit applies "
                     "(labkit launch --timeout SECONDS sets one)")
    else:
        lines.append(f"#SBATCH --time={time_limit(timeout_s)}")
    for option, value in (("partition", partition), ("account", account),
                          ("output", output), ("gpus-per-node", gpus_per_node)):
        if value is not None:
            lines.append(f"#SBATCH --{option}={_directive_value(str(value))}")
    lines += ["", "set -euo pipefail"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in sorted((env or {}).items())]
    lines += [
        "# srun does not inherit --cpus-per-task from sbatch (Slurm 22.05 and later)",
        'export SRUN_CPUS_PER_TASK="$SLURM_CPUS_PER_TASK"',
        "# this script runs on the allocation's first node: it serves the c10d rendezvous, on a",
        "# port of this job's own (a busy port fails the job; it never joins another job)",
        'export LABKIT_RDZV_HOST="$SLURMD_NODENAME"',
    ]
    if rdzv_port is None:
        lines.append(f"LABKIT_RDZV_PORT=$({shlex.quote(python)} -c {shlex.quote(_FREE_PORT)})")
    else:
        lines.append(f"LABKIT_RDZV_PORT={rdzv_port}")
    lines += ["export LABKIT_RDZV_PORT",
              'echo "labkit: c10d rendezvous on $LABKIT_RDZV_HOST:$LABKIT_RDZV_PORT"']
    torchrun = [
        '--nnodes="$SLURM_NNODES"', f"--nproc-per-node={nproc_per_node}",
        "--rdzv-backend=c10d", '--rdzv-endpoint="$LABKIT_RDZV_HOST:$LABKIT_RDZV_PORT"',
        '--rdzv-id="$SLURM_JOB_ID"', f"--max-restarts={max_restarts}",
    ]
    lines += [
        "",
        "# one torchrun agent per node; any node failing ends the whole job",
        "srun --kill-on-bad-exit=1 --ntasks-per-node=1 \\",
        f"  bash -c {shlex.quote(_PER_NODE)} \\",
        f"  {shlex.quote(python)} {' '.join(torchrun)} \\",
        f"  {shlex.join([script, *args])}",
        "",
    ]
    return "\n".join(lines)


def _directive_value(value: str) -> str:
    """A value for an ``#SBATCH --option=`` line (sbatch strips the double quotes)."""
    return f'"{value}"' if re.search(r"\s", value) else value


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--slurm", metavar="FILE",
                       help="write an sbatch script instead (--python, --rdzv-port and "
                            "--timeout apply to it too)")
    group.add_argument("--gpus-per-node", type=int, help="with --slurm: #SBATCH --gpus-per-node")
    group.add_argument("--cpus-per-task", type=int, metavar="N",
                       help="with --slurm: CPUs for each node's agent and its ranks "
                            "(default: --nproc-per-node, one per rank)")
    group.add_argument("--partition", help="with --slurm: #SBATCH --partition")
    group.add_argument("--account", help="with --slurm: #SBATCH --account (the one to charge)")
    group.add_argument("--output", metavar="FILE",
                       help="with --slurm: #SBATCH --output (default: slurm-%%j.out in the "
                            "folder the script was written from)")
    group.add_argument("--job-name", default=JOB_NAME,
                       help=f"with --slurm: #SBATCH --job-name (default: {JOB_NAME})")
    # --hosts has these two as well; the parser holds one of each for both.
    if "--python" not in group._option_string_actions:
        group.add_argument("--python", metavar="PATH",
                           help="with --slurm: interpreter on every node (default: this one)")
    if "--rdzv-port" not in group._option_string_actions:
        group.add_argument("--rdzv-port", type=int,
                           help="c10d port on the first node (default: one free there when "
                                "the job starts)")


def _python_path(python: str | None) -> str:
    """The interpreter the nodes run, as an absolute path that exists here."""
    if python is None:
        return os.path.abspath(sys.executable)
    if os.sep not in python:
        found = shutil.which(python)
        if found is None:
            raise ParameterError(f"--python {python}: not found on PATH; give its absolute "
                                 "path (the nodes run it by that path)")
        return os.path.abspath(found)
    path = os.path.abspath(os.path.expanduser(python))
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise ParameterError(f"--python {python}: no executable file there")
    return path


def run(args: argparse.Namespace, env: dict[str, str]) -> int:
    """Write the sbatch script ``labkit launch --slurm FILE`` asks for."""
    workdir = os.getcwd()
    script = Path(workdir, args.script)
    if not script.is_file():
        raise LaunchError(f"training script {args.script} not found (looked at {script}); "
                          "the batch script runs it by this absolute path on every node")
    output = getattr(args, "output", None)
    if output and "%" not in os.path.dirname(output):
        folder = Path(workdir, output).parent
        if not folder.is_dir():
            raise ParameterError(f"--output {output}: folder {folder} does not exist (Slurm "
                                 "does not create it, and the job would fail with no output)")
    text = slurm_script(
        args.nnodes, args.nproc_per_node, str(script.absolute()), args.args,
        python=_python_path(getattr(args, "python", None)), workdir=workdir,
        job_name=getattr(args, "job_name", JOB_NAME), timeout_s=args.timeout,
        partition=getattr(args, "partition", None), account=getattr(args, "account", None),
        output=output, cpus_per_task=getattr(args, "cpus_per_task", None),
        gpus_per_node=args.gpus_per_node, rdzv_port=getattr(args, "rdzv_port", None),
        max_restarts=args.max_restarts, env=env,
    )
    target = Path(args.slurm)
    if target.is_dir():
        raise ParameterError(f"--slurm {args.slurm} is a folder; give the batch script's name")
    target.write_text(text)
    print(f"wrote {args.slurm}: submit it with `sbatch {args.slurm}` (from any folder)")
    return 0
