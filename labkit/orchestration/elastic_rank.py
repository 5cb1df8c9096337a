"""The rank side of ``labkit.orchestration.elastic``: ``python -m labkit.runtime.worker elastic_rank.py CONFIG_JSON``.

Every step takes the same *global* batch, whatever the world size: rank r of W takes rows
r, r+W, ... and scales its loss by W / B, so DDP's gradient average is the mean over the global
batch. The model and optimizer are replicated, so one copy (rank 0's) is a checkpoint that
loads at any world size: resharding replicated state is free. Sharded state would need
``torch.distributed.checkpoint``, whose metadata file is a pickle (see the lesson).

SIGTERM (a preemption notice, or torchrun restarting the ranks because a node joins) sets a
flag that one small all-reduce per step shares: every rank checkpoints at the same step and
leaves. Ranks that got the notice exit 0; the others exit ``REFORM_EXIT`` so their agents
re-form the group without the departed node. No step is lost either way.

Rank 0 reads the scheduler's horizon (``labkit.orchestration.elastic_plan.Horizon``) before every step and the
same all-reduce shares it: at the horizon (the step of a change not carried out yet, or the end
of the job while the last change is in flight) or in a short round (a running node missed it),
every rank holds together, still sharing notices, until the scheduler lets the group go on or
the agents re-form it. Rank 0 logs each hold.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from labkit.orchestration.control import JOB_ENV, Heartbeat
from labkit.orchestration.elastic import HOLD_POLL_S, REFORM_EXIT, ElasticConfig
from labkit.orchestration.elastic_model import global_batch, make_model, rank_batch
from labkit.orchestration.elastic_plan import Horizon, read_horizon
from labkit.orchestration.elastic_report import PROGRESS_FILE
from labkit.reliability.cadence import cadence_of
from labkit.reliability.checkpoint import CheckpointManager, model_fingerprint, params_sha256
from labkit.runtime.dist import setup, teardown
from labkit.runtime.publish import publish
from labkit.runtime.runlog import append_record, read_records
from labkit.services.base import CHILD_REDIS_URL_ENV

_notice = {"at": 0.0}  # when SIGTERM arrived (0: not yet)


def _on_sigterm(signum: int, frame: object) -> None:
    _notice["at"] = _notice["at"] or time.time()


def _reached(path: Path) -> int:
    """The furthest step any earlier attempt finished (0 when there was none)."""
    return max((int(r.get("step", 0)) for r in read_records(path)), default=0)


class _Group:
    """This group as the hold logic sees it: who it is, when it formed, and (rank 0) the log."""

    def __init__(self, rank: int, world: int, attempt: int, folder: Path) -> None:
        self.rank, self.world, self.attempt, self.folder = rank, world, attempt, folder
        self.log = folder / PROGRESS_FILE
        self.formed_at = time.time()
        self.horizon = read_horizon(folder) if rank == 0 else Horizon()

    def hold_reason(self, step: int) -> str | None:
        """Rank 0's reading of the horizon now; the other ranks learn it by all-reduce."""
        if self.rank != 0:
            return None
        self.horizon = read_horizon(self.folder)
        return self.horizon.hold_reason(step, self.world, self.formed_at)

    def hold(self, step: int, reason: str) -> bool:
        """Stand still at ``step`` with every rank until rank 0 sees the reason gone (False) or
        any rank got a notice (True): the group then checkpoints and leaves as usual."""
        began, seen = time.time(), self.horizon
        noticed = False
        while True:
            time.sleep(HOLD_POLL_S)
            still = self.hold_reason(step) is not None
            flags = torch.tensor([float(_notice["at"] > 0), float(still)])
            dist.all_reduce(flags)
            if flags[0] > 0 or flags[1] == 0:
                noticed = bool(flags[0] > 0)
                break
        if self.rank == 0:
            append_record(self.log, {
                "event": "hold", "t": began, "until": time.time(), "step": step,
                "world": self.world, "expected_world": seen.world, "attempt": self.attempt,
                "reason": reason, "waiting_for": seen.waiting_for, "next": seen.next,
                "ended": "notice" if noticed else "released"})
        return noticed

    def gate(self, step: int) -> bool:
        """Before the group's first step: hold if rank 0 says so; True if a notice came."""
        reason = self.hold_reason(step)
        flags = torch.tensor([float(_notice["at"] > 0), float(reason is not None)])
        dist.all_reduce(flags)
        if flags[0] > 0:
            return True
        return flags[1] > 0 and self.hold(step, reason or "horizon")


def _log_start(log: Path, world: int, attempt: int, start: int, short: bool) -> None:
    """Rank 0: the group's start, with the steps lost since the furthest one reached."""
    reached = _reached(log)
    append_record(log, {"event": "start", "t": time.time(), "world": world, "attempt": attempt,
                        "from_step": start, "reached": reached,
                        "lost_steps": max(0, reached - start), "short": short})


def main(argv: list[str]) -> None:
    cfg = ElasticConfig.from_json(argv[0])
    signal.signal(signal.SIGTERM, _on_sigterm)
    torch.set_num_threads(1)
    info = setup()
    node = info.node
    beat = None  # with a control plane configured, each rank reports its state and step
    if os.environ.get(CHILD_REDIS_URL_ENV) and os.environ.get(JOB_ENV):
        beat = Heartbeat(os.environ[CHILD_REDIS_URL_ENV], os.environ[JOB_ENV],
                         f"node{node}.rank{info.local_rank}",
                         ttl_s=3.0, interval_s=1.0, node=node, rank=info.rank).start()
    attempt = info.restart_count
    folder = Path(cfg.ckpt_dir)
    log = folder / PROGRESS_FILE
    model = make_model(cfg)
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)
    checkpoints = CheckpointManager(folder, rank=0, world_size=1, keep=2,
                                    fingerprint=model_fingerprint(model))
    resumed = checkpoints.latest()  # every rank reads rank 0's copy: any world size fits
    start = 0
    if resumed is not None:
        model.load_state_dict(resumed.state["model"])
        optimizer.load_state_dict(resumed.state["optimizer"])
        start = resumed.step
    group = _Group(info.rank, info.world_size, attempt, folder)
    short = group.horizon.hold_reason(start, info.world_size, group.formed_at) == "short"
    if info.rank == 0:
        _log_start(log, info.world_size, attempt, start, short)
    dist.barrier()
    if beat is not None:
        beat.set_state("running", start)
    step, saved = start, start
    loss = None
    cadence, last_save = cadence_of(cfg), time.monotonic()

    def save() -> None:
        nonlocal saved, last_save
        if info.rank == 0:
            checkpoints.save(step, {"model": model.state_dict(),
                                    "optimizer": optimizer.state_dict()},
                             {"world": info.world_size, "attempt": attempt, "loss": loss})
            append_record(log, {"event": "checkpoint", "t": time.time(), "step": step,
                                "world": info.world_size, "attempt": attempt})
        dist.barrier()  # the checkpoint exists before anyone leaves
        saved, last_save = step, time.monotonic()

    noticed = group.gate(step)
    if short and not noticed and info.rank == 0:  # let go short (a node is gone): it trains
        _log_start(log, info.world_size, attempt, start, False)
    while not noticed and step < cfg.steps:
        x, y = global_batch(cfg, step)
        xs, ys, scale = rank_batch(x, y, info.rank, info.world_size)
        part = ((ddp(xs) - ys) ** 2).sum() * scale
        optimizer.zero_grad(set_to_none=True)
        part.backward()  # DDP: the mean gradient over the global batch, on every rank
        optimizer.step()
        time.sleep(cfg.work_s)  # stands for the compute a real step would do
        step += 1
        if beat is not None:
            beat.set_step(step)
        due_here = info.rank == 0 and cadence.due(step, last_save)  # rank 0's clock decides
        hold_here = group.hold_reason(step)
        flags = torch.tensor([part.item(), float(_notice["at"] > 0), float(due_here),
                              float(hold_here is not None)])
        dist.all_reduce(flags)  # the global loss, "a notice", "checkpoint now", "hold here"
        loss = flags[0].item() / info.world_size
        if info.rank == 0:
            append_record(log, {"t": time.time(), "step": step, "world": info.world_size,
                                "attempt": attempt, "loss": loss})
        noticed = bool(flags[1] > 0)
        if flags[2] > 0 or noticed or step == cfg.steps:
            save()
        if not noticed and flags[3] > 0:
            noticed = group.hold(step, hold_here or "horizon")
    if noticed and saved != step:
        save()
    left_because = "finished"
    if noticed:
        left_because = "notice" if _notice["at"] else "reform"
        if beat is not None:
            beat.set_state("draining", step)
        if _notice["at"]:
            append_record(log, {"event": "notice", "t": _notice["at"], "step": step,
                                "node": node, "rank": info.rank, "attempt": attempt})
    if left_because == "reform":  # a peer got the notice: wait briefly for ours (a joining
        deadline = time.monotonic() + cfg.reform_wait_s  # node restarts every rank) ...
        while not _notice["at"] and time.monotonic() < deadline:
            time.sleep(0.02)
        left_because = "notice" if _notice["at"] else "reform"
    if info.rank == 0 and left_because != "finished":
        append_record(log, {"event": "leave", "t": time.time(), "step": step,
                            "world": info.world_size, "attempt": attempt, "node": node,
                            "why": left_because})
    if left_because == "finished" and info.rank == 0:
        if loss is None and resumed is not None:  # nothing left to train: the last loss saved
            loss = resumed.meta.get("loss")
        append_record(log, {"event": "finish", "t": time.time(), "step": step,
                            "world": info.world_size, "attempt": attempt})
        publish({"steps": step, "world": info.world_size, "attempt": attempt,
                 "final_loss": loss, "params_sha256": params_sha256(model)})
    if beat is not None:
        beat.leave()
    teardown()
    if left_because == "reform":  # ... else leave non-zero so our agent re-forms the group
        sys.exit(REFORM_EXIT)


if __name__ == "__main__":
    main(sys.argv[1:])
