"""A toy agent process that beats, and the control plane's command line (``labkit agents``).

The Redis URL comes from ``$LABKIT_REDIS_URL`` or ``$REDIS_URL`` when ``--redis`` is left
out (URLs in argv are visible to ``ps``)::

    labkit agents agent --job J --name N [--ttl-s 3 --interval-s 1 --steps K --step-s S]
    labkit agents status --job J [--json]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from labkit.errors import ParameterError, ServiceError
from labkit.services.redis_server import REDIS_URL_ENV

if TYPE_CHECKING:
    pass
from labkit.orchestration.control import DRAIN_S, Heartbeat, _check_seconds
from labkit.orchestration.fleet import status_main
from labkit.services.base import CHILD_REDIS_URL_ENV


def agent_main(url: str, job: str, name: str, *, ttl_s: float = 3.0, interval_s: float = 1.0,
               steps: int | None = None, step_s: float = 0.1, drain_s: float = DRAIN_S,
               node: int | None = None, rank: int | None = None) -> int:
    """A toy agent: ``starting``, then ``running`` with ``step`` + 1 every ``step_s``; on
    SIGTERM/SIGINT (or after ``steps`` steps) ``draining`` for ``drain_s``, then ``left``.
    Returns 0."""
    if isinstance(drain_s, bool) or not isinstance(drain_s, int | float) or not drain_s >= 0:
        raise ParameterError(f"drain_s must be >= 0 s, got {drain_s!r}")
    hb = Heartbeat(url, job, name, ttl_s=ttl_s, interval_s=interval_s, node=node, rank=rank)
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()  # only a flag: the main loop drains and leaves

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    hb.start()
    step = 0
    if not stop.is_set():
        hb.set_state("running", step=step)
    while not stop.wait(step_s):
        if steps is not None and step >= steps:
            break
        step += 1
        hb.set_step(step)
    hb.set_state("draining", step=step)
    time.sleep(drain_s)
    hb.leave()
    return 0


def _url(given: str | None) -> str:
    url = given or os.environ.get(CHILD_REDIS_URL_ENV) or os.environ.get(REDIS_URL_ENV)
    if not url:
        raise ParameterError(f"no Redis URL: pass --redis or set {CHILD_REDIS_URL_ENV} or {REDIS_URL_ENV}")
    return url


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``labkit agents agent|status``."""
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--redis", help=f"Redis URL (default ${CHILD_REDIS_URL_ENV} or "
                                        f"${REDIS_URL_ENV}; a URL here is visible to ps)")
    common.add_argument("--job", required=True)
    agent = sub.add_parser("agent", parents=[common], help="run a toy agent that beats")
    agent.add_argument("--name", required=True)
    agent.add_argument("--ttl-s", type=float, default=3.0)
    agent.add_argument("--interval-s", type=float, default=1.0)
    agent.add_argument("--steps", type=int, default=None, help="leave after this many steps")
    agent.add_argument("--step-s", type=float, default=0.1)
    agent.add_argument("--drain-s", type=float, default=DRAIN_S)
    agent.add_argument("--node", type=int, default=None)
    agent.add_argument("--rank", type=int, default=None)
    status = sub.add_parser("status", parents=[common], help="show the fleet")
    status.add_argument("--json", action="store_true", help="a JSON list instead of a table")


def run(args: argparse.Namespace) -> int:
    """Bad input and an unreachable Redis raise ``LabkitError``s: the caller reports them."""
    url = _url(args.redis)
    if args.command == "status":
        return status_main(url, args.job, args.json)
    return agent_main(url, args.job, args.name, ttl_s=args.ttl_s, interval_s=args.interval_s,
                      steps=args.steps, step_s=_check_seconds("step_s", args.step_s),
                      drain_s=args.drain_s, node=args.node, rank=args.rank)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m labkit.orchestration.control_agent``: what ``spawn_agent`` starts."""
    parser = argparse.ArgumentParser(prog="labkit agents",
                                     description="Agent heartbeats and fleet status in Redis.")
    add_arguments(parser)
    try:
        return run(parser.parse_args(argv))
    except (ParameterError, ServiceError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
