"""The experience wire format: exact round trips, and FrameError for every malformed input."""

from __future__ import annotations

import math
import struct
import zlib
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import labkit.buffers.frame as frame
from labkit.buffers.frame import (
    DTYPE_CODES,
    MAGIC,
    MAX_FRAME_BYTES,
    VERSION,
    Experience,
    FrameError,
    FrameStats,
    decode,
    encode,
    make_experience,
)
from labkit.errors import LabkitError

I64 = st.integers(-(2**63), 2**63 - 1)
HEADER = struct.Struct("<4sHHqqqdH")
FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _bits(t: torch.Tensor) -> bytes:
    """A tensor's raw bytes: compares NaNs (and -0.0) by bit pattern."""
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def assert_same(a: Experience, b: Experience) -> None:
    assert (a.agent_id, a.seq, a.policy_version) == (b.agent_id, b.seq, b.policy_version)
    assert struct.pack("<d", a.timestamp) == struct.pack("<d", b.timestamp)
    assert list(a.tensors) == list(b.tensors)
    for name, x in a.tensors.items():
        y = b.tensors[name]
        assert (y.dtype, y.shape, y.device.type) == (x.dtype, x.shape, "cpu")
        assert _bits(x) == _bits(y)
        if not x.is_floating_point():
            assert torch.equal(x, y)


def reseal(body: bytes) -> bytes:
    """``body`` (a frame without its CRC) with a correct CRC: reaches the structural checks."""
    return body + struct.pack("<I", zlib.crc32(body))


def raw_frame(tensors: list[tuple[bytes, int, tuple[int, ...], int, bytes]], *, magic=MAGIC,
              version=VERSION, flags=0, n_tensors: int | None = None) -> bytes:
    """A frame built by hand, independent of ``encode``: (name, code, shape, nbytes, data)."""
    n = len(tensors) if n_tensors is None else n_tensors
    parts = [HEADER.pack(magic, version, flags, 1, 2, 3, 4.5, n)]
    for name, code, shape, nbytes, data in tensors:
        parts += [struct.pack("<H", len(name)), name, struct.pack("<BB", code, len(shape)),
                  struct.pack(f"<{len(shape)}Q", *shape), struct.pack("<Q", nbytes), data]
    return reseal(b"".join(parts))


F32 = DTYPE_CODES[torch.float32]


@st.composite
def tensors(draw: st.DrawFn) -> torch.Tensor:
    """Any supported dtype, 0 to 4 dims (zero-size included), every bit pattern (NaNs too)."""
    dtype = draw(st.sampled_from(list(DTYPE_CODES)))
    shape = draw(st.lists(st.integers(0, 4), max_size=4))
    numel = math.prod(shape)
    if dtype is torch.bool:
        return torch.tensor(draw(st.lists(st.booleans(), min_size=numel, max_size=numel)),
                            dtype=torch.bool).reshape(shape)
    raw = draw(st.binary(min_size=numel * dtype.itemsize, max_size=numel * dtype.itemsize))
    if not raw:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(raw), dtype=dtype).reshape(shape)


experiences = st.builds(
    Experience, agent_id=I64, seq=I64, policy_version=I64,
    timestamp=st.floats(allow_nan=True, allow_infinity=True),
    tensors=st.dictionaries(st.text(max_size=12), tensors(), max_size=5),
)


@FAST
@given(experiences)
def test_round_trip_is_exact(exp: Experience) -> None:
    assert_same(exp, decode(encode(exp)))


def test_round_trip_special_tensors() -> None:
    base = torch.arange(24, dtype=torch.float64).reshape(4, 6)
    exp = Experience(0, 0, 0, 0.0, {
        "scalar": torch.tensor(7, dtype=torch.int64),
        "empty": torch.empty(3, 0, 2, dtype=torch.bfloat16),
        "transposed": base.t(),  # non-contiguous
        "strided": base[::2, 1::3],
        "grad": torch.ones(3, requires_grad=True),
        "bf16": torch.tensor([1.5, -0.0, float("nan"), float("inf")], dtype=torch.bfloat16),
        "émoji 🚀": torch.tensor([True, False]),
    })
    got = decode(encode(exp))
    assert_same(exp, got)
    assert got.tensors["transposed"].is_contiguous()
    assert not got.tensors["grad"].requires_grad


def test_decoded_tensors_are_independent_copies() -> None:
    data = bytearray(encode(make_experience(1, 2, 64)))
    got = decode(memoryview(data))
    before = got.tensors["obs"].clone()
    data[HEADER.size + 10: -4] = bytes(len(data) - HEADER.size - 14)
    assert torch.equal(got.tensors["obs"], before)
    got.tensors["obs"].add_(1)  # writable, and writes touch nothing else
    assert decode(encode(got)).tensors["obs"].equal(before + 1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_encode_accepts_cuda_tensors() -> None:
    exp = Experience(1, 1, 1, 1.0, {"x": torch.arange(5, device="cuda")})
    assert decode(encode(exp)).tensors["x"].equal(torch.arange(5))


def test_encode_rejects_what_the_format_cannot_carry() -> None:
    for tensors_ in ({"c": torch.zeros(2, dtype=torch.complex64)},
                     {"u": torch.zeros(2, dtype=torch.uint16)},
                     {"deep": torch.zeros([1] * 9)},
                     {"sparse": torch.eye(2).to_sparse()},
                     {"list": [1.0, 2.0]},
                     {1: torch.zeros(1)},
                     {"\ud800": torch.zeros(1)},
                     {"x" * 70000: torch.zeros(1)},
                     {f"t{i}": torch.zeros(1) for i in range(65)}):
        with pytest.raises(FrameError):
            encode(Experience(0, 0, 0, 0.0, tensors_))  # type: ignore[arg-type]
    with pytest.raises(FrameError, match="int64"):
        encode(Experience(2**63, 0, 0, 0.0, {}))


# --- malformed input: FrameError and nothing else ---------------------------------------------

SMALL = encode(Experience(3, 4, 5, 6.0, {
    "obs": torch.arange(3, dtype=torch.float32), "done": torch.tensor(True),
}))


def test_frame_error_is_a_labkit_error() -> None:
    assert issubclass(FrameError, LabkitError)


@pytest.mark.parametrize("data", [b"", bytearray(), memoryview(b"LKXP")])
def test_empty_and_tiny(data) -> None:
    with pytest.raises(FrameError, match="shorter"):
        decode(data)


@pytest.mark.parametrize("data", ["a string", None, 12, [1, 2]])
def test_not_bytes(data) -> None:
    with pytest.raises(FrameError):
        decode(data)  # type: ignore[arg-type]


def test_every_truncation_raises() -> None:
    for n in range(len(SMALL)):
        with pytest.raises(FrameError):
            decode(SMALL[:n])


def test_every_truncation_with_a_valid_crc_raises() -> None:
    body = SMALL[:-4]
    for n in range(HEADER.size, len(body)):
        with pytest.raises(FrameError):
            decode(reseal(body[:n]))


def test_every_single_byte_flip_raises() -> None:
    for i in range(len(SMALL)):
        for flip in (0x01, 0x80, 0xFF):
            bad = bytearray(SMALL)
            bad[i] ^= flip
            with pytest.raises(FrameError):
                decode(bytes(bad))


def test_bad_crc() -> None:
    with pytest.raises(FrameError, match="CRC"):
        decode(SMALL[:-4] + struct.pack("<I", zlib.crc32(SMALL[:-4]) ^ 1))


def test_trailing_bytes() -> None:
    with pytest.raises(FrameError, match="unexpected bytes"):
        decode(reseal(SMALL[:-4] + b"\0"))
    with pytest.raises(FrameError):
        decode(SMALL + b"\0")


def test_wrong_magic_version_flags() -> None:
    t = [(b"x", F32, (1,), 4, bytes(4))]
    with pytest.raises(FrameError, match="magic"):
        decode(raw_frame(t, magic=b"PKL\x80"))
    with pytest.raises(FrameError, match="version"):
        decode(raw_frame(t, version=2))
    with pytest.raises(FrameError, match="flags"):
        decode(raw_frame(t, flags=1))
    assert decode(raw_frame(t)).tensors["x"].equal(torch.zeros(1))  # the builder is right


def test_structural_errors() -> None:
    u8, b8 = DTYPE_CODES[torch.uint8], DTYPE_CODES[torch.bool]
    cases = [
        ("at most 64", raw_frame([], n_tensors=65)),
        ("unknown dtype code", raw_frame([(b"x", 99, (1,), 4, bytes(4))])),
        ("dims", raw_frame([(b"x", F32, (1,) * 9, 4, bytes(4))])),
        ("needs 8 bytes", raw_frame([(b"x", F32, (2,), 4, bytes(4))])),
        ("needs 1361\\d+ bytes", raw_frame([(b"x", F32, (2**64 - 1,) * 2, 4, bytes(4))])),
        ("impossible shape", raw_frame([(b"x", F32, (0, 2**40, 2**40), 0, b"")])),
        ("'x'\\)'s data", raw_frame([(b"x", u8, (2**40,), 2**40, bytes(4))])),
        ("utf-8", raw_frame([(b"\xff\xfe", F32, (1,), 4, bytes(4))])),
        ("twice", raw_frame([(b"x", F32, (), 4, bytes(4))] * 2)),
        ("0 and 1", raw_frame([(b"x", b8, (2,), 2, b"\x01\x02")])),
        ("truncated", raw_frame([(b"x", F32, (1,), 4, bytes(4))], n_tensors=2)),
    ]
    for message, data in cases:
        with pytest.raises(FrameError, match=message):
            decode(data)


def test_overflowing_dims_product_mismatch() -> None:
    # 2**62 * 2**2 float32 items wrap to 0 bytes in 64-bit arithmetic; Python ints don't wrap.
    with pytest.raises(FrameError, match="needs"):
        decode(raw_frame([(b"x", F32, (2**62, 4), 0, b"")]))


def test_oversized() -> None:
    with pytest.raises(FrameError, match="max_bytes"):
        decode(SMALL, max_bytes=len(SMALL) - 1)
    assert decode(SMALL, max_bytes=len(SMALL)).seq == 4
    big = encode(make_experience(0, 0, 1024))
    with pytest.raises(FrameError, match="max_bytes"):
        decode(big, max_bytes=1000)
    assert MAX_FRAME_BYTES == 64 * 1024 * 1024


@FAST
@given(st.binary(max_size=300))
def test_random_bytes_never_raise_anything_else(data: bytes) -> None:
    for candidate in (data, MAGIC + struct.pack("<H", VERSION) + data, reseal(SMALL[:6] + data)):
        try:
            decode(candidate)
        except FrameError:
            pass


@FAST
@given(st.data())
def test_resealed_mutations_never_raise_anything_else(data: st.DataObject) -> None:
    """Mutate a valid frame and fix its CRC, so the structural checks (not the CRC) must hold."""
    body = bytearray(SMALL[:-4])
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(body) - 1))
        body[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(body)))
    tail = data.draw(st.binary(max_size=8))
    try:
        exp = decode(reseal(bytes(body[:cut]) + tail))
    except FrameError:
        return
    for t in exp.tensors.values():  # what decodes is a usable tensor
        assert t.numel() * t.element_size() == len(_bits(t))


def test_frame_stats_skips_garbage_and_keeps_going() -> None:
    stats = FrameStats()
    stream = [SMALL, b"junk", SMALL[:-1], encode(make_experience(7, 0, 32)), "text", SMALL]
    got = [stats.decode(item) for item in stream]  # type: ignore[arg-type]
    assert [exp is None for exp in got] == [False, True, True, False, True, False]
    assert (stats.decoded, stats.malformed) == (3, 3)
    assert stats.last_error and "bytes-like" in stats.last_error
    assert got[3] is not None and got[3].agent_id == 7


def test_no_pickle_in_the_format() -> None:
    source = Path(frame.__file__).read_text()
    for word in ("pickle", "torch.load", "torch.save", "allow_pickle"):
        assert word not in source


@pytest.mark.parametrize("payload", [0, 1, 4, 100, 1024, 4096, 1 << 20])
def test_make_experience_size(payload: int) -> None:
    exp = make_experience(2, 9, payload, policy_version=3)
    nbytes = sum(t.numel() * t.element_size() for t in exp.tensors.values())
    assert payload - 4 < nbytes <= max(payload, 4)
    assert len(encode(exp)) - payload < 128  # small framing overhead
    got = decode(encode(exp))
    assert (got.agent_id, got.seq, got.policy_version) == (2, 9, 3)
    assert_same(exp, got)
