"""``labkit hang watch`` (follow a running job live) and ``labkit hang healthy`` (the watch on a
job with nothing wrong), wired in by ``labkit.hangs.run.run``.

    labkit hang watch --job hang-stuck_rank-1a2b3c4d --world-size 3 [--redis URL] [--end-job]
    labkit hang healthy --timeout 5 --json

``watch`` runs until its verdict, or until Ctrl-C; the job's ranks must publish
(``labkit.hangs.live``). After an alarm it runs PyTorch's analyzer on the dumps it asked for.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

from labkit.hangs.fr_analyze import analyze
from labkit.hangs.live import DUMPS
from labkit.hangs.watch import Watch
from labkit.orchestration.fleet import fleet_status
from labkit.services.redis_server import REDIS_URL_ENV

ANALYZE_FACTOR = 2.0  # torch's analyzer: at most this many times as long as the watch took


def run_watch_cli(args: argparse.Namespace) -> int:
    """0: no alarm (the job finished or stayed well), 1: an alarm, 2: usage."""
    url = args.redis or os.environ.get(REDIS_URL_ENV, "")
    if not (args.job and args.world_size and args.world_size > 0 and url):
        print("labkit hang watch: needs --job, --world-size and --redis (or $REDIS_URL)",
              file=sys.stderr)
        return 2
    echo = None if args.json else print
    stop = threading.Event()
    watch = Watch(url, args.job, args.world_size, end_job=args.end_job, echo=echo, stop=stop)
    began = time.monotonic()
    try:
        result = watch.run()
    except KeyboardInterrupt:
        stop.set()
        result = watch.result
    verdict = None
    if result.outcome in ("hang", "failed"):
        agents = fleet_status(url, args.job)
        folder = next((a.extra[DUMPS] for a in agents if DUMPS in a.extra), "")
        if folder:
            limit = max(30.0, ANALYZE_FACTOR * (time.monotonic() - began))
            verdict = analyze(Path(folder), args.world_size, limit)
    if args.json:
        print(json.dumps({"watch": result.to_dict(),
                          "torch": verdict.to_dict() if verdict else None}, indent=2))
    elif verdict is not None:
        print(f"torch's analyzer: {verdict.summary}")
    return 1 if result.outcome in ("hang", "failed") else 0


def run_healthy_cli(args: argparse.Namespace) -> int:
    """0: the watch raised no alarm on the healthy job, 1: it did (or the job failed)."""
    from labkit.hangs.healthy import run_healthy
    from labkit.hangs.watch import format_watch

    echo = print if args.echo and not args.json else None
    report = run_healthy(args.timeout, echo=echo)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(f"healthy: {report.steps} steps in {report.duration_s:g} s, exit "
              f"{'ok' if report.exit_ok else 'FAILED'}; live watch: "
              f"{format_watch(report.watch, report.watch_error)}")
    return 0 if report.exit_ok and not report.false_alarm else 1
