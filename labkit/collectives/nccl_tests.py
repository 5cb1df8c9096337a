"""NVIDIA's nccl-tests binaries run beside ``labkit bench collectives``, and the two compared.

``run_nccl_tests`` runs ``all_reduce_perf`` (or another op's binary) from PATH with the same
sizes, iterations and rank-combining rule as a labkit run, writes its ``-J`` JSON and reads it
back (``labkit.collectives.nccl_json``); ``compare_rows`` lines the two up size by size. Without
MPI, one nccl-tests process drives ``ngpus`` GPUs (``-g``) where labkit runs one process per
GPU: both use NCCL, the launch differs.

    from labkit.collectives import compare_rows, run_collectives, run_nccl_tests
    mine = run_collectives("all_reduce", nproc=8, min_bytes="1M", max_bytes="1G")
    theirs = run_nccl_tests("all_reduce", ngpus=8, min_bytes="1M", max_bytes="1G", out="a.json")
    compare_rows(mine.rows, theirs.rows)
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from labkit.collectives.formulas import AVERAGES, CollectiveRow, parse_size
from labkit.collectives.nccl_json import AVERAGE_FLAG, NcclTestsRun, read_nccl_tests_json
from labkit.errors import LaunchError, ParameterError

BINARY_NAMES = {"all_to_all": "alltoall"}  # labkit's op -> nccl-tests' name, where they differ
OUTPUT_LINES = 5  # of a failed run's output, in the error


def binary_name(op: str) -> str:
    """nccl-tests' binary for ``op``: ``all_reduce`` -> ``all_reduce_perf``."""
    return f"{BINARY_NAMES.get(op, op)}_perf"


def nccl_tests_command(binary: str, ngpus: int, min_bytes: int | str, max_bytes: int | str,
                       step_factor: int, iters: int, warmup_iters: int, average: str,
                       per_iter: bool, out: str | Path) -> list[str]:
    """The nccl-tests command line for one sweep that writes ``out`` (``-J``)."""
    if average not in AVERAGES or ngpus < 1:
        raise ParameterError(f"need ngpus >= 1 and average in {AVERAGES}")
    command = [binary, "-b", str(parse_size(min_bytes)), "-e", str(parse_size(max_bytes)),
               "-f", str(step_factor), "-g", str(ngpus), "-n", str(iters), "-w",
               str(warmup_iters), "-a", str(AVERAGE_FLAG[average])]
    return command + (["-I", "1"] if per_iter else []) + ["-J", str(out)]


def run_nccl_tests(op: str = "all_reduce", ngpus: int = 1, min_bytes: int | str = "1K",
                   max_bytes: int | str = "16M", step_factor: int = 2, iters: int = 20,
                   warmup_iters: int = 5, average: str = "max", per_iter: bool = False,
                   out: str | Path = "nccl_tests.json", timeout_s: float = 600.0,
                   binary: str | None = None) -> NcclTestsRun:
    """Run nccl-tests' binary for ``op`` (from PATH unless ``binary``) and read its JSON.

    ``average`` is labkit's name for nccl-tests' ``-a`` (labkit's default, max, is its -a 3).
    Raises ``LaunchError`` when the binary is missing, fails, or writes no JSON (nccl-tests
    before 2.17.3 has no ``-J``)."""
    exe = binary or shutil.which(binary_name(op))
    if not exe:
        raise LaunchError(f"{binary_name(op)} is not on PATH: build NVIDIA/nccl-tests "
                          f"(make) and add its build/ folder to PATH")
    out = Path(out)
    if out.exists():
        raise ParameterError(f"{out} exists: nccl-tests would write {out}.0 instead; give a new "
                             f"path")
    command = nccl_tests_command(exe, ngpus, min_bytes, max_bytes, step_factor, iters,
                                 warmup_iters, average, per_iter, out)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                              check=False)
    except subprocess.TimeoutExpired:
        raise LaunchError(f"{exe} ran past {timeout_s:.0f} s") from None
    tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-OUTPUT_LINES:])
    if done.returncode != 0:
        raise LaunchError(f"{exe} exited with {done.returncode}: {tail}")
    if not out.exists():
        raise LaunchError(f"{exe} wrote no {out} (nccl-tests before 2.17.3 has no -J): {tail}")
    return read_nccl_tests_json(out)


def compare_rows(labkit_rows: list[CollectiveRow],
                 nccl_rows: list[CollectiveRow]) -> list[dict[str, Any]]:
    """Per (op, size, placement) in both, first cycle: time and busbw of each and the busbw
    ratio labkit / nccl-tests (None where nccl-tests measured 0)."""
    theirs = {(r.op, r.size, r.in_place): r for r in nccl_rows if r.cycle == 0}
    out = []
    for r in labkit_rows:
        other = theirs.get((r.op, r.size, r.in_place))
        if r.cycle or other is None:
            continue
        out.append({"op": r.op, "size": r.size,
                    "placement": "in-place" if r.in_place else "out-of-place",
                    "labkit_time_us": r.time_us, "nccl_tests_time_us": other.time_us,
                    "labkit_busbw": r.busbw, "nccl_tests_busbw": other.busbw,
                    "busbw_ratio": r.busbw / other.busbw if other.busbw > 0 else None})
    return out
