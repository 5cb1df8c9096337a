"""The ``%%torchrun`` cell magic: run a notebook cell on every rank of a simulated cluster, as a
job of its own (cold) or on warm ranks that stay up between cells.

    %load_ext labkit
    %%torchrun --nnodes 3 --nproc-per-node 2 --vars size
    from labkit.runtime import dist, publish
    info = dist.setup()
    ...
    publish({"rank0_says": 42})

Cold, the cell becomes a script that torchrun runs on each rank (real processes, a real process
group) and the job ends with the cell. Warm, ``%torchrun_start --nnodes 2 --nproc-per-node 2``
starts such a job once; its ranks join the process group and wait, and every ``%%torchrun`` cell
then runs on them, in a namespace per rank that persists between cells (:mod:`labkit.runtime.warm`),
until ``%torchrun_stop``, the idle timeout or the kernel's end.

The rule: while a warm group is up, a cell runs on it unless it says ``--cold``; its
``--nnodes``/``--nproc-per-node``, if given, must match the group's (``--env`` and
``--max-restarts`` belong to a job's start: ``--cold``). With no group, cells run cold, as
always. After a group ended by itself (a rank died, a cell hung or broke the process group, it
sat idle) cells refuse to run and say why, until ``%torchrun_start`` starts a new group or
``%torchrun_stop`` goes back to cold cells: a cell that expects the group's variables never
runs cold by surprise.

Either way each rank's output streams into the notebook prefixed ``[nodeN rankR]``; what rank 0
passes to ``labkit.runtime.publish`` lands in the notebook variable named by ``--result`` (default
``result``) as plain JSON data; a failing rank raises here with its traceback; Ctrl-C prints one
line saying what was stopped and how many processes were ended and left.
"""

from __future__ import annotations

import atexit
import json

from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from labkit.errors import ParameterError
from labkit.runtime.interrupts import Interrupted
from labkit.runtime.launch import LaunchResult, launch_code, parse_env
from labkit.runtime.warm import DEFAULT_IDLE_TIMEOUT_S, DEFAULT_TIMEOUT_S, WarmGroup
from labkit.runtime.warm_cell import CellResult

last_launch: LaunchResult | None = None
"""The most recent cold ``%%torchrun`` launch (exit codes, seconds, output lines)."""
last_cell: CellResult | None = None
"""The most recent ``%%torchrun`` cell on warm ranks (its number, seconds, what rank 0 published)."""

warm_group: WarmGroup | None = None
"""The warm group ``%torchrun_start`` started (None: cells run cold)."""


def cell_script(cell: str, shared: dict[str, object]) -> str:
    """The script a cell becomes: one header line restoring the shared variables, then the
    cell unchanged (so a traceback's line N is cell line N - 1)."""
    header = (
        f"import json as _json; globals().update(_json.loads({json.dumps(json.dumps(shared))}))"
    )
    return f"{header}\n{cell}"


def _shape(nnodes: int, nproc_per_node: int) -> str:
    return f"{nnodes} node{'s' * (nnodes != 1)} x {nproc_per_node} rank{'s' * (nproc_per_node != 1)}"


@magics_class
class TorchrunMagics(Magics):
    @magic_arguments()
    @argument("--nnodes", type=int, default=None,
              help="simulated nodes (torchrun agents); cold: default 1, warm: the group's")
    @argument("--nproc-per-node", type=int, default=None,
              help="ranks per node; cold: default 1, warm: the group's")
    @argument("--cold", action="store_true",
              help="run as a job of its own even while a warm group is up")
    @argument("--max-restarts", type=int, default=0, help="torchrun restarts after a failure (cold)")
    @argument("--timeout", type=float, default=None,
              help=f"seconds before the job (cold) or the cell (warm) is ended; default "
                   f"{DEFAULT_TIMEOUT_S:g}, or the warm group's --timeout")
    @argument("--env", action="append", default=[], metavar="KEY=VALUE",
              help="extra environment for every rank (repeatable; cold)")
    @argument("--vars", nargs="*", default=[], metavar="NAME",
              help="notebook variables (JSON-able) to define on every rank")
    @argument("--result", default="result",
              help="notebook variable that receives what rank 0 publishes")
    @argument("--quiet", action="store_true", help="don't stream rank output")
    @cell_magic
    def torchrun(self, line: str, cell: str) -> None:
        """Run this cell on every rank: on the warm group when one is up, else as a torchrun
        job of its own; see ``labkit.runtime.magic``."""
        __tracebackhide__ = True
        args = parse_argstring(self.torchrun, line)
        env = parse_env(args.env)
        shared = self._shared(args.vars)
        echo = None if args.quiet else print
        if args.cold or warm_group is None:
            published = self._cold(args, cell, shared, env, echo)
        else:
            published = self._warm(warm_group, args, cell, shared, echo)
        self.shell.user_ns[args.result] = published

    def _shared(self, names: list[str]) -> dict[str, object]:
        user_ns = self.shell.user_ns
        missing = [name for name in names if name not in user_ns]
        if missing:
            raise ParameterError(f"--vars names undefined notebook variables: {missing}")
        shared = {name: user_ns[name] for name in names}
        try:
            json.dumps(shared)
        except (TypeError, ValueError) as exc:
            raise ParameterError(f"--vars must name JSON-able values (numbers, strings, "
                                 f"lists, dicts): {exc}") from None
        return shared

    def _cold(self, args, cell: str, shared: dict[str, object],  # noqa: ANN001 (argparse)
              env: dict[str, str], echo) -> object:  # noqa: ANN001
        global last_launch
        __tracebackhide__ = True
        nnodes = 1 if args.nnodes is None else args.nnodes
        nproc = 1 if args.nproc_per_node is None else args.nproc_per_node
        what = f"the cold %%torchrun job ({_shape(nnodes, nproc)})"
        try:
            last_launch = launch_code(
                cell_script(cell, shared), nnodes=nnodes, nproc_per_node=nproc,
                max_restarts=args.max_restarts,
                timeout_s=DEFAULT_TIMEOUT_S if args.timeout is None else args.timeout,
                env=env, echo=echo)
        except Interrupted as exc:
            raise Interrupted(what, exc.ended, exc.left) from None
        except KeyboardInterrupt:  # before its agents started, or after they ended
            raise Interrupted(what) from None
        last_launch.check()
        return last_launch.published

    def _warm(self, group: WarmGroup, args, cell: str,  # noqa: ANN001 (argparse)
              shared: dict[str, object], echo) -> object:  # noqa: ANN001
        global last_cell
        __tracebackhide__ = True
        asked = {"--nnodes": (args.nnodes, group.nnodes),
                 "--nproc-per-node": (args.nproc_per_node, group.nproc_per_node)}
        wrong = [f"{flag} {value}" for flag, (value, has) in asked.items()
                 if value is not None and value != has]
        if wrong:
            raise ParameterError(f"this cell asks for {' '.join(wrong)} but the warm group is "
                                 f"{group.shape}: add --cold to run it as a job of its own, or "
                                 "%torchrun_stop and start a group of that shape")
        if args.env or args.max_restarts:
            raise ParameterError("--env and --max-restarts belong to a job's start: give --env "
                                 "to %torchrun_start, or add --cold to run this cell as a job")
        last_cell = group.run_cell(cell, shared, args.timeout, echo)
        return last_cell.published

    @magic_arguments()
    @argument("--nnodes", type=int, default=1, help="simulated nodes (torchrun agents)")
    @argument("--nproc-per-node", type=int, default=1, help="ranks per node")
    @argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
              help="seconds the start may take, and each cell unless it sets --timeout")
    @argument("--idle-timeout", type=float, default=DEFAULT_IDLE_TIMEOUT_S,
              help="end the group when no cell used it for this many seconds")
    @argument("--env", action="append", default=[], metavar="KEY=VALUE",
              help="extra environment for every rank (repeatable)")
    @argument("--quiet", action="store_true", help="don't show the ranks' start-up output")
    @line_magic
    def torchrun_start(self, line: str) -> None:
        """Start warm ranks: a torchrun job whose ranks run the following %%torchrun cells."""
        global warm_group
        __tracebackhide__ = True
        args = parse_argstring(self.torchrun_start, line)
        if warm_group is not None and warm_group.up:
            raise ParameterError(f"a warm group is up already ({warm_group.shape}): "
                                 "%torchrun_stop first")
        group = WarmGroup(args.nnodes, args.nproc_per_node, args.timeout, args.idle_timeout,
                          parse_env(args.env), again=f"%torchrun_start {line.strip()}".strip())
        warm_group = group  # the kernel's exit ends it even while it starts
        try:
            seconds = group.start(None if args.quiet else print)
        except BaseException:
            warm_group = None
            raise
        backend = next(iter(group.ranks.values())).get("backend", "?")
        print(f"warm group up: {group.shape} ({backend}), {group.world_size} ranks ready in "
              f"{seconds:.1f} s. %%torchrun cells run on it (--cold: a job of their own) until "
              f"%torchrun_stop or {group.idle_timeout_s:g} s idle.")

    @line_magic
    def torchrun_stop(self, line: str) -> None:
        """End the warm group, every process of it; %%torchrun cells run cold again."""
        global warm_group
        if line.strip():
            raise ParameterError(f"%torchrun_stop takes no arguments, got {line.strip()!r}")
        group, warm_group = warm_group, None
        if group is None:
            print("no warm group is up: %%torchrun cells run as jobs of their own (cold)")
            return
        was_up = group.up
        ending = group.stop()
        said = "stopped" if was_up else f"had ended already ({ending.reason})"
        print(f"warm group {said}: {ending.counts}. %%torchrun cells run cold again.")


def stop_warm_group() -> None:
    """End the warm group, if one is up: the kernel's exit calls this (atexit)."""
    if warm_group is not None and warm_group.up:
        warm_group.stop("the kernel exited")


def register(ipython) -> None:  # noqa: ANN001 (IPython's own type)
    ipython.register_magics(TorchrunMagics)
    atexit.unregister(stop_warm_group)  # once, however often the extension is loaded
    atexit.register(stop_warm_group)


def load_ipython_extension(ipython) -> None:  # noqa: ANN001 (IPython's own type)
    """What the lab's kernels load at start (``--ext=labkit.runtime.magic``): the same as
    ``%load_ext labkit`` under a name of its own, so a notebook's ``%load_ext labkit`` after it
    registers the magics again silently instead of printing "already loaded"."""
    register(ipython)
