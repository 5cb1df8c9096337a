"""Chunks of experiences: one frame (format version 2) carries N experiences as stacked tensors.

A version 1 frame (``labkit.buffers.frame``) carries one experience: one encode, CRC, Redis value
and decode per item. A chunk keeps every experience's agent id, seq, policy version and timestamp
(as columns) and stacks the tensors (leading dimension N), so de-duplication, at-least-once
delivery, staleness and reclaim still work per experience; the rest is paid per chunk.

Layout, all little-endian; every array starts at a multiple of 8 bytes in the frame (Python's
``bytes`` data is 8-aligned), so decoding can hand out numpy/torch views without copying::

    header   magic "LKXP" (4s), version u16 (2), flags u16 (0), n u32 (experiences, >= 1),
             n_tensors u16, reserved u16 (0)                                       -- 16 bytes
    columns  agent_id i64 x n, seq i64 x n, policy_version i64 x n, timestamp f64 x n
    tensor   name length u16, utf-8 name, dtype code u8, ndim u8 (of one experience),
             ndim x dim u64, byte length u64 (all n experiences), zero bytes up to the next
             multiple of 8, raw bytes (C order, little-endian)                -- n_tensors times
    trailer  CRC32 (zlib.crc32) of every byte before it, u32

``decode_chunk`` reads versions 1 and 2 (a version 1 frame is a chunk of one), validates every
length, code, padding byte and the CRC before it makes any tensor, and raises only
``FrameError``. No Python object is ever deserialised.

Copies: ``decode_chunk(data, copy=True)`` copies the frame once (one copy per chunk, not per
item) and returns writable tensors that share nothing with ``data``. ``copy=False`` over an
immutable ``bytes`` (a Redis reply) returns views of it, no copy at all: the numpy columns are
flagged read-only; the torch tensors cannot be (torch has no read-only tensors), so they are
read-only by contract: writing into one would write into the reply's ``bytes``. The tensor
keeps ``data`` alive. Anything that is not ``bytes`` (a bytearray, a memoryview) is copied.
"""

from __future__ import annotations

import math
import struct
import warnings
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from labkit.buffers.frame import (
    _BIG_ENDIAN_HOST,
    _CRC,
    _DTYPE_NDIM,
    _MAX_EXTENT,
    _SHAPES,
    _U16,
    MAGIC,
    MAX_FRAME_BYTES,
    MAX_NDIM,
    MAX_TENSORS,
    Experience,
    FrameError,
    FrameStats,
    _as_bytes_view,
    _tensor_bytes,
    _where,
    check_bool,
    check_crc,
    decode,
    read_tensor_record,
)

CHUNK_VERSION = 2
MAX_CHUNK = 1 << 20  # experiences in one chunk
_HEADER = struct.Struct("<4sHHIHH")
_PEEK = struct.Struct("<4sH")
_MIN_FRAME = _HEADER.size + _CRC.size
_COLUMNS = ("agent_ids", "seqs", "policy_versions", "timestamps")
_NOT_WRITABLE = "The given buffer is not writable"


def _column(values: object, dtype: type, name: str, n: int | None = None) -> np.ndarray:
    array = values.numpy() if isinstance(values, torch.Tensor) else np.asarray(values)
    if array.ndim != 1 or (n is not None and len(array) != n):
        raise FrameError(f"chunk column {name} must be 1-d of length {n}, got {array.shape}")
    if array.dtype != dtype:
        if dtype is np.int64 and array.dtype.kind not in "iu":
            raise FrameError(f"chunk column {name} must hold integers, got {array.dtype}")
        array = array.astype(dtype)
    return array


@dataclass(frozen=True, eq=False)
class ExperienceChunk:
    """``n`` experiences of one layout: per-experience columns and stacked tensors.

    ``agent_ids``, ``seqs``, ``policy_versions`` (int64) and ``timestamps`` (float64) are numpy
    arrays of length n; every tensor in ``tensors`` has leading dimension n. ``eq=False``: the
    arrays have no single truth value, so equality is identity."""

    agent_ids: np.ndarray
    seqs: np.ndarray
    policy_versions: np.ndarray
    timestamps: np.ndarray
    tensors: dict[str, torch.Tensor]

    def __post_init__(self) -> None:
        n = len(_column(self.seqs, np.int64, "seqs"))
        for name in _COLUMNS:
            dtype = np.float64 if name == "timestamps" else np.int64
            object.__setattr__(self, name, _column(getattr(self, name), dtype, name, n))
        if n < 1:
            raise FrameError("a chunk holds at least one experience")
        for name, tensor in self.tensors.items():
            if not isinstance(tensor, torch.Tensor) or tensor.dim() < 1 or tensor.shape[0] != n:
                shape = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor)
                raise FrameError(f"chunk tensor {name!r} needs leading dim {n}, got {shape}")

    @classmethod
    def _validated(cls, agent_ids: np.ndarray, seqs: np.ndarray, policy_versions: np.ndarray,
                   timestamps: np.ndarray, tensors: dict[str, torch.Tensor]) -> ExperienceChunk:
        """A chunk from fields ``decode_chunk`` already checked: skips ``__post_init__``."""
        chunk = object.__new__(cls)
        for name, value in zip((*_COLUMNS, "tensors"),
                               (agent_ids, seqs, policy_versions, timestamps, tensors),
                               strict=True):
            object.__setattr__(chunk, name, value)
        return chunk

    def __len__(self) -> int:
        return len(self.seqs)

    @classmethod
    def from_experiences(cls, experiences: Sequence[Experience]) -> ExperienceChunk:
        """Stacks experiences of one layout (same tensor names, dtypes and shapes, in order)."""
        if not experiences:
            raise FrameError("a chunk holds at least one experience")
        first = experiences[0]
        layout = [(name, t.dtype, t.shape) for name, t in first.tensors.items()]
        for exp in experiences[1:]:
            if [(name, t.dtype, t.shape) for name, t in exp.tensors.items()] != layout:
                raise FrameError(f"experience ({exp.agent_id}, {exp.seq}) has another layout "
                                 f"than ({first.agent_id}, {first.seq}): chunks stack one layout")
        try:
            return cls(
                np.fromiter((e.agent_id for e in experiences), np.int64, len(experiences)),
                np.fromiter((e.seq for e in experiences), np.int64, len(experiences)),
                np.fromiter((e.policy_version for e in experiences), np.int64, len(experiences)),
                np.fromiter((e.timestamp for e in experiences), np.float64, len(experiences)),
                {name: torch.stack([e.tensors[name] for e in experiences])
                 for name, _, _ in layout})  # fmt: skip
        except OverflowError as exc:
            raise FrameError(f"experience ids do not fit int64: {exc}") from exc

    def experiences(self) -> list[Experience]:
        """One ``Experience`` per row; its tensors are views of the chunk's (no copy)."""
        rows = {name: tensor.unbind(0) for name, tensor in self.tensors.items()}
        names = list(rows)
        columns = zip(self.agent_ids.tolist(), self.seqs.tolist(),
                      self.policy_versions.tolist(), self.timestamps.tolist(), strict=True)
        return [Experience(a, s, p, t, {name: rows[name][i] for name in names})
                for i, (a, s, p, t) in enumerate(columns)]

    def take(self, index: slice | np.ndarray) -> ExperienceChunk:
        """The rows at ``index`` (a slice gives views; a bool mask or index array copies)."""
        if isinstance(index, np.ndarray):
            rows = torch.from_numpy(np.flatnonzero(index) if index.dtype == bool else index)
            tensors = {name: t.index_select(0, rows) for name, t in self.tensors.items()}
        else:
            tensors = {name: t[index] for name, t in self.tensors.items()}
        return ExperienceChunk(self.agent_ids[index], self.seqs[index],
                               self.policy_versions[index], self.timestamps[index], tensors)

    @property
    def nbytes(self) -> int:
        """Tensor bytes in the chunk (what an experience carries, without its ids)."""
        return sum(t.numel() * t.element_size() for t in self.tensors.values())


def _pad(pos: int) -> int:
    return -pos % 8


def encode_chunk(chunk: ExperienceChunk) -> bytes:
    """A chunk as one version 2 frame (see the module docstring for the layout)."""
    n = len(chunk)
    if n > MAX_CHUNK:
        raise FrameError(f"chunk of {n} experiences; at most {MAX_CHUNK}")
    if len(chunk.tensors) > MAX_TENSORS:
        raise FrameError(f"{len(chunk.tensors)} tensors in one chunk; at most {MAX_TENSORS}")
    parts: list[bytes | memoryview] = [
        _HEADER.pack(MAGIC, CHUNK_VERSION, 0, n, len(chunk.tensors), 0)]
    for name in _COLUMNS:
        column = np.ascontiguousarray(getattr(chunk, name))
        parts.append(memoryview(column.byteswap() if _BIG_ENDIAN_HOST else column).cast("B"))
    pos = _HEADER.size + 32 * n
    for name, tensor in chunk.tensors.items():
        if not isinstance(name, str):
            raise FrameError(f"tensor names must be str, got {type(name).__name__}")
        try:
            raw_name = name.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise FrameError(f"tensor name {name!r} is not encodable as utf-8") from exc
        if len(raw_name) > 0xFFFF:
            raise FrameError(f"tensor name of {len(raw_name)} utf-8 bytes; at most 65535")
        if tensor.layout != torch.strided or tensor.dim() - 1 > MAX_NDIM:
            raise FrameError(f"tensor {name!r}: {tensor.layout}, {tensor.dim() - 1} dims per "
                             f"experience; chunks carry dense tensors of at most {MAX_NDIM}")
        code, _, raw = _tensor_bytes(name, tensor.reshape(-1))
        shape = tuple(tensor.shape[1:])
        record = _U16.pack(len(raw_name)) + raw_name + _DTYPE_NDIM.pack(code, len(shape)) + (
            _SHAPES[len(shape)].pack(*shape, raw.nbytes))
        pos += len(record)
        parts += [record, bytes(_pad(pos)), raw]
        pos += _pad(pos) + raw.nbytes
    if pos + _CRC.size > MAX_FRAME_BYTES:
        raise FrameError(f"chunk frame of {pos + _CRC.size} bytes; at most {MAX_FRAME_BYTES}")
    crc = 0
    for part in parts:
        crc = zlib.crc32(part, crc)
    parts.append(_CRC.pack(crc))
    return b"".join(parts)


def frame_version(data: bytes | bytearray | memoryview) -> int:
    """The format version a frame says it is; FrameError when it is no frame at all."""
    view = _as_bytes_view(data)
    if view.nbytes < _PEEK.size:
        raise FrameError(f"frame of {view.nbytes} bytes is too short to hold a header")
    magic, version = _PEEK.unpack_from(view, 0)
    if magic != MAGIC:
        raise FrameError(f"not an experience frame: magic {magic!r}, expected {MAGIC!r}")
    return version


def decode_chunk(data: bytes | bytearray | memoryview, *, copy: bool = True,
                 max_bytes: int = MAX_FRAME_BYTES) -> ExperienceChunk:
    """The experiences of a version 2 frame, or of a version 1 frame as a chunk of one;
    FrameError, and nothing else, if ``data`` is not a valid frame. ``copy``: see the module
    docstring (one copy of the frame, or views of an immutable ``bytes``)."""
    version = frame_version(data)
    if version == 1:
        return ExperienceChunk.from_experiences([decode(data, max_bytes=max_bytes)])
    if version != CHUNK_VERSION:
        raise FrameError(f"frame version {version}; this labkit reads versions 1 and 2")
    view = _as_bytes_view(data)
    layout, n, end = _validate(view, max_bytes)
    if copy or not isinstance(data, bytes) or _BIG_ENDIAN_HOST:
        source: bytes | bytearray = bytearray(view[:end])
    else:
        source = data
    columns = []
    for k, name in enumerate(_COLUMNS):
        dtype = np.float64 if name == "timestamps" else np.int64
        column = np.frombuffer(source, dtype, n, _HEADER.size + 8 * n * k)
        columns.append(column.byteswap() if _BIG_ENDIAN_HOST else column)
    if isinstance(source, bytes):
        _quiet_frombuffer()
    tensors = {name: _tensor_from(source, dtype, (n, *shape), offset, nbytes)
               for name, dtype, shape, offset, nbytes in layout}
    return ExperienceChunk._validated(*columns, tensors)


def _validate(view: memoryview, max_bytes: int) -> tuple[list, int, int]:
    """Checks a version 2 frame end to end: (tensor layout, n, where the CRC starts)."""
    total = view.nbytes
    if total > max_bytes:
        raise FrameError(f"frame of {total} bytes exceeds max_bytes={max_bytes}")
    if total < _MIN_FRAME:
        raise FrameError(f"chunk frame of {total} bytes is shorter than the {_MIN_FRAME}-byte "
                         "minimum")
    _, _, flags, n, n_tensors, reserved = _HEADER.unpack_from(view, 0)
    if flags != 0 or reserved != 0:
        raise FrameError(f"chunk frame flags {flags:#06x}, reserved {reserved:#06x}; "
                         f"version {CHUNK_VERSION} defines none")
    if not 1 <= n <= MAX_CHUNK:
        raise FrameError(f"chunk frame claims {n} experiences; 1 to {MAX_CHUNK}")
    if n_tensors > MAX_TENSORS:
        raise FrameError(f"chunk frame claims {n_tensors} tensors; at most {MAX_TENSORS}")
    end = total - _CRC.size
    pos = _HEADER.size + 32 * n
    if pos > end:
        raise FrameError(f"chunk frame truncated in its columns ({n} experiences need "
                         f"{32 * n} bytes, {end - _HEADER.size} left)")
    layout: list[tuple[str, torch.dtype, tuple[int, ...], int, int]] = []
    names: set[str] = set()
    for index in range(n_tensors):
        name, dtype, shape, nbytes, pos = read_tensor_record(view, pos, end, index, names)
        needed = n * math.prod(shape) * dtype.itemsize  # Python ints: no overflow
        if needed != nbytes:
            raise FrameError(f"{_where(index, name)}: {n} x {tuple(shape)} of {dtype} needs "
                             f"{needed} bytes, frame says {nbytes}")
        if not needed and n * math.prod(max(d, 1) for d in shape) * dtype.itemsize > _MAX_EXTENT:
            raise FrameError(f"{_where(index, name)} has an impossible shape {tuple(shape)}")
        pad = _pad(pos)
        if pad + nbytes > end - pos:
            raise FrameError(f"frame truncated in {_where(index, name)}'s data ({pad + nbytes} "
                             f"bytes claimed, {end - pos} left)")
        if any(view[pos:pos + pad]):
            raise FrameError(f"{_where(index, name)}: padding bytes are not zero")
        pos += pad
        check_bool(view, pos, nbytes, dtype, _where(index, name))
        layout.append((name, dtype, tuple(shape), pos, nbytes))
        pos += nbytes
    if pos != end:
        raise FrameError(f"{end - pos} unexpected bytes after the last tensor")
    check_crc(view, end)
    return layout, n, end


_quiet = False


def _quiet_frombuffer() -> None:
    """``torch.frombuffer`` over ``bytes`` warns that the buffer is not writable, once per
    process (a C++ warn-once). These views are read-only by contract (module docstring), so the
    one warning is taken here, silenced, the first time a view is made."""
    global _quiet
    if not _quiet:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_NOT_WRITABLE)
            torch.frombuffer(b"\0" * 8, dtype=torch.uint8)
        _quiet = True


def _tensor_from(source: bytes | bytearray, dtype: torch.dtype, shape: tuple[int, ...],
                 offset: int, nbytes: int) -> torch.Tensor:
    if not nbytes:
        return torch.empty(shape, dtype=dtype)
    if _BIG_ENDIAN_HOST and dtype.itemsize > 1:  # source is a private copy here
        np.frombuffer(source, f"u{dtype.itemsize}", nbytes // dtype.itemsize,
                      offset).byteswap(inplace=True)
    flat = torch.frombuffer(source, dtype=dtype, count=nbytes // dtype.itemsize, offset=offset)
    return flat if len(shape) == 1 else flat.view(shape)


def read_entry(stats: FrameStats, data: object, *,
               copy: bool = True) -> Experience | ExperienceChunk | None:
    """A buffer entry as it came: an ``Experience`` (version 1), an ``ExperienceChunk``
    (version 2), or None when it is malformed (counted in ``stats``, error kept)."""
    try:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise FrameError(f"an entry is bytes, got {type(data).__name__}")
        if frame_version(data) == 1:
            item: Experience | ExperienceChunk = decode(data)
        else:
            item = decode_chunk(data, copy=copy)
    except FrameError as exc:
        stats.malformed += 1
        stats.last_error = str(exc)
        return None
    stats.decoded += 1
    return item


def as_chunks(items: Iterable[Experience | ExperienceChunk]) -> list[ExperienceChunk]:
    """Chunks pass through; runs of consecutive experiences of one layout are stacked."""
    out: list[ExperienceChunk] = []
    run: list[Experience] = []

    def flush() -> None:
        if run:
            out.append(ExperienceChunk.from_experiences(run))
            run.clear()

    for item in items:
        if isinstance(item, ExperienceChunk):
            flush()
            out.append(item)
            continue
        if run and [(k, t.dtype, t.shape) for k, t in item.tensors.items()] != [
                (k, t.dtype, t.shape) for k, t in run[0].tensors.items()]:
            flush()
        run.append(item)
    flush()
    return out


__all__ = ["CHUNK_VERSION", "MAX_CHUNK", "ExperienceChunk", "as_chunks",
           "decode_chunk", "encode_chunk", "frame_version", "read_entry"]
