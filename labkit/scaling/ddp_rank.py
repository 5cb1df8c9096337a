"""The rank side of ``labkit.scaling.ddp``: what torchrun runs on every rank.

``python -m labkit.runtime.worker ddp_rank.py CONFIG_JSON``; ``CONFIG_JSON["bench"]`` picks the part.

``bucket_view``: an MLP of ``Linear(1024, 1024)`` layers (``model_mb`` of float32) under DDP with
or without ``gradient_as_bucket_view``. Resident memory (``/proc/self/status``) is taken against
a baseline after a warm-up through the same code path on a tiny model (importing and first-using
DDP and torch.optim costs ~70 MB of RSS that is not tensors). Iteration 0: autograd makes the
grads; iteration 1: DDP rebuilds its buckets in the order grads became ready; from 2 on: steady.
After each ``optimizer.step()`` (grads alive) it checks whether every ``p.grad`` is a view into
its DDP bucket. The driver starts ranks with a fixed glibc mmap threshold, so freed tensors
leave RSS instead of staying in malloc's heap.

``agents``: the same small policy MLP trained ``local`` (own model, no communication), under
DDP and under FSDP2 (``fully_shard`` per Linear, then the root; works on CPU with gloo), same
data and steps in each mode. Per step: a barrier (untimed), then forward, backward, SGD step.
Collectives of one more step are counted with a dispatch mode (the DDP reducer's C++ allreduce
passes the dispatcher too). Rank 0 publishes a list of dicts as JSON.

Leaving: ``labkit.runtime.dist.teardown`` releases what holds the group (see its docstring for why a
group that survives into interpreter shutdown can abort the process); :func:`leave` then
checks that no gloo thread is left, so such a hold is a clear error here, not a rare abort.
"""

from __future__ import annotations

import gc
import itertools
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from labkit.collectives.formulas import bus_factor
from labkit.runtime import publish
from labkit.runtime.dist import setup, teardown
from labkit.runtime.rss import reset_peak, vm_kib
from labkit.runtime.stats import percentile

WIDTH = 1024  # bucket_view model: Linear(1024, 1024) layers, 4 MiB of float32 each
MEM_BATCH = 8  # small: activations stay far below the gradients
MEM_ITERS = 5  # 0: autograd makes the grads, 1: DDP rebuilds buckets, 2..4: steady
OBS, ACTIONS = 4, 2  # the agent policy: a CartPole-sized observation and action space
SEED = 1000
GLOO_THREADS = ("pt_gloo_runloop", "gloo_tcp_loop")  # torch's gloo worker and transport threads
# c10d op -> collective name for bus_factor; all_gather counts its output, reduce_scatter its input
C10D_OPS = {"allreduce_": "all_reduce", "allreduce_coalesced_": "all_reduce",
            "_allgather_base_": "all_gather", "allgather_": "all_gather",
            "allgather_into_tensor_coalesced_": "all_gather",
            "_reduce_scatter_base_": "reduce_scatter", "reduce_scatter_": "reduce_scatter",
            "reduce_scatter_tensor_coalesced_": "reduce_scatter", "broadcast_": "broadcast"}


def mlp(sizes: list[int], act: type[nn.Module] = nn.ReLU) -> nn.Sequential:
    """Linear layers of ``sizes`` with ``act`` between them."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        layers += [nn.Linear(a, b)] + ([act()] if i < len(sizes) - 2 else [])
    return nn.Sequential(*layers)


def per_rank(values: list[float]) -> list[list[float]]:
    """Every rank's ``values`` (same length everywhere), as a list over ranks."""
    mine = torch.tensor(values, dtype=torch.float64)
    every = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(every, mine)
    return [t.tolist() for t in every]


def rss_mb(base_kib: int) -> tuple[float, float]:
    """(current, peak) resident MB above ``base_kib``."""
    now, peak = vm_kib()
    return (now - base_kib) / 1024, (peak - base_kib) / 1024


def grads_are_bucket_views(ddp: DDP) -> bool:
    """True when each DDP bucket's grads share one storage exactly the bucket's size, i.e. every
    ``p.grad`` is a view into the flat buffer that allreduce works on. Without the option each
    grad has a storage of its own. (``_get_zeros_like_grad_buckets`` is private torch API: it
    lists the current buckets with their parameters and a zero buffer of each bucket's size.)"""
    for bucket in ddp.reducer._get_zeros_like_grad_buckets():
        grads = [p.grad for p in bucket.parameters()]
        if any(g is None for g in grads):
            return False
        storages = {g.untyped_storage().data_ptr() for g in grads}
        if len(storages) != 1 or grads[0].untyped_storage().nbytes() != bucket.buffer().nbytes:
            return False
    return True


def grad_storage_mb(model: nn.Module) -> float:
    """MB of the distinct storages behind the grads: where gradient bytes actually live."""
    seen = {p.grad.untyped_storage().data_ptr(): p.grad.untyped_storage().nbytes()
            for p in model.parameters() if p.grad is not None}
    return sum(seen.values()) / 2**20


def train_iters(view: bool, set_to_none: bool, layers: int, width: int, iters: int,
                base_kib: int = 0) -> tuple[list[list[float]], list[bool], DDP]:
    """``iters`` DDP iterations; per iteration (rss, peak, grad storage) MB after ``step`` (grads
    alive) and the view check; entry 0 of the memory is after ``DDP(...)``."""
    torch.manual_seed(SEED)
    ddp = DDP(mlp([width] * (layers + 1)), gradient_as_bucket_view=view)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-4)
    x = torch.randn(MEM_BATCH, width, generator=torch.Generator().manual_seed(dist.get_rank()))
    mem = [[*rss_mb(base_kib), 0.0]]  # params; buckets are allocated but not yet touched
    views = []
    for _ in range(iters):
        reset_peak()
        ddp(x).square().mean().backward()
        opt.step()
        mem.append([*rss_mb(base_kib), grad_storage_mb(ddp)])
        views.append(grads_are_bucket_views(ddp))
        opt.zero_grad(set_to_none=set_to_none)
    return mem, views, ddp


def bucket_view(cfg: dict[str, Any]) -> list[dict]:
    """Part ``bucket_view``: one row, RSS MB as the max over ranks, view checks over all."""
    view, set_to_none = bool(cfg["gradient_as_bucket_view"]), bool(cfg["set_to_none"])
    layers = max(1, round(cfg["model_mb"] * 2**20 / (4 * WIDTH * (WIDTH + 1))))
    # Warm-up: imports, first DDP and optimizer use, gloo buffers; then the baseline.
    train_iters(view, set_to_none, 2, 32, 3)
    gc.collect()
    dist.barrier()
    base, _ = vm_kib()
    reset_peak()
    mem, views, ddp = train_iters(view, set_to_none, layers, WIDTH, MEM_ITERS, base)
    buckets = ddp.reducer._get_zeros_like_grad_buckets()
    bucket_mb = sum(b.buffer().nbytes for b in buckets) / 2**20
    param_mb = sum(p.numel() * p.element_size() for p in ddp.parameters()) / 2**20
    steady_peak = max(peak for _, peak, _ in mem[3:])
    mine = [mem[0][0], mem[0][1], mem[1][0], mem[1][1], mem[2][1], mem[-1][0], steady_peak,
            mem[-1][2], float(views[0]), float(views[1]), float(views[-1])]
    every = per_rank(mine)
    col = list(zip(*every, strict=True))
    return [{"layers": layers, "width": WIDTH, "param_mb": param_mb, "grad_mb": param_mb,
             "bucket_mb": bucket_mb, "buckets": len(buckets),
             "rss_built_mb": max(col[0]), "rss_built_peak_mb": max(col[1]),
             "rss_after_first_iter_mb": max(col[2]), "rss_first_iter_peak_mb": max(col[3]),
             "rss_rebuild_iter_peak_mb": max(col[4]), "rss_steady_mb": max(col[5]),
             "rss_peak_mb": max(col[6]), "grad_storage_mb": max(col[7]),
             "views_after_iter0": all(col[8]), "views_after_iter1": all(col[9]),
             "grads_are_bucket_views": all(col[10])}]


class CollectiveCounter(TorchDispatchMode):
    """Counts c10d collectives run while active: calls, payload bytes (the full-size tensor:
    allreduce's buffer, all_gather's output, reduce_scatter's input) and bus bytes (payload x
    nccl-tests' bus factor: what a ring algorithm sends per rank)."""

    def __init__(self, world: int) -> None:
        super().__init__()
        self.world, self.calls, self.payload, self.bus = world, 0, 0, 0.0
        self.ops: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        op = C10D_OPS.get(func._overloadpacket.__name__) if func.namespace == "c10d" else None
        if op:
            sizes = [t.nbytes for t in tree_flatten((args, kwargs))[0]
                     if isinstance(t, torch.Tensor)]
            size = max(sizes) if op in ("all_gather", "reduce_scatter") else sum(sizes)
            self.calls += 1
            self.payload += size
            self.bus += size * bus_factor(op, self.world)
            self.ops[op] = self.ops.get(op, 0) + 1
        return func(*args, **kwargs)


def agent_model(mode: str, hidden: int, rank: int, world: int) -> nn.Module:
    """The policy MLP: own seed per rank for ``local`` (independent agents), one shared seed
    for DDP and FSDP (FSDP2 takes each rank's shard from its own copy: they must agree)."""
    torch.manual_seed(SEED + rank if mode == "local" else SEED)
    model = mlp([OBS, hidden, hidden, ACTIONS], nn.Tanh)
    if mode == "ddp":
        return DDP(model)
    if mode in ("fsdp", "fsdp_root"):  # per Linear then the root (the recipe), or root only
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (world,))
        for layer in model if mode == "fsdp" else ():
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
    return model


@torch.no_grad()
def full_params(model: nn.Module) -> torch.Tensor:
    """All parameters as one flat tensor (FSDP: gathered from the shards, a collective)."""
    parts = [p.full_tensor() if hasattr(p, "full_tensor") else p.detach()
             for p in model.parameters()]
    return torch.cat([t.reshape(-1) for t in parts])


def train_agent(mode: str, cfg: dict[str, Any], rank: int, world: int,
                reference: torch.Tensor | None) -> tuple[dict, torch.Tensor]:
    """Warm-up, timed steps, one counted step, then the checks; returns (row, final params)."""
    model = agent_model(mode, cfg["hidden"], rank, world)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(rank)  # every agent its own experience
    data = [(torch.randn(cfg["batch"], OBS, generator=gen),
             torch.randint(0, ACTIONS, (cfg["batch"],), generator=gen)) for _ in range(4)]

    def step(i: int) -> None:
        obs, act = data[i % len(data)]
        F.cross_entropy(model(obs), act).backward()
        opt.step()
        opt.zero_grad()

    for i in range(cfg["warmup"]):
        step(i)
    times = []
    for i in range(cfg["steps"]):
        dist.barrier()
        started = time.perf_counter()
        step(i)
        times.append(time.perf_counter() - started)
    counter = CollectiveCounter(world)
    with counter:
        step(cfg["steps"])
    slowest = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # per step: the slowest rank
    ms = [1e3 * t for t in slowest.tolist()]
    total = sum(p.numel() for p in model.parameters())
    local = sum((p.to_local() if hasattr(p, "to_local") else p).numel()
                for p in model.parameters())
    flat = full_params(model)
    first = flat.clone()
    dist.broadcast(first, src=0)
    diff = float((flat - reference).abs().max()) if reference is not None else 0.0
    checks = per_rank([local / total, float(torch.equal(flat, first)), diff])
    col = list(zip(*checks, strict=True))
    row = {"mode": mode, "params": total, "param_bytes": 4 * total,
           "local_param_fraction": max(col[0]), "local_param_fraction_min": min(col[0]),
           "step_ms_median": statistics.median(ms), "step_ms_p90": percentile(ms, 90),
           "collective_calls_per_step": counter.calls, "collectives": counter.ops,
           "payload_bytes_per_step": counter.payload,
           "bus_bytes_per_step": round(counter.bus),
           "replicas_identical": all(col[1]),
           "max_abs_diff_vs_ddp": max(col[2]) if reference is not None else None}
    return row, flat


def agents(cfg: dict[str, Any]) -> list[dict]:
    """Part ``agents``: a row per mode, in order; DDP's final parameters are FSDP's reference."""
    rank, world = dist.get_rank(), dist.get_world_size()
    rows, reference = [], None
    for mode in cfg["modes"]:
        against = reference if mode.startswith("fsdp") else None
        row, flat = train_agent(mode, cfg, rank, world, against)
        if mode == "ddp":
            reference = flat
        rows.append(row)
    return rows


def gloo_threads() -> list[str]:
    """The gloo threads this process still runs (Linux ``/proc``; empty elsewhere)."""
    names = []
    for comm in Path("/proc/self/task").glob("*/comm"):
        try:
            name = comm.read_text().strip()
        except OSError:  # the thread ended meanwhile
            continue
        if name in GLOO_THREADS:
            names.append(name)
    return names


def leave() -> None:
    """Destroy the process group for good (``teardown``), then check that its gloo threads
    ended (``labkit.runtime.dist.teardown`` says why they must)."""
    teardown()
    if left := gloo_threads():
        raise RuntimeError(
            f"the process group outlived destroy_process_group: gloo threads {left} still run, "
            "and one that frees a tensor during interpreter shutdown aborts the process; "
            "something still holds the group (a DDP or FSDP module, a cache, a module imported "
            "after init_process_group that keeps group.WORLD)")


def main() -> None:
    cfg = json.loads(sys.argv[1])
    info = setup()
    rows = bucket_view(cfg) if cfg["bench"] == "bucket_view" else agents(cfg)
    for row in rows:
        row["world_size"] = info.world_size
    publish(rows)
    leave()


if __name__ == "__main__":
    main()
