"""The hangs, rank side: small agent loops in which one rank goes wrong, run in a real gloo group.

Every scenario is a loop of ``STEPS`` steps, each a little work and an all_reduce of
"gradients" (4 floats), timed and published (``RankContext.steps``); one rank, the culprit,
deviates, never before step ``HANG_STEP`` (a watcher learns the job's step time from the steps
before). ``HEALTHY`` is the same loop with nobody deviating, run for a given time. The catalog (``SCENARIOS``) is plain data the driver reads without
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
    from collections.abc import Iterator

    from labkit.hangs.live import LiveRank
    from labkit.hangs.recorder import Recorder

STEPS = 4
HANG_STEP = 2  # the first step any culprit deviates in
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
    Scenario("lock_deadlock", "at step 2 rank 0 holds a.lock and waits for b.lock, rank 1 "
             "holds b.lock and waits for a.lock (fcntl file locks in the run dir)", 2, 1,
             "lock wait timeout; recorder: wait-for cycle, rank 1 broke the lock order"),
)}
HEALTHY = Scenario("healthy", "every rank steps in lockstep, nobody deviates, for as long as "
                   "a hang would take to time out", 3, -1, "nothing to detect")


def check_timeout(timeout_s: float | None) -> float:
    """The collective timeout to use: ``DEFAULT_TIMEOUT_S`` for None; ParameterError unless
    positive."""
    from labkit.errors import ParameterError

    timeout_s = DEFAULT_TIMEOUT_S if timeout_s is None else float(timeout_s)
    if timeout_s <= 0:
        raise ParameterError(f"the hang timeout must be positive, got {timeout_s:g}")
    return timeout_s


@dataclass
class RankContext:
    rank: int
    world_size: int
    timeout_s: float
    culprit: int
    recorder: Recorder
    run_dir: Path
    device: str = "cpu"
    live: LiveRank | None = None
    duration_s: float = 0.0  # the healthy job's length

    def steps(self, count: int | None = STEPS) -> Iterator[int]:
        """Step numbers from 0: each step's work done before it is handed out, its time (work
        and the loop body) published when the body returns, except step 0's (a warm-up: the
        first collective sets up connections). ``count=None``: until the body breaks."""
        import torch

        step = 0
        while count is None or step < count:
            started = time.perf_counter()
            agent_work(torch, self.device)
            yield step
            step += 1
            if self.live is not None:
                self.live.step_done(step, time.perf_counter() - started, warmup=step == 1)

    def grads(self, torch: ModuleType, size: int = 4) -> object:
        return torch.ones(size, device=self.device)


# --- rank code ----------------------------------------------------------------------------
def agent_work(torch: ModuleType, device: str) -> None:
    """A step's own work: a small policy's forward pass over a batch."""
    weights = torch.full((64, 64), 0.01, device=device)
    batch = torch.ones(32, 64, device=device)
    for _ in range(4):
        batch = torch.tanh(batch @ weights)


def wait_for_next_task() -> None:
    """An idle agent: alive, waiting for work, in no collective."""
    time.sleep(FOREVER_S)


def slow_tool_call() -> None:
    """A tool call that never returns (a stuck HTTP request, a deadlocked subprocess...)."""
    time.sleep(FOREVER_S)


def _run_extra_collective(ctx: RankContext, dist: ModuleType, torch: ModuleType) -> None:
    for step in ctx.steps():
        dist.all_reduce(ctx.grads(torch))
        if ctx.rank == ctx.culprit and step == HANG_STEP - 1:
            dist.all_reduce(ctx.grads(torch))  # "sync my stats": pairs with the others' next step
    wait_for_next_task()


def _run_wrong_order(ctx: RankContext, dist: ModuleType, torch: ModuleType) -> None:
    for step in ctx.steps():
        grads, params = ctx.grads(torch), ctx.grads(torch)
        if ctx.rank == ctx.culprit and step == HANG_STEP:
            dist.broadcast(params, src=0)
            dist.all_reduce(grads)
        else:
            dist.all_reduce(grads)
            dist.broadcast(params, src=0)
    wait_for_next_task()


def _run_shape_mismatch(ctx: RankContext, dist: ModuleType, torch: ModuleType) -> None:
    for step in ctx.steps():
        size = 5 if ctx.rank == ctx.culprit and step == HANG_STEP else 4  # one extra feature
        dist.all_reduce(ctx.grads(torch, size))
    wait_for_next_task()


def _run_stuck_rank(ctx: RankContext, dist: ModuleType, torch: ModuleType) -> None:
    from datetime import timedelta

    # DETAIL already runs a monitored barrier before every collective; an explicit one under
    # DETAIL puts torch's sequence numbers out of step (rank 0 counts more) and the next
    # fingerprint check then fails on every rank with a false "mismatch" (torch 2.13, gloo).
    # monitored_barrier exists on gloo only.
    monitored = os.environ.get("TORCH_DISTRIBUTED_DEBUG", "").upper() != "DETAIL" \
        and dist.get_backend() == "gloo"
    for step in ctx.steps():
        if ctx.rank == ctx.culprit and step == HANG_STEP:
            slow_tool_call()
        if monitored:  # debugging aid: rank 0 names every rank that does not arrive in time
            dist.monitored_barrier(timeout=timedelta(seconds=ctx.timeout_s), wait_all_ranks=True)
        dist.all_reduce(ctx.grads(torch))
    wait_for_next_task()


def _run_dead_rank(ctx: RankContext, dist: ModuleType, torch: ModuleType) -> None:
    for step in ctx.steps():
        if ctx.rank == ctx.culprit and step == HANG_STEP:
            os.kill(os.getpid(), signal.SIGKILL)  # no handler runs, nothing is dumped
        dist.all_reduce(ctx.grads(torch))
    wait_for_next_task()


def _run_lock_deadlock(ctx: RankContext, dist: ModuleType, torch: ModuleType) -> None:
    locks = ctx.recorder.folder / "locks"
    locks.mkdir(exist_ok=True)
    first, second = ("a", "b") if ctx.rank != ctx.culprit else ("b", "a")  # culprit: b first
    for step in ctx.steps():
        if step == HANG_STEP:  # each agent updates two shared files
            with file_lock(locks / f"{first}.lock", ctx.timeout_s, ctx.recorder):
                dist.barrier()  # both hold their first lock now
                with file_lock(locks / f"{second}.lock", ctx.timeout_s, ctx.recorder):
                    pass
        dist.all_reduce(ctx.grads(torch))
    wait_for_next_task()


def _run_healthy(ctx: RankContext, dist: ModuleType, torch: ModuleType) -> None:
    first = time.monotonic()
    for _ in ctx.steps(count=None):
        grads = ctx.grads(torch, 5)
        grads[4] = float(time.monotonic() - first >= ctx.duration_s)  # "my time is up"
        dist.all_reduce(grads)
        if grads[4].item() > 0:  # agreed by the all_reduce: every rank stops at the same step
            break


RANK_CODE: dict[str, Callable[..., None]] = {
    "extra_collective": _run_extra_collective,
    "wrong_order": _run_wrong_order,
    "shape_mismatch": _run_shape_mismatch,
    "stuck_rank": _run_stuck_rank,
    "dead_rank": _run_dead_rank,
    "lock_deadlock": _run_lock_deadlock,
    "healthy": _run_healthy,
}
