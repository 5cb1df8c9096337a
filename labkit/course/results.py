"""Where a notebook keeps data a later lesson reads (a fitted model, a measured table).

During ``labkit course run`` that is the run folder (``$LABKIT_RESULTS_DIR``, set by the
runner), so a batch run's results travel with its executed notebooks. In JupyterLab it is
``runs/interactive/`` at the repository root. Files are JSON: nothing is unpickled.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

RESULTS_ENV = "LABKIT_RESULTS_DIR"


def results_dir() -> Path:
    """The folder for this run's results (created if needed)."""
    configured = os.environ.get(RESULTS_ENV)
    if configured:
        folder = Path(configured)
    else:
        repo = Path(__file__).resolve().parents[2]
        base = repo if (repo / "notebooks").is_dir() else Path.cwd()
        folder = base / "runs" / "interactive"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def save_result(name: str, data: Any) -> Path:
    """Write ``data`` (JSON-able) as ``<results_dir>/<name>.json``; returns the path."""
    path = results_dir() / f"{name}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)
    return path


def load_result(name: str) -> Any | None:
    """What ``save_result(name, ...)`` stored in this run's folder, or None."""
    path = results_dir() / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def as_dict(obj: Any) -> dict[str, Any]:
    """A result dataclass as strict JSON-able data (for ``save_result``): inf becomes None."""
    return _jsonable(asdict(obj))


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value
