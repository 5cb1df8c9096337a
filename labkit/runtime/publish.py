"""Hand a result from rank 0 back to the notebook (or launcher) as JSON: no pickle crosses."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from labkit.errors import ParameterError

RUN_DIR_ENV = "LABKIT_RUN_DIR"
PUBLISHED_FILE = "published.json"


def publish(obj: Any, *, any_rank: bool = False) -> Any:
    """On rank 0 of a labkit launch, store ``obj`` (JSON-able) for the launcher; return ``obj``.

    Other ranks and plain processes outside a launch just get ``obj`` back, so code that
    publishes runs anywhere. The last call wins. ``any_rank=True`` publishes from this rank
    whatever its number (a job whose reporting role is not rank 0).
    """
    run_dir = os.environ.get(RUN_DIR_ENV)
    if not run_dir or (os.environ.get("RANK", "0") != "0" and not any_rank):
        return obj
    try:
        text = json.dumps(obj)
    except (TypeError, ValueError) as exc:
        raise ParameterError(
            f"labkit.runtime.publish needs JSON-able data (dicts, lists, numbers, strings); {exc}. "
            "Convert tensors with .tolist() or float()."
        ) from exc
    target = Path(run_dir) / PUBLISHED_FILE
    tmp = target.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, target)  # a reader never sees half a file
    return obj


def read_published(run_dir: str | Path) -> Any:
    """What rank 0 published in that run folder, or None when it published nothing."""
    path = Path(run_dir) / PUBLISHED_FILE
    return json.loads(path.read_text()) if path.exists() else None
