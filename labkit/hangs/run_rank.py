"""The hangs, what each rank runs: ``run_rank.py CONFIG_JSON`` (``{"scenario", "timeout_s",
"backend", "duration_s"}``) runs the scenario (the catalog and the rank code are in
``scenarios``) with both flight recorders (labkit's and PyTorch's) and a collective timeout of
``timeout_s`` seconds, publishing its progress live when the driver gave it a Redis and a job
(``labkit.hangs.live``)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from labkit.hangs.scenarios import HEALTHY, RANK_CODE, SCENARIOS, RankContext


def main(argv: list[str]) -> None:
    """Rank entry: ``run_rank.py CONFIG_JSON`` under labkit's launcher."""
    import torch
    import torch.distributed as dist

    from labkit.hangs.live import LiveRank
    from labkit.hangs.recorder import Recorder, dump_folder
    from labkit.hangs.torch_fr import TorchFlightRecorder
    from labkit.runtime import dist as ldist
    from labkit.runtime.dist import wait_for_peers
    from labkit.runtime.publish import RUN_DIR_ENV

    cfg = json.loads(argv[0])  # {"scenario": NAME, "timeout_s": S, "backend": B, "duration_s": D}
    name, timeout_s = cfg["scenario"], float(cfg["timeout_s"])
    backend = cfg.get("backend", "gloo")
    run_dir = Path(os.environ[RUN_DIR_ENV])
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    wait_for_peers(dump_folder(run_dir) / "ready", rank, world_size)
    torch_fr = TorchFlightRecorder(rank, world_size, backend)  # before the group: NCCL's name
    info = ldist.setup(backend, timeout_s=timeout_s)
    recorder = Recorder(info.rank, info.world_size, dump_folder(run_dir), timeout_s)
    recorder.torch_fr = torch_fr
    recorder.install()
    live = LiveRank.from_env(recorder)
    spec = HEALTHY if name == HEALTHY.name else SCENARIOS[name]
    ctx = RankContext(info.rank, info.world_size, timeout_s, spec.culprit, recorder, run_dir,
                      device=info.device, live=live, duration_s=float(cfg.get("duration_s", 0)))
    RANK_CODE[name](ctx, dist, torch)
    if live is not None:
        live.close()
    recorder.close("finished")
    ldist.teardown()


if __name__ == "__main__":
    main(sys.argv[1:])
