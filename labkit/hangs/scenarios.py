"""The hangs, rank side: small agent loops in which one rank goes wrong, run in a real gloo group.

Every scenario is a loop of ``STEPS`` steps that all_reduces "gradients" (4 floats); one rank,
the culprit, deviates. The catalog (``SCENARIOS``) is plain data the driver reads without
importing torch; ``run_rank.py`` (what the driver launches) runs one on each rank with the
flight recorder installed and a short collective timeout, so a hang fails in seconds instead of
PyTorch's 30 minutes (gloo).

What really happens on gloo (torch 2.13), without TORCH_DISTRIBUTED_DEBUG=DETAIL:

* extra collective, ops in a different order, a rank stuck before a collective: the ranks wait
  until the timeout, then gloo raises "Timed out waiting 5000ms for recv/send operation". A
  different order does not fail at once: gloo matches collectives by sequence number, not op.
* mismatched shapes: no error at the mismatch. The ranks with the common shape complete the
  all_reduce with wrong values and move on; the odd rank waits for data that never comes.
* a dead rank: the others fail at once with "Connection reset/closed by peer [127.0.0.1]:PORT",
  which names an address, not a rank.

With DETAIL, gloo is wrapped in a ProcessGroupWrapper that runs a monitored barrier and an
all_gather of "fingerprints" (op, shapes, dtypes, torch's seq) before every collective:

* different ops or shapes fail at once on every rank ("Detected mismatch between collectives
  on ranks. Rank 1 is running collective: CollectiveFingerPrint(... OpType=BROADCAST ...)");
* a rank that does not arrive is named by rank 0 after the timeout ("Ranks 1 failed to pass
  monitoredBarrier in 5000 ms"); a dead rank is named the same way, at once, though the
  message still says "in 5000 ms";
* a rank that is ahead is not named (unless it is rank 0): the others are in no collective,
  and the rank ahead only says "check rank 0 logs for faulty rank";
* an explicit ``dist.monitored_barrier`` under DETAIL puts torch's sequence numbers out of step
  (rank 0 counts more) and the next collective fails everywhere with a false "mismatch":
  use one or the other (``stuck_rank`` skips its own barrier under DETAIL).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from labkit.hangs.file_locks import file_lock

if TYPE_CHECKING:
    from labkit.hangs.recorder import Recorder

STEPS = 4
DEFAULT_TIMEOUT_S = 5.0
FOREVER_S = 3600.0  # "never returns": torchrun stops the rank long before


@dataclass(frozen=True)
class Scenario:
    """One hang: what goes wrong, on how many ranks, which rank is to blame, how it shows."""

    name: str
    summary: str
    world_size: int
    culprit: int
    detected_by: str
    detail: bool = False  # run with TORCH_DISTRIBUTED_DEBUG=DETAIL unless told otherwise


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("extra_collective", "rank 2 all_reduces once more than the others (the agent "
             "that's ahead); the job hangs steps later, at the end of the loop", 3, 2,
             "gloo timeout on rank 2; recorder: only rank 2 issued the last seq"),
    Scenario("wrong_order", "at step 2 rank 1 calls broadcast then all_reduce, the others "
             "all_reduce then broadcast", 3, 1,
             "DETAIL fingerprint mismatch at once; recorder: different op at the same seq",
             detail=True),
    Scenario("shape_mismatch", "at step 2 rank 2 all_reduces 5 floats, the others 4", 3, 2,
             "gloo timeout (the others finish that step with wrong values); recorder: "
             "different shape at the same seq"),
    Scenario("stuck_rank", "at step 2 rank 1 blocks in Python (a tool call that never "
             "returns) before the collective", 3, 1,
             "monitored_barrier on rank 0 names rank 1; recorder: rank 1 is behind; its "
             "stack shows where it is stuck"),
    Scenario("dead_rank", "at step 2 rank 1 is SIGKILLed (think OOM killer)", 3, 1,
             "peers lose the connection at once; rank 1 leaves no dump; torchrun: exit -9"),
    Scenario("lock_deadlock", "rank 0 holds a.lock and waits for b.lock, rank 1 holds b.lock "
             "and waits for a.lock (fcntl file locks in the run dir)", 2, 1,
             "lock wait timeout; recorder: wait-for cycle, rank 1 broke the lock order"),
)}


@dataclass
class RankContext:
    rank: int
    world_size: int
    timeout_s: float
    culprit: int
    recorder: Recorder
    run_dir: Path


# --- rank code ----------------------------------------------------------------------------
def wait_for_next_task() -> None:
    """An idle agent: alive, waiting for work, in no collective."""
    time.sleep(FOREVER_S)


def slow_tool_call() -> None:
    """A tool call that never returns (a stuck HTTP request, a deadlocked subprocess...)."""
    time.sleep(FOREVER_S)


def _run_extra_collective(ctx: RankContext, dist: ModuleType, torch: ModuleType) -> None:
    for step in range(STEPS):
        dist.all_reduce(torch.ones(4))
        if ctx.rank == ctx.culprit and step == 1:
            dist.all_reduce(torch.ones(4))  # "sync my stats": pairs with the others' next step
    wait_for_next_task()


def _run_wrong_order(ctx: RankContext, dist: ModuleType, torch: ModuleType) -> None:
    for step in range(STEPS):
        grads, params = torch.ones(4), torch.ones(4)
        if ctx.rank == ctx.culprit and step == 2:
            dist.broadcast(params, src=0)
            dist.all_reduce(grads)
        else:
            dist.all_reduce(grads)
            dist.broadcast(params, src=0)
    wait_for_next_task()


def _run_shape_mismatch(ctx: RankContext, dist: ModuleType, torch: ModuleType) -> None:
    for step in range(STEPS):
        size = 5 if ctx.rank == ctx.culprit and step == 2 else 4  # one extra feature
        dist.all_reduce(torch.ones(size))
    wait_for_next_task()


def _run_stuck_rank(ctx: RankContext, dist: ModuleType, torch: ModuleType) -> None:
    from datetime import timedelta

    # DETAIL already runs a monitored barrier before every collective; an explicit one under
    # DETAIL puts torch's sequence numbers out of step (rank 0 counts more) and the next
    # fingerprint check then fails on every rank with a false "mismatch" (torch 2.13, gloo).
    monitored = os.environ.get("TORCH_DISTRIBUTED_DEBUG", "").upper() != "DETAIL"
    for step in range(STEPS):
        if ctx.rank == ctx.culprit and step == 2:
            slow_tool_call()
        if monitored:  # debugging aid: rank 0 names every rank that does not arrive in time
            dist.monitored_barrier(timeout=timedelta(seconds=ctx.timeout_s), wait_all_ranks=True)
        dist.all_reduce(torch.ones(4))
    wait_for_next_task()


def _run_dead_rank(ctx: RankContext, dist: ModuleType, torch: ModuleType) -> None:
    for step in range(STEPS):
        if ctx.rank == ctx.culprit and step == 2:
            os.kill(os.getpid(), signal.SIGKILL)  # no handler runs, nothing is dumped
        dist.all_reduce(torch.ones(4))
    wait_for_next_task()


def _run_lock_deadlock(ctx: RankContext, dist: ModuleType, torch: ModuleType) -> None:
    locks = ctx.recorder.folder / "locks"
    locks.mkdir(exist_ok=True)
    first, second = ("a", "b") if ctx.rank != ctx.culprit else ("b", "a")  # culprit: b first
    with file_lock(locks / f"{first}.lock", ctx.timeout_s, ctx.recorder):
        dist.barrier()  # both hold their first lock now
        with file_lock(locks / f"{second}.lock", ctx.timeout_s, ctx.recorder):
            dist.all_reduce(torch.ones(4))
    wait_for_next_task()


RANK_CODE: dict[str, Callable[..., None]] = {
    "extra_collective": _run_extra_collective,
    "wrong_order": _run_wrong_order,
    "shape_mismatch": _run_shape_mismatch,
    "stuck_rank": _run_stuck_rank,
    "dead_rank": _run_dead_rank,
    "lock_deadlock": _run_lock_deadlock,
}
