"""The hangs, what each rank runs: ``run_rank.py CONFIG_JSON`` (``{"scenario", "timeout_s"}``)
runs the scenario (the catalog and the rank code are in ``scenarios``) with the flight recorder
installed and a collective timeout of ``timeout_s`` seconds."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from labkit.hangs.scenarios import RANK_CODE, SCENARIOS, RankContext


def main(argv: list[str]) -> None:
    """Rank entry: ``run_rank.py CONFIG_JSON`` under labkit's launcher."""
    import torch
    import torch.distributed as dist

    from labkit.hangs.recorder import Recorder, dump_folder
    from labkit.runtime import dist as ldist
    from labkit.runtime.dist import wait_for_peers
    from labkit.runtime.publish import RUN_DIR_ENV

    cfg = json.loads(argv[0])  # {"scenario": NAME, "timeout_s": S}
    name, timeout_s = cfg["scenario"], float(cfg["timeout_s"])
    run_dir = Path(os.environ[RUN_DIR_ENV])
    wait_for_peers(dump_folder(run_dir) / "ready", int(os.environ["RANK"]),
                   int(os.environ["WORLD_SIZE"]))
    info = ldist.setup("gloo", timeout_s=timeout_s)
    recorder = Recorder(info.rank, info.world_size, dump_folder(run_dir), timeout_s).install()
    ctx = RankContext(info.rank, info.world_size, timeout_s, SCENARIOS[name].culprit,
                      recorder, run_dir)
    RANK_CODE[name](ctx, dist, torch)
    recorder.close("finished")
    ldist.teardown()


if __name__ == "__main__":
    main(sys.argv[1:])
