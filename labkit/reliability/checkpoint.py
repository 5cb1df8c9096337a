"""Atomic, verified, per-rank checkpoints that never unpickle anything.

Layout: ``<directory>/step-<step:09d>/`` holds ``rank-<r>.pt`` (this rank's state, written with
``torch.save``), its sidecar ``rank-<r>.json`` (sha256, size, step, world size, fingerprint) and
rank 0's ``manifest.json`` (step, world size, fingerprint, meta). Each file is written to a
temp file in the same folder, flushed, fsynced and renamed over its name (then the folder is
fsynced), so a crash leaves the old file or the new one, never half of one. A checkpoint counts
only when it is *complete*: manifest and every rank's sidecar present, every rank file's bytes
matching its sidecar and loadable with ``torch.load(weights_only=True)``. ``latest()`` returns
the newest such one and warns about each newer one it had to skip.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any

import torch

from labkit.errors import LabkitError, ParameterError
from labkit.reliability.rng import capture_rng, generator_state, restore_rng, set_generator_state

__all__ = ["CheckpointError", "CheckpointManager", "CheckpointWarning", "IncompatibleCheckpointError",
           "Loaded", "atomic_write", "capture_rng", "generator_state", "model_fingerprint",
           "params_sha256",
           "restore_rng", "set_generator_state"]

MANIFEST = "manifest.json"
STEP_DIR = re.compile(r"^step-(\d{9,})$")
TMP_SUFFIX = ".tmp"

BeforeReplace = Callable[[int, Path], None]
"""``hook(step, temp_path)``: called while a rank file is half written, before its rename."""


class CheckpointError(LabkitError):
    """A checkpoint could not be written, or holds something that cannot be loaded safely."""


class IncompatibleCheckpointError(CheckpointError):
    """The newest complete checkpoint belongs to another world size or another model."""


class CheckpointWarning(UserWarning):
    """A newer checkpoint was skipped (incomplete or corrupt) and an older one used."""


class _Skip(Exception):
    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


@dataclass
class Loaded:
    """What ``latest()`` found: the step, its folder, this rank's state, rank 0's meta, and
    the newer checkpoints skipped on the way as (file, reason)."""

    step: int
    path: Path
    state: dict[str, Any]
    meta: dict[str, Any]
    skipped: list[tuple[str, str]] = field(default_factory=list)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)  # so the rename (or new entry) itself is durable
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, mid_write: Callable[[Path], None] | None = None) -> None:
    """Write ``data`` to ``path`` so a reader (or a crash) sees the old file or the new one.

    Temp file in the same folder, write, flush, fsync, ``os.replace``, fsync the folder.
    ``mid_write(temp)`` runs when half the bytes are written: where fault injection strikes."""
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TMP_SUFFIX)
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as out:
            half = len(data) // 2
            out.write(data[:half])
            if mid_write is not None:
                out.flush()
                mid_write(tmp)
            out.write(data[half:])
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def model_fingerprint(model: torch.nn.Module) -> str:
    """sha256 (first 16 hex digits) of the parameters' names, shapes and dtypes, not values:
    the same architecture gives the same fingerprint, another model another one. A DDP or
    DataParallel wrapper is looked through."""
    wrappers = (torch.nn.DataParallel, torch.nn.parallel.DistributedDataParallel)
    inner = model.module if isinstance(model, wrappers) else model
    digest = hashlib.sha256()
    for name, param in inner.named_parameters():
        digest.update(f"{name}:{tuple(param.shape)}:{param.dtype}\n".encode())
    return digest.hexdigest()[:16]


def params_sha256(model: torch.nn.Module) -> str:
    """SHA-256 of every parameter's bytes in order: equal hashes mean bitwise-equal models."""
    digest = hashlib.sha256()
    for name, param in model.state_dict().items():
        digest.update(name.encode())
        digest.update(param.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except FileNotFoundError:
        raise _Skip(path, "missing (incomplete checkpoint: a save was interrupted)") from None
    except (OSError, ValueError) as exc:
        raise _Skip(path, f"unreadable: {exc}") from None
    if not isinstance(value, dict):
        raise _Skip(path, "unreadable: not a JSON object")
    return value


@dataclass
class CheckpointManager:
    """Save and find this rank's checkpoints in ``directory`` (shared by all ranks).

    Without a process group every rank just writes its own files; call ``save`` on every rank
    at the same steps, and ``latest()`` on every rank before the first save after a restart.
    ``before_replace`` is a fault-injection hook (see ``labkit.reliability.faults.save_hook``)."""

    directory: Path
    _: KW_ONLY
    rank: int = 0
    world_size: int = 1
    keep: int = 3
    fingerprint: str = ""
    before_replace: BeforeReplace | None = None
    _hashes: dict[tuple[str, int, int], str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.directory = Path(self.directory)
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ParameterError(f"need 0 <= rank < world_size, got rank={self.rank}, "
                                 f"world_size={self.world_size}")
        if self.keep < 1:
            raise ParameterError(f"keep must be at least 1, got {self.keep}")

    def save(self, step: int, state: dict[str, Any], meta: dict[str, Any] | None = None) -> Path:
        """Write this rank's ``state`` for ``step`` (rank 0 also the manifest with ``meta``,
        which must be JSON-able); then prunes to the newest ``keep`` complete ones. Returns the
        checkpoint's folder."""
        if step < 0:
            raise ParameterError(f"step must be >= 0, got {step}")
        try:
            meta = json.loads(json.dumps(meta or {}))
        except (TypeError, ValueError) as exc:
            raise ParameterError(f"checkpoint meta must be JSON-able: {exc}") from exc
        buffer = io.BytesIO()
        torch.save(state, buffer)
        data = buffer.getvalue()
        try:  # fail now, not at resume time, on state that weights_only loading refuses
            torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
        except Exception as exc:
            raise CheckpointError(f"state for step {step} does not load with weights_only=True: "
                                  f"{exc}\nStore tensors, numbers, strings, None, lists, dicts "
                                  "(capture_rng(), generator_state() convert RNGs).") from exc
        folder = self.directory / f"step-{step:09d}"
        if not folder.is_dir():
            folder.mkdir(parents=True, exist_ok=True)
            _fsync_dir(folder.parent)
        for stale in folder.glob(f".rank-{self.rank}.*{TMP_SUFFIX}"):  # a save killed earlier
            stale.unlink(missing_ok=True)
        hook = self.before_replace
        atomic_write(folder / f"rank-{self.rank}.pt", data,
                     None if hook is None else (lambda tmp: hook(step, tmp)))
        common = {"step": step, "world_size": self.world_size, "fingerprint": self.fingerprint,
                  "time": time.time()}
        sidecar = {**common, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
        atomic_write(folder / f"rank-{self.rank}.json", json.dumps(sidecar).encode())
        if self.rank == 0:
            atomic_write(folder / MANIFEST, json.dumps({**common, "meta": meta}).encode())
        # Every rank prunes after its own write: the last one to finish a step sees it complete
        # and removes what it outdates (rank 0 alone could look before a slower rank's file is
        # there, and the oldest checkpoint would outlive ``keep`` until the next save).
        self.prune()
        return folder

    def prune(self) -> list[Path]:
        """Delete complete checkpoints older than the newest ``keep`` complete ones, and any
        incomplete folder older than the newest complete one. Checkpoints of another world
        size or model are never touched. Returns the deleted folders."""
        complete, foreign, deleted = [], [], []  # steps, steps, folders
        for step, folder in reversed(self.steps()):
            try:
                fits = self._fits(self._check(folder, load=False)[0])
            except _Skip:
                continue
            (complete if fits else foreign).append(step)
        for trash in self.directory.glob(".trash-step-*"):  # a prune that was interrupted
            shutil.rmtree(trash, ignore_errors=True)
        if not complete:
            return deleted
        kept = set(complete[: self.keep])
        for step, folder in self.steps():
            if step < complete[0] and step not in kept and step not in foreign:
                trash = folder.with_name(f".trash-{folder.name}")
                try:
                    os.replace(folder, trash)  # gone from the listing at once, then removed
                except FileNotFoundError:  # another rank's prune took it first
                    continue
                shutil.rmtree(trash, ignore_errors=True)
                deleted.append(folder)
        return deleted

    def steps(self) -> list[tuple[int, Path]]:
        """(step, folder) of every checkpoint folder, complete or not, oldest first."""
        if not self.directory.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in self.directory.iterdir()
                 if (m := STEP_DIR.match(p.name)) and p.is_dir()]
        return sorted(found)

    def latest(self, map_location: str | torch.device = "cpu") -> Loaded | None:
        """The newest complete, verified checkpoint (this rank's state), or None.

        Every rank verifies every rank's file, so all ranks pick the same step whichever file
        is damaged. Raises :class:`IncompatibleCheckpointError` when that checkpoint has another
        world size or fingerprint: resuming from it would give silently wrong state."""
        skipped: list[tuple[str, str]] = []
        for step, folder in reversed(self.steps()):
            try:
                manifest, state = self._check(folder, load=True, map_location=map_location)
            except _Skip as skip:
                warnings.warn(f"skipping checkpoint {folder.name}: {skip.path}: {skip.reason}",
                              CheckpointWarning, stacklevel=2)
                skipped.append((str(skip.path), skip.reason))
                continue
            if not self._fits(manifest):
                raise IncompatibleCheckpointError(
                    f"checkpoint {folder} was saved with world_size={manifest['world_size']} "
                    f"and fingerprint={manifest.get('fingerprint')!r}; this run has world_size="
                    f"{self.world_size} and fingerprint={self.fingerprint!r}. Resume with the "
                    "same world size and model, or give this run another checkpoint folder.")
            return Loaded(step, folder, state, manifest.get("meta") or {}, skipped)
        return None

    def _check(self, folder: Path, *, load: bool,
               map_location: str | torch.device = "cpu") -> tuple[dict[str, Any], Any]:
        """(manifest, this rank's state or None) of a complete, intact ``folder``; else _Skip
        naming the bad file. ``load``: also torch.load every rank's file (weights_only)."""
        manifest = _read_json(folder / MANIFEST)
        step, world = manifest.get("step"), manifest.get("world_size")
        if not isinstance(world, int) or world < 1 or step != int(folder.name[5:]):
            raise _Skip(folder / MANIFEST, f"inconsistent manifest: step {step}, world {world}")
        sidecars = [_read_json(folder / f"rank-{r}.json") for r in range(world)]
        keys, mine = ("step", "world_size", "fingerprint"), None
        for r, sidecar in enumerate(sidecars):
            if (found := [sidecar.get(k) for k in keys]) != [manifest.get(k) for k in keys]:
                raise _Skip(folder / f"rank-{r}.json", f"sidecar {found} disagrees with manifest")
            path = folder / f"rank-{r}.pt"
            data = self._verified_bytes(path, sidecar, cache=not load)
            try:  # every rank loads every file: one only some ranks could load would split them
                state = torch.load(io.BytesIO(data), weights_only=True,
                                   map_location=map_location) if load else None
            except Exception as exc:
                first = (str(exc).splitlines() or [repr(exc)])[0]
                raise _Skip(path, f"torch.load(weights_only=True) refused it: {first}") from None
            mine = state if r == self.rank else mine
        return manifest, mine

    def _fits(self, manifest: dict[str, Any]) -> bool:
        return (manifest.get("world_size") == self.world_size
                and manifest.get("fingerprint") == self.fingerprint)

    def _verified_bytes(self, path: Path, sidecar: dict[str, Any], *, cache: bool) -> bytes:
        """The file's bytes when size and sha256 match its sidecar (cached by size and mtime
        for pruning, which needs no bytes); else _Skip naming what is wrong."""
        try:
            info = path.stat()
            key = (str(path), info.st_size, info.st_mtime_ns)
            if cache and self._hashes.get(key) == sidecar.get("sha256"):
                return b""
            if info.st_size != sidecar.get("bytes"):
                raise _Skip(path, f"truncated or wrong size: {info.st_size} bytes, sidecar says "
                                  f"{sidecar.get('bytes')}")
            data = path.read_bytes()
        except FileNotFoundError:
            raise _Skip(path, "missing (incomplete checkpoint)") from None
        except OSError as exc:
            raise _Skip(path, f"unreadable: {exc}") from None
        digest = hashlib.sha256(data).hexdigest()
        if digest != sidecar.get("sha256"):
            raise _Skip(path, "sha256 mismatch: the file changed after it was written")
        self._hashes[key] = digest
        return data
