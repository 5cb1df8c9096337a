"""Where an experiment's ranks find their code: ``topic/X_rank.py`` beside the driver ``topic/X.py``.

Every experiment in the lab is written one way, as a pair of files in its topic's folder:

- the driver, ``X.py``, runs in the notebook kernel or the ``labkit`` command: it validates the
  parameters, launches the job and turns what rank 0 published into a dataclass, without
  importing torch;
- the rank script, ``X_rank.py``, is what ``torchrun`` runs on every rank: it imports torch,
  joins the process group, does the work and publishes a JSON result.

The driver names its rank script with ``RANK_SCRIPT = rank_script(__name__)``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from labkit.errors import LabkitError


def rank_script(driver: str) -> Path:
    """The file of module ``<driver>_rank`` (``labkit.scaling.ddp`` -> ``.../scaling/ddp_rank.py``),
    found without importing it (the rank side imports torch)."""
    spec = importlib.util.find_spec(f"{driver}_rank")
    if spec is None or spec.origin is None:
        raise LabkitError(f"{driver} has no rank script: expected a module {driver}_rank")
    return Path(spec.origin)
