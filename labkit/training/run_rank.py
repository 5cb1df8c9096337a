"""The rank side of ``labkit.training.run``: ``python -m labkit.runtime.worker run_rank.py CONFIG_JSON``."""

from __future__ import annotations

import sys

import torch

from labkit.runtime.dist import setup, teardown
from labkit.runtime.publish import publish
from labkit.training.run import TrainConfig


def main(argv: list[str]) -> None:
    cfg = TrainConfig.from_json(argv[0])
    torch.set_num_threads(1)  # many ranks share few cores; tiny models gain nothing from threads
    info = setup()
    try:
        if cfg.mode == "sync":
            from labkit.training.sync import run_sync

            result = run_sync(cfg, info)
        else:
            from labkit.training.actor_learner import run_async

            result = run_async(cfg, info)
        if info.rank == 0:
            publish(result)
    finally:
        teardown()


if __name__ == "__main__":
    main(sys.argv[1:])
