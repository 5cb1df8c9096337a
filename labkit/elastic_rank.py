"""The rank side of ``labkit.elastic``: ``python -m labkit.worker elastic_rank.py CONFIG_JSON``.

Every step takes the same *global* batch, whatever the world size: rank r of W takes rows
r, r+W, ... and scales its loss by W / B, so DDP's gradient average is the mean over the global
batch. The model and optimizer are replicated, so one copy (rank 0's) is a checkpoint that
loads at any world size: resharding replicated state is free. Sharded state would need
``torch.distributed.checkpoint``, whose metadata file is a pickle (see the lesson).

SIGTERM (a preemption notice, or torchrun restarting the ranks because a node joins) sets a
flag that one small all-reduce per step shares: every rank checkpoints at the same step and
leaves. Ranks that got the notice exit 0; the others exit ``REFORM_EXIT`` so their agents
re-form the group without the departed node. No step is lost either way.
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

from labkit.cadence import cadence_of
from labkit.checkpoint import CheckpointManager, model_fingerprint
from labkit.control import JOB_ENV, URL_ENV, Heartbeat
from labkit.dist import setup, teardown
from labkit.elastic import PROGRESS_FILE, REFORM_EXIT, ElasticConfig, global_batch, make_model
from labkit.launch import NODE_ENV
from labkit.progress import params_sha256
from labkit.publish import publish
from labkit.runlog import append_record, read_records

_notice = {"at": 0.0}  # when SIGTERM arrived (0: not yet)


def _on_sigterm(signum: int, frame: object) -> None:
    _notice["at"] = _notice["at"] or time.time()


def _reached(path: Path) -> int:
    """The furthest step any earlier attempt finished (0 when there was none)."""
    return max((int(r.get("step", 0)) for r in read_records(path)), default=0)


def main(argv: list[str]) -> None:
    cfg = ElasticConfig.from_json(argv[0])
    signal.signal(signal.SIGTERM, _on_sigterm)
    torch.set_num_threads(1)
    info = setup()
    node = int(os.environ.get(NODE_ENV, info.node_rank))
    beat = None  # with a control plane configured, each rank reports its state and step
    if os.environ.get(URL_ENV) and os.environ.get(JOB_ENV):
        beat = Heartbeat(os.environ[URL_ENV], os.environ[JOB_ENV],
                         f"node{node}.rank{os.environ.get('LOCAL_RANK', '0')}",
                         ttl_s=3.0, interval_s=1.0, node=node, rank=info.rank).start()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
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
    if info.rank == 0:
        reached = _reached(log)
        append_record(log, {"event": "start", "t": time.time(), "world": info.world_size,
                            "attempt": attempt, "from_step": start, "reached": reached,
                            "lost_steps": max(0, reached - start)})
    dist.barrier()
    if beat is not None:
        beat.set_state("running", start)
    left_because, step = "finished", start
    flags = torch.zeros(3)
    cadence, last_save = cadence_of(cfg), time.monotonic()
    while step < cfg.steps:
        x, y = global_batch(cfg, step)
        mine = slice(info.rank, None, info.world_size)
        loss = ((ddp(x[mine]) - y[mine]) ** 2).sum() * (info.world_size / cfg.global_batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # DDP: the mean gradient over the global batch, on every rank
        optimizer.step()
        time.sleep(cfg.work_s)  # stands for the compute a real step would do
        step += 1
        if beat is not None:
            beat.set_step(step)
        due_here = info.rank == 0 and cadence.due(step, last_save)  # rank 0's clock decides
        flags = torch.tensor([loss.item(), float(_notice["at"] > 0), float(due_here)])
        dist.all_reduce(flags)  # the global loss, "somebody got a notice", "checkpoint now"
        due = flags[2] > 0
        if info.rank == 0:
            append_record(log, {"t": time.time(), "step": step, "world": info.world_size,
                                "attempt": attempt, "loss": flags[0].item() / info.world_size})
        if due or flags[1] > 0 or step == cfg.steps:
            if info.rank == 0:
                checkpoints.save(step, {"model": model.state_dict(),
                                        "optimizer": optimizer.state_dict()},
                                 {"world": info.world_size, "attempt": attempt})
                append_record(log, {"event": "checkpoint", "t": time.time(), "step": step,
                                    "world": info.world_size, "attempt": attempt})
            dist.barrier()  # the checkpoint exists before anyone leaves
            last_save = time.monotonic()
        if flags[1] > 0:
            left_because = "notice" if _notice["at"] else "reform"
            if beat is not None:
                beat.set_state("draining", step)
            if _notice["at"]:
                append_record(log, {"event": "notice", "t": _notice["at"], "step": step,
                                    "node": node, "rank": info.rank, "attempt": attempt})
            break
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
        publish({"steps": step, "world": info.world_size, "attempt": attempt,
                 "final_loss": flags[0].item() / info.world_size if step > start else None,
                 "params_sha256": params_sha256(model)})
    if beat is not None:
        beat.leave()
    teardown()
    if left_because == "reform":  # ... else leave non-zero so our agent re-forms the group
        sys.exit(REFORM_EXIT)


if __name__ == "__main__":
    main(sys.argv[1:])
