"""The rank side of ``labkit.collectives.bench``: what torchrun runs on every rank.

``python -m labkit.runtime.worker bench_rank.py CONFIG_JSON``. Mode ``bench`` sweeps the
collectives the way nccl-tests does (warm-up, one untimed call, barrier, a timed loop, then one
checked call with known data; the sweep ``cycles`` times, its ``-N``; per-iteration times with
``per_iter``, its ``-I 1``); mode ``init`` times joining the process group. Rank 0 publishes
the result as JSON. Tensors live on ``info.device``, so the same code runs on GPUs with NCCL.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

from labkit.collectives.formulas import REDUCING, ROOTED, bandwidths, message_counts, placements
from labkit.collectives.iter_timing import (
    IterClock,
    device_facts,
    gather_lists,
    nccl_version_code,
    run_env,
)
from labkit.runtime import publish

STARTED = time.perf_counter()  # before torch is imported: where the init timing starts
TIMED_SEED, GARBAGE = 99, 1000.0
Prepared = tuple[Callable[[], Any], Any, Any, Any]  # run, output, contribution, expected


def sync(device: str) -> None:
    """Wait for queued GPU work: CUDA collectives return before they finish."""
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def pattern(rank: int, start: int, count: int, seed: int, device: str):  # noqa: ANN201
    """Rank ``rank``'s data at indices ``start..start+count``: integers in [-510, 510] as floats,
    so sums over up to 32k ranks are exact in float32 and the expected result is known."""
    import torch

    idx = torch.arange(start, start + count, dtype=torch.int64, device=device)
    return ((idx * 3 + rank * 17 + seed) % 1021 - 510).to(torch.float32)


def _summed(n: int, start: int, count: int, seed: int, device: str):  # noqa: ANN202
    total = pattern(0, start, count, seed, device)
    for r in range(1, n):
        total += pattern(r, start, count, seed, device)
    return total


def prepare(op: str, in_place: bool, rank: int, n: int, count: int, seed: int, device: str,
            expect: bool = False, root: int = 0) -> Prepared:
    """Buffers and the call for one collective. In-place means the output aliases the input, as
    in nccl-tests (all_gather: input is this rank's slice of the output; reduce_scatter: output
    is this rank's slice of the input). ``expected`` is None where this rank's output is not
    checked (non-root ranks of reduce) or when ``expect`` is False."""
    import torch
    import torch.distributed as dist

    def data(r: int, start: int = 0, c: int = count):  # noqa: ANN202
        return pattern(r, start, c, seed, device)

    mine = slice(rank * count, (rank + 1) * count)
    if op == "all_reduce":
        buf = data(rank)
        exp = _summed(n, 0, count, seed, device) if expect else None
        return (lambda: dist.all_reduce(buf)), buf, buf, exp
    if op == "broadcast":
        buf = data(root) if rank == root else torch.zeros(count, device=device)
        return (lambda: dist.broadcast(buf, src=root)), buf, buf, data(root) if expect else None
    if op == "reduce":
        buf = data(rank)
        exp = _summed(n, 0, count, seed, device) if expect and rank == root else None
        return (lambda: dist.reduce(buf, dst=root)), buf, buf, exp
    if op == "all_gather":
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        out = torch.zeros(n * count, device=device)
        inp = out[mine] if in_place else torch.empty(count, device=device)
        inp.copy_(data(rank))
        exp = torch.cat([data(r) for r in range(n)]) if expect else None
        return (lambda: gather(out, inp)), out, inp, exp
    if op == "reduce_scatter":
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        inp = data(rank, 0, n * count)
        out = inp[mine] if in_place else torch.zeros(count, device=device)
        exp = _summed(n, rank * count, count, seed, device) if expect else None
        return (lambda: scatter(out, inp)), out, inp, exp
    if op == "all_to_all":
        inp = data(rank, 0, n * count)
        out = torch.zeros(n * count, device=device)
        exp = torch.cat([data(j, rank * count) for j in range(n)]) if expect else None
        return (lambda: dist.all_to_all_single(out, inp)), out, inp, exp
    raise ValueError(f"unknown collective {op!r}")


def reduce_across(values: list[float], how: str, device: str) -> list[float]:
    """Combine per-rank numbers like nccl-tests' ``-a``: avg (its default), max, min, rank0."""
    import torch
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64, device=device)
    if how == "rank0":
        dist.broadcast(t, src=0)
    else:
        op = {"avg": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}[how]
        dist.all_reduce(t, op=op)
        if how == "avg":
            t /= dist.get_world_size()
    return t.tolist()


def timed(run: Callable[[], Any], iters: int, device: str,
          per_iter: bool = False) -> tuple[float, list[float] | None]:
    """Seconds per call on this rank: barrier, then ``iters`` calls, then wait for the device;
    with ``per_iter`` also each iteration's seconds (``IterClock``), else None."""
    import torch.distributed as dist

    clock = IterClock(iters, device) if per_iter else None
    sync(device)
    dist.barrier()
    sync(device)
    started = time.perf_counter()
    for i in range(iters):
        if clock:
            clock.mark(i)
        run()
    if clock:
        clock.mark(iters)
    sync(device)
    seconds = (time.perf_counter() - started) / iters
    return seconds, clock.intervals() if clock else None


def count_wrong(op: str, in_place: bool, rank: int, n: int, count: int, seed: int, device: str,
                corrupt: bool) -> int:
    """One checked call on fresh data; wrong elements summed over all ranks."""
    import torch
    import torch.distributed as dist

    run, out, contribution, expected = prepare(op, in_place, rank, n, count, seed, device, True)
    if corrupt:
        contribution.add_(GARBAGE)
    run()
    sync(device)
    mine = 0 if expected is None else int((out != expected).sum().item())
    total = torch.tensor([mine], dtype=torch.int64, device=device)
    dist.all_reduce(total)
    return int(total.item())


def probe(op: str, rank: int, n: int, device: str) -> str | None:
    """Why this backend cannot run ``op`` (the error, agreed by all ranks), or None."""
    import torch
    import torch.distributed as dist

    error = ""
    try:
        run = prepare(op, placements(op)[0], rank, n, 1, 0, device)[0]
        run()
        sync(device)
    except (RuntimeError, NotImplementedError, ValueError) as exc:
        error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"
    failed = torch.tensor([1.0 if error else 0.0], device=device)
    dist.all_reduce(failed, op=dist.ReduceOp.MAX)
    return (error or "failed on another rank") if failed.item() else None


def bench_op(op: str, cfg: dict, rank: int, n: int, device: str) -> list[dict]:
    """nccl-tests' TimeTest for one op: rows per (size, placement)."""
    sizes, iters, corrupt = cfg["sizes"], cfg["iters"], cfg["corrupt_rank"] == rank
    for size in sizes:  # warm-up at every size first, as nccl-tests' TimeTest does (src/common.cu)
        count = message_counts(op, size, n)[0]
        if count == 0:
            continue
        run = prepare(op, placements(op)[0], rank, n, count, TIMED_SEED, device)[0]
        for _ in range(cfg["warmup_iters"]):
            run()
        sync(device)
    rows: list[dict] = []
    per_iter = cfg.get("per_iter", False)
    for cycle in range(cfg.get("cycles", 1)):  # nccl-tests -N: the whole sweep again
        for size in sizes:
            count, nbytes = message_counts(op, size, n)
            if count == 0:
                continue
            for in_place in placements(op):
                run = prepare(op, in_place, rank, n, count, TIMED_SEED, device)[0]
                run()  # one untimed call, as nccl-tests does before its barrier
                seconds, each = timed(run, iters, device, per_iter)
                seconds = reduce_across([seconds], cfg["average"], device)[0]
                time_us = seconds * 1e6
                algbw, busbw = bandwidths(op, nbytes, time_us, n)
                wrong = count_wrong(op, in_place, rank, n, count, len(rows) + 1, device, corrupt)
                row = {
                    "op": op, "size": nbytes, "count": count, "type": "float",
                    "redop": "sum" if op in REDUCING else "none",
                    "root": 0 if op in ROOTED else -1, "time_us": time_us, "algbw": algbw,
                    "busbw": busbw, "wrong": wrong, "in_place": in_place, "nranks": n,
                    "cycle": cycle}
                if each is not None:  # nccl-tests: each iteration's time is the slowest rank's
                    ranks = [[t * 1e6 for t in r] for r in gather_lists(each, n, device)]
                    row |= {"iter_times_us": [max(col) for col in zip(*ranks, strict=True)],
                            "rank_iter_times_us": ranks, "iter_skip": cfg.get("per_iter_skip", 0)}
                rows.append(row)
    return rows


def bare_all_reduce(bench: dict, iters: int, how: str, device: str, n: int) -> dict:
    """The overhead baseline: a bare timed loop of all_reduce at the benchmark row's size,
    nothing else; the report compares the two busbw (1.0 = no overhead)."""
    import torch
    import torch.distributed as dist

    t = torch.ones(bench["count"], device=device)
    dist.all_reduce(t)
    sync(device)
    dist.barrier()
    sync(device)
    started = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(t)
    sync(device)
    seconds = reduce_across([(time.perf_counter() - started) / iters], how, device)[0]
    busbw = bandwidths("all_reduce", bench["size"], seconds * 1e6, n)[1]
    return {"bare_size": bench["size"], "bare_all_reduce_time_us": seconds * 1e6,
            "bare_all_reduce_busbw": busbw, "bench_all_reduce_busbw": bench["busbw"],
            "bench_vs_bare": bench["busbw"] / busbw if busbw > 0 else None}


def bench_main(cfg: dict) -> dict:
    import torch

    from labkit.runtime.dist import setup, teardown

    info = setup()
    rank, n, device = info.rank, info.world_size, info.device
    rows, skipped, bare = [], [], None
    for op in cfg["ops"]:
        reason = probe(op, rank, n, device)
        if reason:
            skipped.append({"op": op, "placement": "both", "reason": reason})
            continue
        rows += bench_op(op, cfg, rank, n, device)
        if op == "all_reduce" and rows:  # right after the sweep: same state, same size
            bare = bare_all_reduce(rows[-1], cfg["iters"], cfg["average"], device, n)
    result = {
        "rows": rows, "skipped": skipped, "bare": bare, "backend": info.backend,
        "device": device, "world_size": n, "nnodes": info.num_nodes,
        "nproc_per_node": info.local_world_size, "torch_version": torch.__version__,
        # what nccl-tests' JSON records besides the rows (labkit.collectives.nccl_json)
        "devices": device_facts(rank, n, info.hostname, device), "env": run_env(),
        "nccl_version": nccl_version_code() if info.backend == "nccl" else None,
        "per_iter_clock": "CUDA events" if device.startswith("cuda") else "host clock",
    }
    teardown()
    return result


def init_main() -> dict:
    """Seconds to import torch, to join the process group, from script start to joined, and
    for the first all_reduce: each the max across ranks (the job waits for the slowest)."""
    import torch

    imported = time.perf_counter()
    import torch.distributed as dist

    from labkit.runtime.dist import setup, teardown

    before = time.perf_counter()
    info = setup()
    joined = time.perf_counter()
    x = torch.ones(1, device=info.device)
    dist.all_reduce(x)
    sync(info.device)
    first = time.perf_counter() - joined
    values = [imported - STARTED, joined - before, joined - STARTED, first]
    worst = reduce_across(values, "max", info.device)
    teardown()
    return dict(zip(("import_s", "init_s", "start_to_init_s", "first_collective_s"), worst,
                    strict=True)) | {"world_size": info.world_size, "backend": info.backend}


def main(argv: list[str]) -> None:
    cfg = json.loads(argv[0])
    result = bench_main(cfg) if cfg.get("mode", "bench") == "bench" else init_main()
    publish(result)


if __name__ == "__main__":
    main(sys.argv[1:])
