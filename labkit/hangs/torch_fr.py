"""PyTorch's own flight recorder, beside labkit's: switched on the documented way, dumped by
every rank when a hang is detected, each dump saying who wrote it.

Switched on by environment before the process group exists (names as torch 2.13 reads them:
``torch/csrc/distributed/c10d/FlightRecorder.hpp`` and ``ProcessGroupNCCL.hpp``):

* ``TORCH_FR_BUFFER_SIZE`` (legacy ``TORCH_NCCL_TRACE_BUFFER_SIZE``): entries kept; above 0 it
  records, on every backend (gloo too, in its CPU recorder);
* ``TORCH_FR_DUMP_TEMP_FILE`` (legacy ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``): the dump's path
  prefix; the writer appends the rank, and ``torchfrtrace DIR -p PREFIX`` reads them back;
* ``TORCH_NCCL_DUMP_ON_TIMEOUT=1``: NCCL's watchdog dumps by itself on a timeout. Gloo has no
  such hook, so labkit dumps on gloo's timeout error, its own watchdog, SIGTERM and SIGUSR1
  (``Recorder.dump``), through :meth:`TorchFlightRecorder.dump` on either backend: NCCL's
  buffer with ``_dump_nccl_trace`` (CUDA builds), the CPU one with ``_dump_fr_trace``.

Who wrote a dump: torch's pickle holds no rank, host, job or attempt (operators asked for that in
pytorch/pytorch#117883; torch's analyzer labels each rank ``host_rank<N>``). So the file name
carries them, ``<job>_a<attempt>_<host>_fr_rank_<rank>`` (the analyzer finds ``fr_rank_`` and
reads the rank after it), and ``who/rank<R>.json`` beside it says rank, host, job, attempt, pid,
backend, torch version, why and when, with torch's own JSON dump of the same buffer
(``_dump_fr_trace_json``): labkit reads that JSON, never the pickle.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

BUFFER_ENV = "TORCH_FR_BUFFER_SIZE"
DUMP_FILE_ENV = "TORCH_FR_DUMP_TEMP_FILE"
DUMP_ON_TIMEOUT_ENV = "TORCH_NCCL_DUMP_ON_TIMEOUT"
BUFFER_SIZE = 2000  # torch's default, what the tutorial recommends
FR_PREFIX = "fr_rank_"  # what torchfrtrace gets as -p
TORCH_FOLDER = "torch"  # inside the hang dump folder: torch's dumps only (the analyzer reads all)
WHO_FOLDER = "who"  # inside it: who wrote each dump, and torch's JSON of the same buffer
_UNSAFE = re.compile(r"[^A-Za-z0-9.-]+")


def fr_env(folder: str | os.PathLike) -> dict[str, str]:
    """The environment that switches torch's flight recorder on for a job whose hang dumps go
    to ``folder`` (labkit's ``<run dir>/hangs``)."""
    return {BUFFER_ENV: str(BUFFER_SIZE), DUMP_ON_TIMEOUT_ENV: "1",
            DUMP_FILE_ENV: str(Path(folder) / TORCH_FOLDER / FR_PREFIX)}


@dataclass(frozen=True)
class Writer:
    """Who wrote a dump: what pytorch/pytorch#117883 asks each dump to say."""

    rank: int
    world_size: int
    host: str
    job: str
    attempt: int
    pid: int
    backend: str
    torch: str

    @property
    def stem(self) -> str:
        """``<job>_a<attempt>_<host>_``: what goes before torch's prefix in the file name."""
        return "_".join(_UNSAFE.sub("-", part) for part in
                        (self.job, f"a{self.attempt}", self.host)) + "_"


class TorchFlightRecorder:
    """Dumps this rank's PyTorch flight recorder to ``$TORCH_FR_DUMP_TEMP_FILE`` with who wrote
    it. Create it before ``init_process_group``: it puts the writer into the file name that
    NCCL's own dump on timeout uses too."""

    def __init__(self, rank: int, world_size: int, backend: str) -> None:
        prefix = os.environ.get(DUMP_FILE_ENV, "")
        self.enabled = bool(prefix) and int(os.environ.get(BUFFER_ENV, "0") or 0) > 0
        torch = sys.modules.get("torch")
        self.writer = Writer(rank, world_size, socket.gethostname(),
                             os.environ.get("TORCHELASTIC_RUN_ID") or "local",
                             int(os.environ.get("TORCHELASTIC_RESTART_COUNT") or 0), os.getpid(),
                             backend, getattr(torch, "__version__", "?"))
        prefix_path = Path(prefix)
        named = prefix_path.with_name(self.writer.stem + prefix_path.name)
        self.path = Path(f"{named}{rank}")
        self.who = prefix_path.parent.parent / WHO_FOLDER / f"rank{rank}.json"
        if self.enabled:
            os.environ[DUMP_FILE_ENV] = str(named)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.who.parent.mkdir(parents=True, exist_ok=True)
        self.dumps = 0
        self.last_error = ""

    def dump(self, reason: str) -> Path | None:
        """Write torch's buffer (its pickle, for torchfrtrace) and ``who/rank<R>.json``; any
        failure is kept in ``last_error``, never raised (a hang must still get its dumps)."""
        if not self.enabled:
            return None
        try:
            from torch._C import _distributed_c10d as c10d

            nccl = self.writer.backend == "nccl"  # NCCL's buffer, not the CPU one gloo fills
            dump_pickle = getattr(c10d, "_dump_nccl_trace", None) if nccl else None
            dump_json = getattr(c10d, "_dump_nccl_trace_json", None) if nccl else None
            # no stack traces: symbolizing them took about 1 s per dump here (addr2line), and
            # the recorder's faulthandler stacks say where each rank is
            data = (dump_pickle or c10d._dump_fr_trace)(True, False, False)
            trace = json.loads((dump_json or c10d._dump_fr_trace_json)(True, False))
            _write_atomic(self.path, data)
            who = {"writer": asdict(self.writer), "file": self.path.name, "reason": reason,
                   "dumped_at": time.time(), "trace": trace}
            _write_atomic(self.who, json.dumps(who).encode())
        except Exception as exc:  # noqa: BLE001 (evidence is optional, the job's error is not)
            self.last_error = f"{type(exc).__name__}: {exc}"
            return None
        self.dumps += 1
        return self.path


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".tmp-{os.getpid()}-{time.monotonic_ns()}")  # no FR_PREFIX in it
    tmp.write_bytes(data)
    os.replace(tmp, path)


def read_who(folder: str | os.PathLike) -> dict[int, dict[str, Any]]:
    """rank -> its ``who/rank<R>.json`` (writer, reason, time, torch's JSON trace)."""
    found = {}
    for path in sorted((Path(folder) / WHO_FOLDER).glob("rank*.json")):
        try:
            who = json.loads(path.read_text())
        except ValueError:
            continue
        found[int(who["writer"]["rank"])] = who
    return found
