"""What labkit's launcher costs: the same no-op job through labkit and through bare torchrun.

Both start N torchrun agents in parallel with c10d rendezvous on 127.0.0.1; the job joins the
process group, does one barrier and leaves. Runs alternate (labkit, bare, labkit, ...) so load
drifts on the machine hit both alike; we report medians.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from labkit.errors import LaunchError, ParameterError
from labkit.runtime.launch import launch_local, torchrun_args
from labkit.runtime.ports import free_port

NOOP_JOB = """\
import torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()
dist.destroy_process_group()
"""


def bare_torchrun(script: Path, nnodes: int, nproc_per_node: int, timeout_s: float) -> float:
    """Seconds for the job under plain torchrun agents, output discarded."""
    port, run_id = free_port(), uuid.uuid4().hex[:12]
    commands = [
        [sys.executable, "-m", "torch.distributed.run",
         *torchrun_args(nnodes, nproc_per_node, f"127.0.0.1:{port}", run_id),
         "--local-addr=127.0.0.1", str(script)]
        for _ in range(nnodes)
    ]
    started = time.monotonic()
    scratch = script.parent / "tmp"  # torchrun's log folders, removed with the bench folder
    scratch.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(scratch)}
    procs = [subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
             for c in commands]
    codes = [p.wait(timeout=timeout_s) for p in procs]
    seconds = time.monotonic() - started
    if any(codes):
        raise LaunchError(f"bare torchrun failed with exit codes {codes}")
    return seconds


def torch_import_seconds() -> float:
    """Seconds for a fresh Python process to import torch: what every agent and rank pays."""
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    return time.monotonic() - started


def labkit_launch(script: Path, nnodes: int, nproc_per_node: int, timeout_s: float) -> float:
    result = launch_local(script, nnodes=nnodes, nproc_per_node=nproc_per_node,
                          timeout_s=timeout_s, echo=None, check=True)
    return result.seconds


def measure_launch(repeats: int = 5, nnodes: int = 2, nproc_per_node: int = 2,
                   timeout_s: float = 120.0) -> dict:
    """Median seconds of the no-op job via labkit and via bare torchrun, interleaved."""
    if repeats < 1:
        raise ParameterError(f"repeats must be >= 1, got {repeats}")
    labkit_runs, bare_runs, imports = [], [], []
    with tempfile.TemporaryDirectory(prefix="labkit-bench-") as folder:
        script = Path(folder) / "noop.py"
        script.write_text(NOOP_JOB)
        for _ in range(repeats):
            labkit_runs.append(labkit_launch(script, nnodes, nproc_per_node, timeout_s))
            bare_runs.append(bare_torchrun(script, nnodes, nproc_per_node, timeout_s))
            imports.append(torch_import_seconds())
    labkit_s, bare_s = statistics.median(labkit_runs), statistics.median(bare_runs)
    return {
        "benchmark": "launch",
        "nnodes": nnodes,
        "nproc_per_node": nproc_per_node,
        "repeats": repeats,
        "labkit_s": round(labkit_s, 3),
        "bare_torchrun_s": round(bare_s, 3),
        "overhead": round(labkit_s / bare_s - 1.0, 3),
        "torch_import_s": round(statistics.median(imports), 3),
        "labkit_runs_s": [round(s, 3) for s in labkit_runs],
        "bare_torchrun_runs_s": [round(s, 3) for s in bare_runs],
    }
