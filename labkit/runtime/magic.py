"""The ``%%torchrun`` cell magic: run a notebook cell on every rank of a simulated cluster.

    %load_ext labkit
    %%torchrun --nnodes 3 --nproc-per-node 2 --vars size
    from labkit.runtime import dist, publish
    info = dist.setup()
    ...
    publish({"rank0_says": 42})

The cell becomes a script that torchrun runs on each rank (real processes, a real process
group); their output streams into the notebook prefixed ``[nodeN rankR]``. What rank 0 passes
to ``labkit.runtime.publish`` lands in the notebook variable named by ``--result`` (default ``result``)
as plain JSON data. A failing rank raises here with that rank's traceback; a hang is ended at
``--timeout`` seconds with every process of the job.
"""

from __future__ import annotations

import json

from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from labkit.errors import ParameterError
from labkit.runtime.launch import LaunchResult, launch_code, parse_env

last_launch: LaunchResult | None = None
"""The most recent ``%%torchrun`` launch (exit codes, seconds, output lines)."""


def cell_script(cell: str, shared: dict[str, object]) -> str:
    """The script a cell becomes: one header line restoring the shared variables, then the
    cell unchanged (so a traceback's line N is cell line N - 1)."""
    header = (
        f"import json as _json; globals().update(_json.loads({json.dumps(json.dumps(shared))}))"
    )
    return f"{header}\n{cell}"


@magics_class
class TorchrunMagics(Magics):
    @magic_arguments()
    @argument("--nnodes", type=int, default=1, help="simulated nodes (torchrun agents)")
    @argument("--nproc-per-node", type=int, default=1, help="ranks per node")
    @argument("--max-restarts", type=int, default=0, help="torchrun restarts after a failure")
    @argument("--timeout", type=float, default=300.0, help="seconds before the job is ended")
    @argument("--env", action="append", default=[], metavar="KEY=VALUE",
              help="extra environment for every rank (repeatable)")
    @argument("--vars", nargs="*", default=[], metavar="NAME",
              help="notebook variables (JSON-able) to define on every rank")
    @argument("--result", default="result",
              help="notebook variable that receives what rank 0 publishes")
    @argument("--quiet", action="store_true", help="don't stream rank output")
    @cell_magic
    def torchrun(self, line: str, cell: str) -> None:
        """Run this cell on every rank with torchrun; see ``labkit.runtime.magic``."""
        global last_launch
        __tracebackhide__ = True
        args = parse_argstring(self.torchrun, line)
        user_ns = self.shell.user_ns
        missing = [name for name in args.vars if name not in user_ns]
        if missing:
            raise ParameterError(f"--vars names undefined notebook variables: {missing}")
        try:
            shared = {name: user_ns[name] for name in args.vars}
            script_text = cell_script(cell, shared)
        except TypeError as exc:
            raise ParameterError(f"--vars must name JSON-able values (numbers, strings, "
                                 f"lists, dicts): {exc}") from None
        last_launch = launch_code(
            script_text,
            nnodes=args.nnodes,
            nproc_per_node=args.nproc_per_node,
            max_restarts=args.max_restarts,
            timeout_s=args.timeout,
            env=parse_env(args.env),
            echo=None if args.quiet else print,
        )
        last_launch.check()
        user_ns[args.result] = last_launch.published


def register(ipython) -> None:  # noqa: ANN001 (IPython's own type)
    ipython.register_magics(TorchrunMagics)
