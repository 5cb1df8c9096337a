"""The experience wire format: one self-describing, checksummed frame per experience.

The field guide's buffer sent ``tensor.numpy().tobytes()`` and lost dtype and shape. A frame
keeps both, and is safe to read from Redis, NATS or disk: ``decode`` validates every length,
code and the CRC before it allocates tensor memory, and raises only ``FrameError``. Only
ints, floats, names and raw tensor bytes are read: no Python objects are ever deserialised.

Layout, all little-endian::

    header   magic "LKXP" (4s), version u16, flags u16 (0), agent_id i64, seq i64,
             policy_version i64, timestamp f64, n_tensors u16
    tensor   name length u16, utf-8 name, dtype code u8, ndim u8, ndim x dim u64,
             byte length u64, raw bytes (C order, little-endian)      -- n_tensors times
    trailer  CRC32 (zlib.crc32) of every byte before it, u32
"""

from __future__ import annotations

import math
import struct
import sys
import time
import zlib
from dataclasses import dataclass

import numpy as np
import torch

from labkit.errors import LabkitError

MAGIC = b"LKXP"
VERSION = 1
MAX_FRAME_BYTES = 64 * 1024 * 1024
MAX_TENSORS = 64
MAX_NDIM = 8

# Wire codes are part of the format: never renumber, only append.
DTYPE_CODES: dict[torch.dtype, int] = {
    torch.float16: 1,
    torch.bfloat16: 2,
    torch.float32: 3,
    torch.float64: 4,
    torch.int8: 5,
    torch.int16: 6,
    torch.int32: 7,
    torch.int64: 8,
    torch.uint8: 9,
    torch.bool: 10,
}
_CODE_DTYPES = {code: dtype for dtype, code in DTYPE_CODES.items()}

_HEADER = struct.Struct("<4sHHqqqdH")
_U16 = struct.Struct("<H")
_DTYPE_NDIM = struct.Struct("<BB")
_CRC = struct.Struct("<I")
_SHAPES = [struct.Struct(f"<{n}QQ") for n in range(MAX_NDIM + 1)]  # dims, then byte length
_MIN_FRAME = _HEADER.size + _CRC.size
# Bound on a shape's extent (zero dims counted as 1) times itemsize, so even a zero-size
# tensor's strides fit torch's int64 arithmetic.
_MAX_EXTENT = 2**62
_BIG_ENDIAN_HOST = sys.byteorder == "big"


class FrameError(LabkitError):
    """A frame could not be encoded or decoded: malformed, truncated, corrupt or unsupported."""


@dataclass(frozen=True, eq=False)
class Experience:
    """One experience as it travels between an agent and a learner.

    ``eq=False``: tensors have no single truth value, so equality is identity; compare
    fields and tensors explicitly."""

    agent_id: int  # which agent produced it (not the torch rank)
    seq: int  # per-agent sequence number: (agent_id, seq) is unique
    policy_version: int  # version of the policy that produced it
    timestamp: float  # time.time() when produced
    tensors: dict[str, torch.Tensor]  # named tensors: obs, action, reward, ...


def _tensor_bytes(name: str, tensor: torch.Tensor) -> tuple[int, tuple[int, ...], memoryview]:
    """The dtype code, shape and raw little-endian C-order bytes of one tensor."""
    if not isinstance(tensor, torch.Tensor):
        raise FrameError(f"tensor {name!r} is a {type(tensor).__name__}, not a torch.Tensor")
    if tensor.layout != torch.strided:
        raise FrameError(f"tensor {name!r} has layout {tensor.layout}; only dense tensors frame")
    code = DTYPE_CODES.get(tensor.dtype)
    if code is None:
        supported = ", ".join(str(d).removeprefix("torch.") for d in DTYPE_CODES)
        raise FrameError(f"tensor {name!r} has dtype {tensor.dtype}; supported: {supported}")
    if tensor.dim() > MAX_NDIM:
        raise FrameError(f"tensor {name!r} has {tensor.dim()} dims; at most {MAX_NDIM}")
    flat = tensor if tensor.dim() == 1 else tensor.reshape(-1)
    if flat.requires_grad:
        flat = flat.detach()
    if flat.device.type != "cpu":
        flat = flat.cpu()
    if not flat.is_contiguous():
        flat = flat.contiguous()
    if flat.dtype is torch.bfloat16:  # numpy has no bfloat16: same bits as int16
        flat = flat.view(torch.int16)
    array = flat.numpy()
    if _BIG_ENDIAN_HOST and array.itemsize > 1:
        array = array.byteswap()
    return code, tuple(tensor.shape), memoryview(array)


def encode(exp: Experience) -> bytes:
    """One experience as a frame (see the module docstring for the layout)."""
    if len(exp.tensors) > MAX_TENSORS:
        raise FrameError(f"{len(exp.tensors)} tensors in one experience; at most {MAX_TENSORS}")
    try:
        header = _HEADER.pack(
            MAGIC, VERSION, 0, exp.agent_id, exp.seq, exp.policy_version,
            exp.timestamp, len(exp.tensors),
        )
    except struct.error as exc:
        raise FrameError(f"experience header does not fit the frame (int64 ids, float time): "
                         f"{exc}") from exc
    parts: list[bytes | memoryview] = [header]
    for name, tensor in exp.tensors.items():
        if not isinstance(name, str):
            raise FrameError(f"tensor names must be str, got {type(name).__name__}")
        try:
            raw_name = name.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise FrameError(f"tensor name {name!r} is not encodable as utf-8") from exc
        if len(raw_name) > 0xFFFF:
            raise FrameError(f"tensor name of {len(raw_name)} utf-8 bytes; at most 65535")
        code, shape, raw = _tensor_bytes(name, tensor)
        parts += [
            _U16.pack(len(raw_name)), raw_name, _DTYPE_NDIM.pack(code, len(shape)),
            _SHAPES[len(shape)].pack(*shape, raw.nbytes), raw,
        ]
    crc = 0
    for part in parts:
        crc = zlib.crc32(part, crc)
    parts.append(_CRC.pack(crc))
    return b"".join(parts)


def _as_bytes_view(data: bytes | bytearray | memoryview) -> memoryview:
    """A flat byte view of ``data``, or FrameError for anything that is not bytes-like."""
    try:
        view = memoryview(data)
        return view if view.format == "B" and view.ndim == 1 else view.cast("B")
    except (TypeError, ValueError) as exc:
        raise FrameError(f"a frame is bytes-like, got {type(data).__name__}: {exc}") from exc


def decode(data: bytes | bytearray | memoryview, *, max_bytes: int = MAX_FRAME_BYTES) -> Experience:
    """The experience in one frame; FrameError, and nothing else, if it is not a valid frame.

    Everything is checked before tensor memory is allocated; the tensors returned are CPU
    copies that share nothing with ``data``."""
    view = _as_bytes_view(data)
    total = view.nbytes
    if total > max_bytes:
        raise FrameError(f"frame of {total} bytes exceeds max_bytes={max_bytes}")
    if total < _MIN_FRAME:
        raise FrameError(f"frame of {total} bytes is shorter than the {_MIN_FRAME}-byte minimum")
    magic, version, flags, agent_id, seq, policy_version, timestamp, n_tensors = (
        _HEADER.unpack_from(view, 0)
    )
    if magic != MAGIC:
        raise FrameError(f"not an experience frame: magic {magic!r}, expected {MAGIC!r}")
    if version != VERSION:
        hint = " (a chunk of experiences: labkit.buffers.chunk.decode_chunk)" if version == 2 else ""
        raise FrameError(f"frame version {version}; decode reads version {VERSION}{hint}")
    if flags != 0:
        raise FrameError(f"frame flags {flags:#06x}; version {VERSION} defines none")
    if n_tensors > MAX_TENSORS:
        raise FrameError(f"frame claims {n_tensors} tensors; at most {MAX_TENSORS}")

    end = total - _CRC.size  # tensor records must end exactly here
    pos = _HEADER.size
    layout: list[tuple[str, torch.dtype, tuple[int, ...], int, int]] = []
    names: set[str] = set()
    for index in range(n_tensors):
        name, dtype, shape, nbytes, pos = read_tensor_record(view, pos, end, index, names)
        itemsize = dtype.itemsize
        needed = math.prod(shape) * itemsize  # Python ints: no overflow
        if needed != nbytes:
            raise FrameError(f"{_where(index, name)}: shape {tuple(shape)} of {dtype} needs "
                             f"{needed} bytes, frame says {nbytes}")
        if not needed and math.prod(max(dim, 1) for dim in shape) * itemsize > _MAX_EXTENT:
            raise FrameError(f"{_where(index, name)} has an impossible shape {tuple(shape)}")
        if nbytes > end - pos:
            raise FrameError(f"frame truncated in {_where(index, name)}'s data ({nbytes} bytes "
                             f"claimed, {end - pos} left)")
        check_bool(view, pos, nbytes, dtype, _where(index, name))
        layout.append((name, dtype, tuple(shape), pos, nbytes))
        pos += nbytes
    if pos != end:
        raise FrameError(f"{end - pos} unexpected bytes after the last tensor")
    check_crc(view, end)

    tensors: dict[str, torch.Tensor] = {}
    for name, dtype, shape, offset, nbytes in layout:
        tensors[name] = _tensor_from(view[offset:offset + nbytes], dtype, shape)
    return Experience(agent_id, seq, policy_version, timestamp, tensors)


def read_tensor_record(view: memoryview, pos: int, end: int, index: int, names: set[str]
                       ) -> tuple[str, torch.dtype, tuple[int, ...], int, int]:
    """The header of tensor record ``index`` at ``pos`` (name, dtype, shape, byte length), each
    field checked against ``end`` and the names seen (``names`` gets this one); and the offset of
    its data. Shared by frame versions 1 and 2."""
    if pos + _U16.size > end:
        raise FrameError(f"frame truncated in tensor {index}'s name length")
    (name_len,) = _U16.unpack_from(view, pos)
    pos += _U16.size
    if pos + name_len + _DTYPE_NDIM.size > end:
        raise FrameError(f"frame truncated in tensor {index}'s name or dtype")
    try:
        name = str(view[pos:pos + name_len], "utf-8")
    except UnicodeDecodeError as exc:
        raise FrameError(f"tensor {index}'s name is not valid utf-8: {exc}") from exc
    pos += name_len
    if name in names:
        raise FrameError(f"{_where(index, name)} appears twice in the frame")
    names.add(name)
    code, ndim = _DTYPE_NDIM.unpack_from(view, pos)
    pos += _DTYPE_NDIM.size
    dtype = _CODE_DTYPES.get(code)
    if dtype is None:
        raise FrameError(f"{_where(index, name)} has unknown dtype code {code}")
    if ndim > MAX_NDIM:
        raise FrameError(f"{_where(index, name)} has {ndim} dims; at most {MAX_NDIM}")
    record = _SHAPES[ndim]
    if pos + record.size > end:
        raise FrameError(f"frame truncated in {_where(index, name)}'s shape")
    *shape, nbytes = record.unpack_from(view, pos)
    pos += record.size
    return name, dtype, tuple(shape), nbytes, pos


def check_bool(view: memoryview, pos: int, nbytes: int, dtype: torch.dtype, where: str) -> None:
    """A bool tensor's bytes are all 0 or 1 (torch would read any other byte as an invalid bool)."""
    if dtype is torch.bool and nbytes and np.frombuffer(view, np.uint8, nbytes, pos).max() > 1:
        raise FrameError(f"{where} is bool but holds bytes other than 0 and 1")


def check_crc(view: memoryview, end: int) -> None:
    """The CRC32 trailer at ``end`` matches every byte before it (frame versions 1 and 2)."""
    (expected,) = _CRC.unpack_from(view, end)
    actual = zlib.crc32(view[:end])
    if actual != expected:
        raise FrameError(f"frame CRC mismatch ({actual:#010x} != {expected:#010x}): corrupt")


def _where(index: int, name: str) -> str:
    """How error messages name a tensor (built only when there is an error)."""
    return f"tensor {index} ({name!r})"


def _tensor_from(raw: memoryview, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    """An independent CPU tensor copied from validated raw little-endian bytes."""
    if not raw.nbytes:
        return torch.empty(shape, dtype=dtype)
    buf = bytearray(raw)
    if _BIG_ENDIAN_HOST and dtype.itemsize > 1:
        np.frombuffer(buf, dtype=f"u{dtype.itemsize}").byteswap(inplace=True)
    flat = torch.frombuffer(buf, dtype=dtype)
    return flat if len(shape) == 1 else flat.view(shape)


def make_experience(agent_id: int, seq: int, payload_bytes: int,
                    policy_version: int = 0) -> Experience:
    """A synthetic experience of about ``payload_bytes`` tensor bytes, for benchmarks and tests.

    A float32 ``obs`` vector plus a 0-d float32 ``reward``; tensor bytes total
    ``payload_bytes`` rounded down to a multiple of 4 (at least 4, the reward)."""
    if payload_bytes < 0:
        raise FrameError(f"payload_bytes must be >= 0, got {payload_bytes}")
    n_obs = max(payload_bytes - 4, 0) // 4
    obs = torch.arange(n_obs, dtype=torch.float32).add_(float(seq % 1024))
    reward = torch.tensor(float(agent_id % 1024) / 1024.0, dtype=torch.float32)
    return Experience(agent_id, seq, policy_version, time.time(), {"obs": obs, "reward": reward})


@dataclass
class FrameStats:
    """Counts for readers that must skip garbage frames and keep going."""

    decoded: int = 0
    malformed: int = 0
    last_error: str | None = None

    def decode(self, data: bytes | bytearray | memoryview, *,
               max_bytes: int = MAX_FRAME_BYTES) -> Experience | None:
        """The frame's experience, or None (counted, error kept) when it is malformed."""
        try:
            exp = decode(data, max_bytes=max_bytes)
        except FrameError as exc:
            self.malformed += 1
            self.last_error = str(exc)
            return None
        self.decoded += 1
        return exp
