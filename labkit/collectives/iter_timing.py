"""Rank-side helpers of ``bench_rank`` for nccl-tests' ``-I 1`` and ``-J``: per-iteration
clocks, and the facts about each rank that the JSON file records.

Per-iteration times follow nccl-tests (``BenchTime`` in ``src/common.cu``): one mark before each
call and one after the last, iteration i lasting from mark i to mark i+1. On a GPU the marks
are CUDA events on the current stream (a collective returns before it finishes there, so a host
clock would time the launch); on CPU, where gloo returns when the collective is done, they are
``time.perf_counter`` readings. The time column itself stays the host clock over the whole loop
between two device syncs, as in nccl-tests, where it too is separate from the events.
"""

from __future__ import annotations

import os
import time

# What the JSON's "env" keeps of rank 0's environment: the variables that change how a
# collective runs. nccl-tests writes the whole environment; a file people share should not.
ENV_PREFIXES = ("NCCL_", "TORCH_", "GLOO_", "CUDA_", "OMP_", "TORCHELASTIC_", "LABKIT_")
ENV_NAMES = frozenset({"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK",
                       "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK"})
TEXT_WIDTH = 1024  # bytes per gathered string: nccl-tests' hostname and device-name buffers


class IterClock:
    """``iters + 1`` marks: CUDA events on a GPU, host clock readings otherwise."""

    def __init__(self, iters: int, device: str) -> None:
        import torch

        self.events = ([torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
                       if device.startswith("cuda") else None)
        self.stamps = [0.0] * (iters + 1)

    def mark(self, i: int) -> None:
        if self.events is not None:
            self.events[i].record()
        else:
            self.stamps[i] = time.perf_counter()

    def intervals(self) -> list[float]:
        """Seconds of each iteration; call after the device is synchronised."""
        if self.events is not None:
            return [a.elapsed_time(b) * 1e-3 for a, b in zip(self.events, self.events[1:],
                                                              strict=False)]
        return [b - a for a, b in zip(self.stamps, self.stamps[1:], strict=False)]


def gather_lists(values: list[float], n: int, device: str) -> list[list[float]]:
    """Every rank's list (all the same length), in rank order."""
    import torch
    import torch.distributed as dist

    mine = torch.tensor(values, dtype=torch.float64, device=device)
    every = [torch.empty_like(mine) for _ in range(n)]
    dist.all_gather(every, mine)
    return [t.tolist() for t in every]


def gather_text(text: str, n: int, device: str) -> list[str]:
    """Every rank's string, as bytes in a tensor (no pickle), cut at ``TEXT_WIDTH`` bytes."""
    import torch
    import torch.distributed as dist

    raw = text.encode()[:TEXT_WIDTH]
    mine = torch.zeros(TEXT_WIDTH, dtype=torch.uint8, device=device)
    if raw:
        mine[: len(raw)] = torch.tensor(list(raw), dtype=torch.uint8, device=device)
    every = [torch.empty_like(mine) for _ in range(n)]
    dist.all_gather(every, mine)
    return [bytes(t.cpu().tolist()).rstrip(b"\0").decode(errors="replace") for t in every]


def device_facts(rank: int, n: int, hostname: str, device: str) -> list[dict]:
    """nccl-tests' "devices" entries, one per rank: rank, group, pid, hostname, and on a GPU its
    index, PCI address (``%04x:%02x:%02x`` domain, bus, device) and name; None on CPU, which
    has no such facts (nccl-tests has no CPU path)."""
    import torch

    index, pci, name = None, None, None
    if device.startswith("cuda"):
        index = torch.device(device).index or 0
        props = torch.cuda.get_device_properties(index)
        name = props.name
        ids = [getattr(props, f"pci_{k}_id", None) for k in ("domain", "bus", "device")]
        if None not in ids:
            pci = f"{ids[0]:04x}:{ids[1]:02x}:{ids[2]:02x}"
    numbers = gather_lists([float(os.getpid()), -1.0 if index is None else float(index)],
                           n, device)
    hosts = gather_text(hostname, n, device)
    pcis = gather_text(pci or "", n, device)
    names = gather_text(name or "", n, device)
    return [{"rank": r, "group": 0, "pid": int(numbers[r][0]), "hostname": hosts[r],
             "device": None if numbers[r][1] < 0 else int(numbers[r][1]),
             "device_hex": pcis[r] or None, "device_info": names[r] or None}
            for r in range(n)]


def run_env() -> list[str]:
    """This rank's ``NAME=value`` lines that bear on collectives, sorted (``ENV_PREFIXES``)."""
    return sorted(f"{k}={v}" for k, v in os.environ.items()
                  if (k.startswith(ENV_PREFIXES) or k in ENV_NAMES) and not k.endswith("_URL"))


def nccl_version_code() -> int | None:
    """``torch.cuda.nccl.version()`` as NCCL's version code (2.27.3 -> 22703), or None."""
    import torch

    try:
        version = torch.cuda.nccl.version()
    except (AttributeError, RuntimeError):
        return None
    if isinstance(version, int):
        return version
    major, minor, patch = (list(version) + [0, 0, 0])[:3]
    # NCCL_VERSION(X,Y,Z) in nccl.h: X*10000 + Y*100 + Z from 2.9 on, X*1000 + Y*100 + Z before
    return major * (10000 if (major, minor) >= (2, 9) else 1000) + minor * 100 + patch
