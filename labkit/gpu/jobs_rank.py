"""The rank side of ``labkit.gpu.jobs``: what torchrun runs on every rank of a GPU check.

``python -m labkit.runtime.worker jobs_rank.py CONFIG_JSON``; ``CONFIG_JSON["mode"]`` picks one:

- ``setup``: ``labkit.runtime.dist.setup()`` exactly as the lessons call it; every rank reports
  its backend and GPU, and one all_reduce of known values is checked.
- ``events``: an all_reduce loop timed two ways over the same calls: the host clock around
  ``torch.cuda.synchronize()`` (how ``labkit bench collectives`` times) and CUDA events.
- ``ddp``: DDP on each rank's GPU without, then with ``gradient_as_bucket_view``: CUDA memory
  allocated (exact: live tensors, not resident pages) and whether the grads are bucket views.
- ``checkpoint``: a CUDA model, its Adam state and the RNG states saved with
  ``labkit.reliability.checkpoint.CheckpointManager`` and loaded back with ``weights_only=True``.

Rank 0 publishes one JSON dict.
"""

from __future__ import annotations

import gc
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from labkit.runtime import publish
from labkit.runtime.dist import RankInfo, setup, teardown

MIB = 2**20


def nccl_version_text() -> str | None:
    """``torch.cuda.nccl.version()`` as NCCL prints it (``2.21.5``), or None without NCCL."""
    try:
        version = torch.cuda.nccl.version()
    except (AttributeError, RuntimeError):
        return None
    if isinstance(version, int):  # old torch: NCCL's version code, one number
        return str(version)
    return ".".join(str(v) for v in version[:3]) + "".join(str(v) for v in version[3:])


def _need_gpu(info: RankInfo) -> torch.device:
    if not info.device.startswith("cuda"):
        raise RuntimeError(f"dist.setup() chose {info.backend} on {info.device}: this check "
                           "needs a GPU per rank")
    return torch.device(info.device)


def _max_over_ranks(values: list[float], device: torch.device | str) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def setup_mode(cfg: dict[str, Any]) -> dict[str, Any]:
    """Join as every lesson does; per rank: backend, local rank, CUDA device; a checked sum."""
    info = setup()
    on_gpu = info.device.startswith("cuda")
    mine = torch.tensor([info.rank, info.local_rank, float(info.backend == "nccl"),
                         torch.cuda.current_device() if on_gpu else -1.0],
                        dtype=torch.float64, device=info.device)
    every = [torch.zeros_like(mine) for _ in range(info.world_size)]
    dist.all_gather(every, mine)
    x = torch.full((1024,), info.rank + 1.0, device=info.device)
    dist.all_reduce(x)
    n = info.world_size
    ok = bool((x == n * (n + 1) / 2).all().item())
    ranks = [{"rank": int(r), "local_rank": int(lr), "nccl": bool(b), "cuda_device": int(d)}
             for r, lr, b, d in (t.tolist() for t in every)]
    result = {"backend": info.backend, "device": info.device, "world_size": n, "ranks": ranks,
              "all_reduce_ok": ok, "nccl_version": nccl_version_text(),
              "torch_version": torch.__version__, "cuda_version": torch.version.cuda,
              "device_name": torch.cuda.get_device_name(info.device) if on_gpu else None}
    teardown()
    return result


def events_mode(cfg: dict[str, Any]) -> dict[str, Any]:
    """Seconds per all_reduce of ``size`` bytes, host clock and CUDA events, the same loop."""
    info = setup()
    device = _need_gpu(info)
    buf = torch.ones(max(1, cfg["size"] // 4), device=device)
    for _ in range(cfg["warmup"]):
        dist.all_reduce(buf)
    torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    began = time.perf_counter()
    start.record()
    for _ in range(cfg["iters"]):
        dist.all_reduce(buf)  # synchronous: the current stream waits for NCCL's, so end follows
    end.record()
    torch.cuda.synchronize()
    host_s = (time.perf_counter() - began) / cfg["iters"]
    event_s = start.elapsed_time(end) / 1e3 / cfg["iters"]
    host_s, event_s = _max_over_ranks([host_s, event_s], device)
    teardown()
    return {"size": buf.numel() * 4, "iters": cfg["iters"], "world_size": info.world_size,
            "backend": info.backend, "host_us": host_s * 1e6, "event_us": event_s * 1e6}


def _ddp_memory(view: bool, layers: int, device: torch.device, iters: int) -> list[float]:
    """One DDP model: MiB allocated over a baseline after DDP(...), after the last step (grads
    alive), peak over the steady steps (2..), gradient and bucket sizes, and the view checks."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from labkit.scaling.ddp_rank import WIDTH, grad_storage_mb, grads_are_bucket_views, mlp

    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated(device)
    torch.manual_seed(0)
    ddp = DDP(mlp([WIDTH] * (layers + 1)).to(device), device_ids=[device],
              gradient_as_bucket_view=view)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-4)
    x = torch.randn(8, WIDTH, device=device)
    built = (torch.cuda.memory_allocated(device) - base) / MIB
    after, peaks, views = [], [], []
    for _ in range(iters):
        torch.cuda.reset_peak_memory_stats(device)
        ddp(x).square().mean().backward()
        opt.step()
        torch.cuda.synchronize()
        after.append((torch.cuda.memory_allocated(device) - base) / MIB)
        peaks.append((torch.cuda.max_memory_allocated(device) - base) / MIB)
        views.append(grads_are_bucket_views(ddp))
        storage = grad_storage_mb(ddp)
        opt.zero_grad(set_to_none=True)
    buckets = ddp.reducer._get_zeros_like_grad_buckets()  # private torch API, as ddp_rank uses
    bucket_mb = sum(b.buffer().nbytes for b in buckets) / MIB
    grad_mb = sum(p.numel() * p.element_size() for p in ddp.parameters()) / MIB
    del ddp, opt, x, buckets
    gc.collect()
    torch.cuda.empty_cache()
    return [built, after[-1], max(peaks[2:] or peaks), grad_mb, bucket_mb, storage,
            float(views[0]), float(views[-1])]


def ddp_mode(cfg: dict[str, Any]) -> dict[str, Any]:
    """Without, then with ``gradient_as_bucket_view``, in one process: CUDA's allocated bytes
    count live tensors only, so the first model leaves nothing behind for the second."""
    from labkit.scaling.ddp_rank import WIDTH

    info = setup()
    device = _need_gpu(info)
    layers = max(1, round(cfg["model_mb"] * MIB / (4 * WIDTH * (WIDTH + 1))))
    rows = []
    for view in (False, True):
        mine = _ddp_memory(view, layers, device, cfg["iters"])
        worst = _max_over_ranks(mine[:6], device)  # memory: the largest rank
        checks = _max_over_ranks([-v for v in mine[6:]], device)  # views: all ranks must agree
        rows.append({"gradient_as_bucket_view": view, "layers": layers,
                     "allocated_built_mb": worst[0], "allocated_after_step_mb": worst[1],
                     "peak_steady_mb": worst[2], "grad_mb": worst[3], "bucket_mb": worst[4],
                     "grad_storage_mb": worst[5], "views_after_iter0": checks[0] == -1.0,
                     "grads_are_bucket_views": checks[1] == -1.0})
    teardown()
    return {"world_size": info.world_size, "backend": info.backend, "device": info.device,
            "iters": cfg["iters"], "rows": rows}


def _leaves(value: Any, path: str = "") -> dict[str, torch.Tensor]:
    """Every tensor in nested dicts and lists, by its path (``optimizer/state/0/exp_avg``)."""
    if isinstance(value, torch.Tensor):
        return {path: value}
    items = value.items() if isinstance(value, dict) else \
        enumerate(value) if isinstance(value, list | tuple) else ()
    found: dict[str, torch.Tensor] = {}
    for key, item in items:
        found |= _leaves(item, f"{path}/{key}" if path else str(key))
    return found


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], device: str | None) -> list[str]:
    """Paths whose tensors differ in value, dtype or presence, or (with ``device``) lie elsewhere."""
    bad = sorted(set(a) ^ set(b))
    for path in sorted(set(a) & set(b)):
        want = str(a[path].device) if device is None else device
        if (str(b[path].device) != want or b[path].dtype != a[path].dtype
                or not torch.equal(a[path].cpu(), b[path].cpu())):
            bad.append(path)
    return bad


def checkpoint_mode(cfg: dict[str, Any]) -> dict[str, Any]:
    """Save CUDA state through CheckpointManager, load it back three ways (raw ``torch.load``
    keeps each tensor's device, ``latest`` maps all onto the GPU or all onto the CPU), and check
    that a step after resuming equals the uninterrupted one. No process group: one process.
    ``cfg["device"]`` (default: the current GPU) puts it elsewhere, e.g. on the CPU."""
    from torch import nn

    from labkit.reliability.checkpoint import CheckpointManager, model_fingerprint, params_sha256
    from labkit.reliability.rng import capture_rng

    device = cfg.get("device") or f"cuda:{torch.cuda.current_device()}"

    def model_and_optimizer() -> tuple[nn.Module, torch.optim.Optimizer]:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(64, 256), nn.Tanh(), nn.Linear(256, 8)).to(device)
        return model, torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(model: nn.Module, opt: torch.optim.Optimizer, seed: int) -> None:
        x = torch.randn(32, 64, device=device, generator=torch.Generator(device).manual_seed(seed))
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad()

    model, opt = model_and_optimizer()
    step(model, opt, 1)
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "rng": capture_rng(),
             "half": torch.arange(16, device=device, dtype=torch.float16), "step": 1}
    original = {k: v.detach().clone() for k, v in _leaves(state).items()}  # training goes on
    with tempfile.TemporaryDirectory(prefix="labkit-gpu-ckpt-") as folder:
        manager = CheckpointManager(Path(folder), fingerprint=model_fingerprint(model))
        began = time.perf_counter()
        saved = manager.save(1, state, {"device": device})
        save_s = time.perf_counter() - began
        rank_file = saved / "rank-0.pt"
        raw = torch.load(rank_file, weights_only=True)  # no map_location: devices as saved
        began = time.perf_counter()
        on_device = manager.latest(map_location=device)
        load_s = time.perf_counter() - began
        on_cpu = manager.latest(map_location="cpu")
        result = {"device": device, "tensors": len(original),
                  "cuda_tensors": sum(t.is_cuda for t in original.values()),
                  "bytes": rank_file.stat().st_size, "save_s": save_s, "load_s": load_s,
                  "raw_mismatch": _same(original, _leaves(raw), None),
                  "device_mismatch": _same(original, _leaves(on_device.state), device),
                  "cpu_mismatch": _same(original, _leaves(on_cpu.state), "cpu")}
    resumed, resumed_opt = model_and_optimizer()  # resumed as the lessons do: from the CPU copy
    resumed.load_state_dict(on_cpu.state["model"])
    resumed_opt.load_state_dict(on_cpu.state["optimizer"])
    step(model, opt, 2)
    step(resumed, resumed_opt, 2)
    return result | {"resumed_equal": params_sha256(model) == params_sha256(resumed)}


MODES = {"setup": setup_mode, "events": events_mode, "ddp": ddp_mode,
         "checkpoint": checkpoint_mode}


def main(argv: list[str]) -> None:
    cfg = json.loads(argv[0])
    publish(MODES[cfg["mode"]](cfg))


if __name__ == "__main__":
    main(sys.argv[1:])
