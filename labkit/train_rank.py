"""The rank side of ``labkit.train``: ``python -m labkit.worker train_rank.py CONFIG_JSON``."""

from __future__ import annotations

import sys

import torch

from labkit.dist import setup, teardown
from labkit.publish import publish
from labkit.train import TrainConfig


def main(argv: list[str]) -> None:
    cfg = TrainConfig.from_json(argv[0])
    torch.set_num_threads(1)  # many ranks share few cores; tiny models gain nothing from threads
    info = setup()
    try:
        if cfg.mode == "sync":
            from labkit.train_sync import run_sync

            result = run_sync(cfg, info)
        else:
            from labkit.train_async import run_async

            result = run_async(cfg, info)
        if info.rank == 0:
            publish(result)
    finally:
        teardown()


if __name__ == "__main__":
    main(sys.argv[1:])
