"""How fast this machine is now, measured, for the limits that must hold on any machine.

A wall-clock limit set against an amount of work (wait 2 s for a node to boot, 300 s for a
job) holds on the machine it was tuned on and fails on one three times slower or busier. The
lab sizes such limits from what this module measures in the same run instead: the time a fresh
Python takes to ``import torch``, which is most of what starting a rank or a torchrun agent
costs, and which grows with the machine's load exactly as start-ups do.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import time

from labkit.errors import ParameterError

IMPORT_TIMEOUT_S = 600.0  # only bounds a broken interpreter; a healthy import takes seconds


@functools.cache
def torch_import_s() -> float:
    """Seconds a fresh interpreter takes to ``import torch`` here (measured once per process)."""
    began = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True, timeout=IMPORT_TIMEOUT_S,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - began


def startup_allowance_s(processes: int = 1, factor: float = 5.0, floor_s: float = 30.0) -> float:
    """A generous bound on starting ``processes`` torch processes at once on this machine:
    ``factor`` times their measured import, done ``processes`` at a time on few cores, and
    never below ``floor_s``."""
    if processes < 1 or factor <= 0 or floor_s < 0:
        raise ParameterError("need processes >= 1, factor > 0 and floor_s >= 0")
    return max(floor_s, factor * processes * torch_import_s())


__all__ = ["startup_allowance_s", "torch_import_s"]
