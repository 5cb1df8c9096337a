"""``labkit launch``: simulated nodes on this machine, real hosts over ssh, or a Slurm script.

    labkit launch --nnodes 2 --nproc-per-node 2 script.py [args...]
    labkit launch --hosts node1,node2 --nproc-per-node 8 --workdir /srv/lab train.py
    labkit launch --slurm job.sbatch --nnodes 4 --nproc-per-node 8 train.py
"""

from __future__ import annotations

import argparse
import json
import sys

from labkit.cluster import slurm, ssh
from labkit.runtime import launch
from labkit.runtime.interrupts import Terminated, sigterm_raises
from labkit.runtime.launch import parse_env

LOCAL_TIMEOUT_S = 300.0  # simulated nodes only: a lesson's job on this machine


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nnodes", type=int, default=1, help="simulated nodes (agents)")
    parser.add_argument("--nproc-per-node", type=int, default=1, help="ranks per node")
    parser.add_argument("--max-restarts", type=int, default=0, help="torchrun restarts")
    parser.add_argument("--timeout", type=float, default=None,
                        help=f"hard limit, seconds (simulated nodes: {LOCAL_TIMEOUT_S:g} unless "
                             "set; --hosts: none unless set; --slurm: #SBATCH --time)")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="extra environment for every rank (repeatable)")
    ssh.add_arguments(parser.add_argument_group("real hosts over ssh (--hosts)"))
    slurm.add_arguments(parser.add_argument_group("Slurm (--slurm)"))
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)


def run(args: argparse.Namespace) -> int:
    """Run the launch; Ctrl-C or SIGTERM end it (and everything it started) with one line."""
    try:
        with sigterm_raises():
            return _run(args)
    except KeyboardInterrupt:
        print("labkit: launch interrupted (Ctrl-C)", file=sys.stderr)
        return 130
    except Terminated:
        print("labkit: launch ended by SIGTERM", file=sys.stderr)
        return 143


def _run(args: argparse.Namespace) -> int:
    env = parse_env(args.env)
    if args.slurm:
        return slurm.run(args, env)
    if args.hosts:
        result = ssh.run(args, env)
        if result is None:  # --dry-run
            return 0
    else:
        result = launch.launch_local(
            args.script, *args.args, nnodes=args.nnodes, nproc_per_node=args.nproc_per_node,
            max_restarts=args.max_restarts, env=env,
            timeout_s=LOCAL_TIMEOUT_S if args.timeout is None else args.timeout,
        )
    if result.published is not None:
        print(json.dumps(result.published))
    result.check()
    return 0
