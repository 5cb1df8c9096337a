"""Rank side of :func:`labkit.orchestration.partition.collective_partition`: all_reduce in a loop, log each.

``python -m labkit.runtime.worker partition_rank.py CONFIG_JSON`` (``{"records", "pause_s"}``: what the experiment launches,
one rank per lab node) appends JSON lines to ``records/rank<R>.jsonl``: a ``start`` record
with the rank's lab address, one ``iteration`` record per completed all_reduce (wall time and
how long it took), and an ``error`` record with the first line of the exception that ended the
loop, which is then raised again (the launcher records the traceback). The loop stops cleanly
when any rank sees a ``stop`` file in ``records``: the flag rides on the all_reduce itself, so
every rank stops after the same iteration.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path


def lab_address() -> str:
    """This rank's own address on the lab link: the source address towards MASTER_ADDR."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect((os.environ.get("MASTER_ADDR", "127.0.0.1"), 9))  # UDP: sends nothing
        return sock.getsockname()[0]


def main(argv: list[str]) -> None:
    import torch
    import torch.distributed as dist

    from labkit.runtime import dist as ldist
    from labkit.runtime.dist import wait_for_peers

    cfg = json.loads(argv[0])  # {"records": DIR, "pause_s": S}
    records, pause_s = Path(cfg["records"]), float(cfg["pause_s"])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    # Every rank imports torch first: a slow start must not count against the short timeout.
    wait_for_peers(records / "ready", rank, world)
    info = ldist.setup("gloo")
    log = (records / f"rank{rank}.jsonl").open("a", buffering=1)

    def record(event: str, **facts: object) -> None:
        log.write(json.dumps({"event": event, "rank": rank, "t": time.time(), **facts}) + "\n")

    record("start", address=lab_address(), world_size=info.world_size)
    iteration = 0
    try:
        while True:
            stop = 1.0 if (records / "stop").exists() else 0.0
            x = torch.tensor([1.0, stop])
            started = time.time()
            dist.all_reduce(x)
            record("iteration", i=iteration, seconds=round(time.time() - started, 4),
                   sum=x[0].item())
            if x[1].item() > 0:
                break
            iteration += 1
            time.sleep(pause_s)
    except Exception as exc:
        lines = str(exc).strip().splitlines() or [""]
        record("error", error=f"{type(exc).__name__}: {lines[0]}"[:300])
        raise
    finally:
        log.close()
    ldist.teardown()


if __name__ == "__main__":
    main(sys.argv[1:])
