"""The ``labkit`` command (also ``python -m labkit``). Each command is its topic's
``add_arguments(parser)`` + ``run(args) -> int`` pair; a ``LabkitError`` (bad input included)
ends it with ``labkit: error: ...`` and exit code 2, never a traceback.

    labkit doctor [--json] [--programs]
    labkit doctor --install [--cluster] [--dry-run]     (make system-deps)
    labkit course run [--smoke] [--only 01 03] [--out DIR] [--pace F]
    labkit course speed [--out runs/speed] [--paces 0.1,10] [--no-one-core]   (make test-speed)
    labkit course student --out student/ [03 05 ...] [--force]
    labkit course check student/03_collectives_and_bandwidth.ipynb [--smoke] [--json]
    labkit launch --nnodes 2 --nproc-per-node 2 script.py [args...]
    labkit launch --hosts 10.0.0.1,10.0.0.2 --nproc-per-node 8 --dry-run train.py
    labkit launch --slurm job.sbatch --nnodes 4 --nproc-per-node 8 train.py
    labkit nccl check [--env-file FILE] [--this-host] [--nccl-version X] [--json] [--fix]
    labkit bench launch --json
    labkit bench cell --json [--repeats 5]
    labkit bench collectives --op all_reduce --nproc-per-node 4 --min 1K --max 64M --json
    labkit bench buffer --agents 4 --payload 1024 --seconds 3 --json
    labkit bench memory --ranks 2,4,8 --per-agent-mb 32 --json
    labkit train --mode async --agents 4 --steps 100000 --staleness vtrace --json
    labkit bench sync-async --agents 4 --straggler-factor 4 --json
    labkit bench staleness --lags 0,16,64 --seeds 0,1,2 --json
    labkit bench ddp --json
    labkit bench locks --agents 4 --increments 200 --json
    labkit bench coordination --samples 2000 --json
    labkit hang --list
    labkit hang extra_collective --json
    labkit elastic --min-nodes 1 --max-nodes 3 --changes join:2@10,preempt:2@60,kill:1@85 --json
    labkit agents status --job JOB [--json]        (Redis URL from $LABKIT_REDIS_URL)
    labkit partition election --nnodes 3 --rule quorum --json    (root: network namespaces)
    labkit partition collective --nnodes 3 --timeout 5 --json
    labkit capstone --steps 150000 --kill-slot 3 --kill-at-update 30 --out reports/capstone
    labkit gpu-check [--json] [--only collectives,checkpoint] [--budget 270]
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Callable

from labkit.buffers import bench as bench_buffer
from labkit.capstone import run as capstone
from labkit.cluster import cli as launch_cli
from labkit.collectives import bench as collectives
from labkit.errors import LabkitError
from labkit.gpu import cli as gpu_cli
from labkit.hangs import run as hangs_cli
from labkit.locks import cli as locks_cli
from labkit.nccl import cli as nccl_cli
from labkit.orchestration import control_agent, elastic, partition
from labkit.orchestration import coordination as bench_coordination
from labkit.scaling import ddp as bench_ddp
from labkit.scaling import memory as bench_memory
from labkit.training import fixed_lag as bench_staleness
from labkit.training import run as train
from labkit.training import sync_async as bench_sync_async


def _doctor(args: argparse.Namespace) -> int:
    from labkit.course import doctor, notes, programs
    if (args.cluster or args.dry_run) and not args.install:
        args.parser.error("--cluster and --dry-run go with --install")
    if args.install and (args.json or args.programs):
        args.parser.error("--install prints what it does: no --json or --programs with it")
    if args.install:
        return _doctor_install(args.cluster, args.dry_run)
    statuses = programs.check_programs()
    if args.programs:
        if args.json:
            print(json.dumps([p.to_dict() for p in statuses], indent=2))
        else:
            print(notes.format_programs(statuses, short=True))
        return 0
    checks = doctor.run_doctor()
    if args.json:
        print(json.dumps([c.to_dict() for c in checks + [p.to_check() for p in statuses]],
                         indent=2))
    else:
        print(doctor.format_table(checks))
        print()
        print(notes.format_programs(statuses))
    return 0 if all(c.ok for c in checks) else 1


def _doctor_install(cluster: bool, dry_run: bool) -> int:
    """``labkit doctor --install``: apt-get the missing programs' packages when root on
    Debian/Ubuntu, otherwise print what to run."""
    from labkit.course import install, notes, programs

    plan = install.plan_install(programs.check_programs(versions=False), programs.this_system(),
                               cluster=cluster)
    if not plan.runs:
        print(plan.advice)
        return 0
    if dry_run:
        print("would run (as root):")
        print("\n".join(f"  {shlex.join(command)}" for command in plan.commands))
        return 0
    code = install.run_install(plan)
    print(notes.format_programs(programs.check_programs(), short=True))
    return code


def _course_run(args: argparse.Namespace) -> int:
    from labkit.course.runner import run_course

    try:
        result = run_course(
            notebooks_dir=args.notebooks, out=args.out, smoke=args.smoke,
            only=args.only or None, cell_timeout=args.cell_timeout,
            progress=not args.no_progress, pace=args.pace,
        )
    except KeyboardInterrupt:  # before the first notebook started: nothing to clean up
        print("labkit: interrupted before any notebook ran", file=sys.stderr)
        return 130
    return result.exit_code


def _course_speed(args: argparse.Namespace) -> int:
    from labkit.course.speed import passed, run_speed_tier

    try:
        paces = tuple(float(p) for p in args.paces.split(",") if p.strip())
    except ValueError:
        args.parser.error(f"--paces takes factors like 0.1,10, not {args.paces!r}")
    try:
        conditions = run_speed_tier(args.out, args.notebooks, paces, not args.no_one_core)
    except KeyboardInterrupt:
        print("labkit: speed tier interrupted", file=sys.stderr)
        return 130
    return 0 if passed(conditions) else 1


def _course_student(args: argparse.Namespace) -> int:
    from labkit.course.workshop_student import write_student_copies

    copies = write_student_copies(args.notebooks, args.out, only=args.only or None,
                                  force=args.force)
    for path, count in copies:
        print(f"{path.name}: {count} exercise{'s' * (count != 1)}")
    print(f"wrote {len(copies)} student cop{'ies' if len(copies) != 1 else 'y'} to {args.out}")
    return 0


def _course_check(args: argparse.Namespace) -> int:
    from labkit.course.workshop_check import check_notebook, format_report, locate

    report = check_notebook(locate(args.notebook, args.notebooks), smoke=args.smoke,
                            timeout=args.cell_timeout, output=args.output)
    print(json.dumps(report.to_dict(), indent=2) if args.json else format_report(report))
    return 0 if report.ok else 1


def _bench_launch(args: argparse.Namespace) -> int:
    from labkit.runtime.launch_bench import measure_launch

    report = measure_launch(args.repeats, args.nnodes, args.nproc_per_node)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"labkit {report['labkit_s']} s vs bare torchrun {report['bare_torchrun_s']} s "
              f"(median of {report['repeats']}): overhead {report['overhead']:+.1%}")
    return 0


def _bench_cell(args: argparse.Namespace) -> int:
    from labkit.runtime.warm_bench import measure_cell

    report = measure_cell(args.repeats, args.nnodes, args.nproc_per_node)
    print(json.dumps(report.to_dict(), indent=2) if args.json else report.summary())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="labkit", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)

    doctor = commands.add_parser(
        "doctor", help="torch, backends, GPUs, NCCL, Redis, NATS, optional system programs")
    doctor.add_argument("--json", action="store_true", help="print JSON instead of a table")
    doctor.add_argument("--programs", action="store_true",
                        help="only the optional system programs, short (no servers started)")
    doctor.add_argument("--install", action="store_true",
                        help="install the missing optional programs: apt-get when root on "
                             "Debian/Ubuntu, otherwise print the commands to run")
    doctor.add_argument("--cluster", action="store_true",
                        help="with --install: also ssh, sshd and Slurm, for real-cluster work")
    doctor.add_argument("--dry-run", action="store_true",
                        help="with --install: print the commands instead of running them")
    doctor.set_defaults(func=_doctor, parser=doctor)

    course = commands.add_parser("course", help="the notebooks").add_subparsers(
        dest="course_command", required=True)
    run = course.add_parser("run", help="execute the notebooks headless with papermill")
    run.add_argument("--smoke", action="store_true", help="smoke sizes from notebooks/smoke.yml")
    run.add_argument("--only", nargs="+", metavar="ID", help="notebook ids, e.g. 00 03")
    run.add_argument("--out", help="run folder (default runs/<timestamp>, linked as runs/latest)")
    run.add_argument("--notebooks", default="notebooks", help="notebook folder")
    run.add_argument("--cell-timeout", type=float, default=3600, help="seconds per cell")
    run.add_argument("--no-progress", action="store_true", help="no progress bars")
    run.add_argument("--pace", type=float, default=None, metavar="F",
                     help="scale the notebooks' pace parameters (notebooks/pace.yml) by F: 0.1 "
                          "meets the work with a tenth of the time, as a 10x slower machine")
    run.set_defaults(func=_course_run)
    speed = course.add_parser(
        "speed", help="the speed tier: pace parameters at 0.1x and 10x, the course on one busy core")
    speed.add_argument("--out", default="runs/speed", help="folder for the runs and speed.json")
    speed.add_argument("--notebooks", default="notebooks", help="notebook folder")
    speed.add_argument("--paces", default="0.1,10", help="pace factors, comma-separated")
    speed.add_argument("--no-one-core", action="store_true",
                       help="skip the smoke course pinned to one core beside a busy loop")
    speed.set_defaults(func=_course_speed, parser=speed)
    student = course.add_parser(
        "student", help="write student copies: solutions become stubs that say 'not done'")
    student.add_argument("--out", required=True, help="folder for the copies (not notebooks/)")
    student.add_argument("only", nargs="*", metavar="NOTEBOOK",
                         help="notebook ids or names, e.g. 03 (default: all)")
    student.add_argument("--notebooks", default="notebooks", help="notebook folder")
    student.add_argument("--force", action="store_true", help="overwrite existing copies")
    student.set_defaults(func=_course_student)
    check = course.add_parser("check", help="run a learner's notebook and check its exercises")
    check.add_argument("notebook", help="the learner's .ipynb (or an id in --notebooks)")
    check.add_argument("--smoke", action="store_true", help="smoke sizes from smoke.yml")
    check.add_argument("--json", action="store_true", help="print JSON instead of lines")
    check.add_argument("--notebooks", default="notebooks", help="folder for an id like 03")
    check.add_argument("--cell-timeout", type=float, default=3600, help="seconds per cell")
    check.add_argument("--output", help="keep the executed notebook (tracebacks) here")
    check.set_defaults(func=_course_check)

    _add(commands, "launch", "run a script on N nodes x P ranks (torchrun): simulated, ssh "
         "or Slurm", launch_cli.add_arguments, launch_cli.run)

    _add(commands, "train", "CartPole agents: sync (DDP) or async", train.add_arguments,
         train.run)
    _add(commands, "hang", "reproduce a real hang and name its culprit",
         hangs_cli.add_arguments, hangs_cli.run)

    _add(commands, "elastic", "nodes join and leave a running job (torchrun MIN:MAX)",
         elastic.add_arguments, elastic.run)
    _add(commands, "capstone", "the whole system: async agents on 3 nodes, a rank killed, "
         "one report", capstone.add_arguments, capstone.run)
    _add(commands, "agents", "the control plane: agent heartbeats and fleet status in Redis",
         control_agent.add_arguments, control_agent.run)
    _add(commands, "partition", "split brain: elections and collectives with a node cut off",
         partition.add_arguments, partition.run)
    _add(commands, "gpu-check", "the course's CUDA/NCCL paths on this host's GPUs",
         gpu_cli.add_arguments, gpu_cli.run)

    nccl = commands.add_parser("nccl", help="NCCL and torch.distributed settings").add_subparsers(
        dest="nccl_command", required=True)
    nccl_check = nccl.add_parser(
        "check", help="check NCCL/torch/gloo variables (this environment or --env-file)")
    nccl_cli.add_arguments(nccl_check)
    nccl_check.set_defaults(func=nccl_cli.run)

    bench = commands.add_parser("bench", help="measurements, printed as JSON").add_subparsers(
        dest="bench_command", required=True)
    bench_launch = bench.add_parser("launch", help="labkit launcher vs bare torchrun")
    bench_launch.add_argument("--repeats", type=int, default=5)
    bench_launch.add_argument("--nnodes", type=int, default=2)
    bench_launch.add_argument("--nproc-per-node", type=int, default=2)
    bench_launch.add_argument("--json", action="store_true")
    bench_launch.set_defaults(func=_bench_launch)
    bench_cell = bench.add_parser("cell", help="a no-op %%%%torchrun cell: cold job vs warm ranks")
    bench_cell.add_argument("--repeats", type=int, default=5, help="rounds, cold then warm")
    bench_cell.add_argument("--nnodes", type=int, default=2)
    bench_cell.add_argument("--nproc-per-node", type=int, default=2)
    bench_cell.add_argument("--json", action="store_true")
    bench_cell.set_defaults(func=_bench_cell)
    _add(bench, "collectives", "nccl-tests on any backend: time, algbw, busbw, #wrong",
         collectives.add_arguments, collectives.run)
    _add(bench, "buffer", "experience buffers: push, pull, end-to-end rates",
         bench_buffer.add_arguments, bench_buffer.run)
    _add(bench, "memory", "replicated vs sharded experience: per-rank RSS",
         bench_memory.add_arguments, bench_memory.run)
    for name, module, text in (
        ("sync-async", bench_sync_async, "sync DDP vs async actor-learner, with a straggler"),
        ("staleness", bench_staleness, "staleness methods at a controlled policy lag, over seeds"),
        ("ddp", bench_ddp, "gradient_as_bucket_view memory; DDP vs FSDP for small agents"),
        ("locks", locks_cli, "lost updates, the guide's lock, Redis locks, fencing"),
        ("coordination", bench_coordination,
         "round-trip p50/p99: TCPStore, barrier, Redis BLPOP and pub/sub, NATS request"),
    ):
        _add(bench, name, text, module.add_arguments, module.run)
    return parser


def _add(commands: argparse._SubParsersAction, name: str, text: str,
         add_arguments: Callable[[argparse.ArgumentParser], None],
         func: Callable[[argparse.Namespace], int]) -> None:
    """One subcommand: its options and the function that runs it."""
    sub = commands.add_parser(name, help=text)
    add_arguments(sub)
    sub.set_defaults(func=func)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except LabkitError as exc:
        print(f"labkit: error: {exc}", file=sys.stderr)
        return 2
