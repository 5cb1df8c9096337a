"""The rank side of ``labkit.observability.observe.observe_job``: serve metrics, loop collectives and
ping-pong until the parent says stop.

``python -m labkit.runtime.worker observe_rank.py CONFIG_JSON``. Each rank serves its own
``/metrics`` on a free loopback port; the ports are all-gathered as a tensor of ints and rank
0 writes them to the launch folder (no pickle). Every loop: a few timed collectives per op and
size, then one ping-pong sweep over every ordered pair, then rest. Rank 0 decides when to stop
(the parent's stop file, or ``max_s`` as a backstop) and broadcasts it, so every rank leaves
the loop at the same iteration and nothing waits on a peer that left.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

from labkit.observability.exporter import PORTS_FILE, STOP_FILE, RankMetrics
from labkit.runtime import publish
from labkit.runtime.publish import RUN_DIR_ENV


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def pairs(world: int) -> list[tuple[int, int]]:
    """Every ordered pair (src, dst), in the one order all ranks follow."""
    return [(i, j) for i in range(world) for j in range(world) if i != j]


def pingpong_sweep(rank: int, world: int, rounds: int, delay_rank: int | None, delay_s: float,
                   device: str) -> dict[tuple[int, int], float]:
    """One-way latency of every pair this rank sends from: the median of ``rounds`` round trips
    / 2, after one untimed round. For each pair, all ranks barrier first, so the pair has the
    wire to itself and no rank runs ahead into another pair. ``delay_rank`` sleeps ``delay_s``
    before each send it makes: its link is slow in both directions."""
    import torch
    import torch.distributed as dist

    buf = torch.zeros(1, device=device)
    slow = delay_rank == rank
    measured = {}
    for src, dst in pairs(world):
        dist.barrier()
        if rank == src:
            samples = []
            for k in range(rounds + 1):
                started = time.perf_counter()
                if slow:
                    time.sleep(delay_s)
                dist.send(buf, dst)
                dist.recv(buf, dst)
                sync(device)
                if k:
                    samples.append((time.perf_counter() - started) / 2)
            measured[(src, dst)] = statistics.median(samples)
        elif rank == dst:
            for _ in range(rounds + 1):
                dist.recv(buf, src)
                if slow:
                    time.sleep(delay_s)
                dist.send(buf, src)
    return measured


def collectives(metrics: RankMetrics, ops: list[str], sizes: list[int], world: int,
                device: str, iters: int = 2) -> None:
    """Time ``iters`` calls of each op at each size (bytes of float32) on this rank, after a
    barrier."""
    import torch
    import torch.distributed as dist

    for size in sizes:
        count = max(1, size // 4)
        for op in ops:
            buf = torch.ones(count, device=device)
            if op == "all_reduce":
                def run(buf=buf):  # noqa: ANN202
                    dist.all_reduce(buf)
            elif op == "all_gather":
                out = torch.empty(count * world, device=device)
                gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor

                def run(buf=buf, out=out, gather=gather):  # noqa: ANN202
                    gather(out, buf)
            elif op == "broadcast":
                def run(buf=buf):  # noqa: ANN202
                    dist.broadcast(buf, src=0)
            else:
                raise ValueError(f"unknown collective {op!r}")
            dist.barrier()  # as nccl-tests: time the calls, not the wait for late ranks
            for _ in range(iters):
                started = time.perf_counter()
                run()
                sync(device)
                metrics.observe_collective(op, count * 4, time.perf_counter() - started)


def main(argv: list[str]) -> None:
    import torch
    import torch.distributed as dist

    from labkit.runtime.dist import setup, teardown

    cfg = json.loads(argv[0])
    info = setup()
    rank, world, device = info.rank, info.world_size, info.device
    run_dir = Path(os.environ[RUN_DIR_ENV])
    metrics = RankMetrics(rank, world)
    metrics.set_restarts(info.restart_count)
    port = metrics.serve()
    ports = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(world)]
    dist.all_gather(ports, torch.tensor([port], dtype=torch.int64, device=device))
    if rank == 0:
        tmp = run_dir / (PORTS_FILE + ".tmp")
        tmp.write_text(json.dumps({"ports": [int(p.item()) for p in ports]}))
        os.replace(tmp, run_dir / PORTS_FILE)  # the parent never reads half a file
    started, sweeps = time.monotonic(), 0
    stop = torch.zeros(1, device=device)
    while True:
        collectives(metrics, cfg["ops"], cfg["sizes"], world, device)
        measured = pingpong_sweep(rank, world, cfg["rounds"], cfg["delay_rank"], cfg["delay_s"],
                                  device)
        for (src, dst), seconds in measured.items():
            metrics.set_pair_latency(src, dst, seconds)
        metrics.pingpong_sweeps.inc()
        sweeps += 1
        if rank == 0:
            done = (run_dir / STOP_FILE).exists() or time.monotonic() - started > cfg["max_s"]
            stop.fill_(1.0 if done else 0.0)
        dist.broadcast(stop, src=0)
        if stop.item():
            break
        time.sleep(cfg["interval_s"])
    metrics.close()
    publish({"sweeps": sweeps, "world": world, "backend": info.backend})
    teardown()


if __name__ == "__main__":
    main(sys.argv[1:])
