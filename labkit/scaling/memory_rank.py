"""The rank side of ``labkit.scaling.memory``: hold experience replicated or sharded, sample it.

``python -m labkit.runtime.worker memory_rank.py CONFIG_JSON`` (``{"mode", "per_agent_mb"}``). Each rank makes ``per_agent_mb``
of float32 rows whose values are known from (rank, index), then either all-gathers everyone's
rows (``replicated``) or keeps its own (``sharded``, sampling fetches rows from their owners with
``all_to_all_single``). Resident memory (``/proc/self/status``) is taken against a baseline after
imports, process-group init and a warm-up, each reading after ``malloc_trim`` so the allocator's
kept free pages are not counted; rank 0 publishes the per-rank numbers as JSON.
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist

from labkit.runtime import publish
from labkit.runtime.rss import release_freed, reset_peak, vm_kib

DIM = 256  # float32 per row: 1 KiB rows
BATCH = 512
ROUNDS = 4
_CHUNK = 512  # rows made at a time: temporaries of 1 MiB, not a shard's worth


def expected_rows(rank: int, index: torch.Tensor) -> torch.Tensor:
    """The rows ``index`` of ``rank``'s shard: [rank, index, (7 rank + 3 index + j) % 251...]."""
    rows = torch.empty(len(index), DIM)
    rows[:, 0] = rank
    rows[:, 1] = index.to(torch.float32)
    cols = torch.arange(2, DIM)
    rows[:, 2:] = ((7 * rank + 3 * index[:, None] + cols) % 251).to(torch.float32)
    return rows


def make_shard(rank: int, rows: int) -> torch.Tensor:
    shard = torch.empty(rows, DIM)
    for lo in range(0, rows, _CHUNK):  # in chunks: no shard-sized temporaries
        hi = min(lo + _CHUNK, rows)
        shard[lo:hi] = expected_rows(rank, torch.arange(lo, hi))
    return shard


def fetch(shard: torch.Tensor, owner: torch.Tensor, local: torch.Tensor, world: int
          ) -> torch.Tensor:
    """Rows (owner[i], local[i]) from their owners: two all_to_all_single rounds."""
    order = torch.argsort(owner, stable=True)
    counts = torch.bincount(owner, minlength=world)
    incoming_counts = torch.empty_like(counts)
    dist.all_to_all_single(incoming_counts, counts)
    send, recv = counts.tolist(), incoming_counts.tolist()
    asked = torch.empty(sum(recv), dtype=torch.int64)
    dist.all_to_all_single(asked, local[order].contiguous(), recv, send)
    got = torch.empty(len(owner), DIM)
    dist.all_to_all_single(got, shard[asked].contiguous(), send, recv)
    batch = torch.empty_like(got)
    batch[order] = got
    return batch


def hold_and_sample(mode: str, rank: int, world: int, rows: int, gen: torch.Generator
                    ) -> tuple[list[torch.Tensor], bool]:
    """Holds ``rows`` per agent in ``mode`` and checks ``ROUNDS`` sampled batches; returns what
    the rank keeps (so it stays resident while measured) and whether every batch was right."""
    shard = make_shard(rank, rows)
    if mode == "replicated":
        store = torch.empty(world, rows, DIM)
        dist.all_gather(list(store.unbind(0)), shard)
        kept = [store]  # the store holds this rank's rows too: the shard is dropped
    elif mode == "sharded":
        kept = [shard]
    else:
        raise SystemExit(f"mode must be replicated or sharded, got {mode!r}")
    del shard
    ok = True
    for _ in range(ROUNDS):
        index = torch.randint(world * rows, (BATCH,), generator=gen)
        owner, local = index // rows, index % rows
        if mode == "replicated":
            batch = kept[0].view(-1, DIM)[index]
        else:
            batch = fetch(kept[0], owner, local, world)
        want = torch.cat([expected_rows(int(o), local[i:i + 1]) for i, o in enumerate(owner)])
        ok = ok and torch.equal(batch, want)
    return kept, ok


def main() -> None:
    cfg = json.loads(sys.argv[1])  # {"mode": ..., "per_agent_mb": ...}
    mode, per_agent_mb = cfg["mode"], float(cfg["per_agent_mb"])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    rows = max(1, int(per_agent_mb * 1024 * 1024) // (DIM * 4))
    gen = torch.Generator().manual_seed(1234 + rank)
    # Warm-up on a few rows: the same code path, so libtorch pages and gloo buffers it touches
    # are in the baseline, not counted as experience.
    kept, _ = hold_and_sample(mode, rank, world, 64, gen)
    del kept
    dist.all_gather([torch.empty(3, dtype=torch.float64) for _ in range(world)],
                    torch.zeros(3, dtype=torch.float64))
    dist.barrier()
    release_freed()
    base, _ = vm_kib()
    reset_peak()

    kept, ok = hold_and_sample(mode, rank, world, rows, gen)
    dist.barrier()
    release_freed()
    now, peak = vm_kib()
    mine = torch.tensor([(now - base) / 1024, (peak - base) / 1024, float(ok)],
                        dtype=torch.float64)
    every = [torch.empty(3, dtype=torch.float64) for _ in range(world)]
    dist.all_gather(every, mine)
    if rank == 0:
        publish({"mode": mode, "world_size": world, "rows_per_agent": rows,
                        "rss_extra_mb": [round(float(t[0]), 2) for t in every],
                        "rss_peak_extra_mb": [round(float(t[1]), 2) for t in every],
                        "sample_ok": [bool(t[2]) for t in every]})
    del kept
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
