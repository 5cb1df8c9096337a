"""Chunk frames (format version 2): exact round trips, FrameError for every malformed input,
version 1 still read, the copy contract; chunks through the list and stream buffers on a real
redis-server, with de-duplication, at-least-once and reclaim per experience."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator

import numpy as np
import pytest
import redis
import torch
from buffer_helpers import assert_same, drain, exp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labkit.buffers.bench_tracking import Tracker
from labkit.buffers.chunk import (
    CHUNK_VERSION,
    MAX_CHUNK,
    ExperienceChunk,
    as_chunks,
    decode_chunk,
    encode_chunk,
    read_entry,
)
from labkit.buffers.frame import DTYPE_CODES, MAGIC, FrameError, FrameStats, decode, encode
from labkit.buffers.kinds import open_buffer
from labkit.buffers.redis_list import list_key
from labkit.services import RedisServer

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
HEADER = struct.Struct("<4sHHIHH")


def chunk_of(agent: int, seqs: range) -> ExperienceChunk:
    return ExperienceChunk.from_experiences([exp(agent, s) for s in seqs])


def same_chunk(a: ExperienceChunk, b: ExperienceChunk) -> None:
    for name in ("agent_ids", "seqs", "policy_versions"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
    assert a.timestamps.tobytes() == b.timestamps.tobytes()
    assert list(a.tensors) == list(b.tensors)
    for name, x in a.tensors.items():
        y = b.tensors[name]
        assert (x.dtype, x.shape) == (y.dtype, y.shape)
        assert x.contiguous().view(torch.uint8).numpy().tobytes() == (
            y.contiguous().view(torch.uint8).numpy().tobytes())


def reseal(body: bytes) -> bytes:
    return body + struct.pack("<I", zlib.crc32(body))


SMALL = encode_chunk(chunk_of(3, range(4)))


@st.composite
def chunks(draw: st.DrawFn) -> ExperienceChunk:
    """1 to 6 experiences, 0 to 4 tensors of any dtype and 0-3 dims, every bit pattern."""
    n = draw(st.integers(1, 6))
    i64 = st.integers(-(2**63), 2**63 - 1)
    tensors = {}
    for name in draw(st.lists(st.text(max_size=6), max_size=4, unique=True)):
        dtype = draw(st.sampled_from(list(DTYPE_CODES)))
        shape = (n, *draw(st.lists(st.integers(0, 3), max_size=3)))
        numel = int(np.prod(shape))
        if dtype is torch.bool:
            t = torch.tensor(draw(st.lists(st.booleans(), min_size=numel, max_size=numel)),
                             dtype=torch.bool).reshape(shape)
        else:
            raw = draw(st.binary(min_size=numel * dtype.itemsize, max_size=numel * dtype.itemsize))
            t = (torch.frombuffer(bytearray(raw), dtype=dtype).reshape(shape) if raw
                 else torch.empty(shape, dtype=dtype))
        tensors[name] = t
    column = st.lists(i64, min_size=n, max_size=n)
    times = st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=n, max_size=n)
    return ExperienceChunk(np.array(draw(column), np.int64), np.array(draw(column), np.int64),
                           np.array(draw(column), np.int64), np.array(draw(times), np.float64),
                           tensors)


@FAST
@given(chunks(), st.booleans())
def test_round_trip_is_exact(chunk: ExperienceChunk, copy: bool) -> None:
    frame = encode_chunk(chunk)
    assert frame[:4] == MAGIC and struct.unpack_from("<H", frame, 4)[0] == CHUNK_VERSION
    same_chunk(chunk, decode_chunk(frame, copy=copy))


def test_experiences_come_back_one_by_one_exactly() -> None:
    sent = [exp(5, s) for s in range(7)]
    got = decode_chunk(encode_chunk(ExperienceChunk.from_experiences(sent))).experiences()
    assert len(got) == 7
    for g, w in zip(got, sent, strict=True):
        assert_same(g, w)
    non_contiguous = torch.arange(12.0).reshape(3, 4).t()  # 4 experiences of 3
    chunk = ExperienceChunk(np.arange(4), np.arange(4), np.zeros(4, np.int64), np.zeros(4),
                            {"x": non_contiguous})
    assert torch.equal(decode_chunk(encode_chunk(chunk)).tensors["x"], non_contiguous)


def test_version_1_frames_still_decode_and_version_2_is_not_one_experience() -> None:
    one = exp(2, 9)
    got = decode_chunk(encode(one))
    assert len(got) == 1
    assert_same(got.experiences()[0], one)
    with pytest.raises(FrameError, match="version"):
        decode(SMALL)
    with pytest.raises(FrameError, match="version"):
        decode_chunk(MAGIC + struct.pack("<H", 3) + SMALL[6:])


def test_copy_contract() -> None:
    frame = encode_chunk(chunk_of(1, range(3)))
    view = decode_chunk(frame, copy=False)  # views of the immutable reply: no copy
    start = np.frombuffer(frame, np.uint8).ctypes.data
    assert start <= view.tensors["obs"].data_ptr() < start + len(frame)
    assert not view.seqs.flags.writeable
    owned = decode_chunk(frame)  # one copy of the frame, writable, shares nothing
    assert not start <= owned.tensors["obs"].data_ptr() < start + len(frame)
    owned.tensors["obs"].add_(1)
    assert torch.equal(owned.tensors["obs"], view.tensors["obs"] + 1)
    mutable = bytearray(frame)  # not bytes: always copied, whatever copy says
    got = decode_chunk(memoryview(mutable), copy=False)
    mutable[40:-4] = bytes(len(mutable) - 44)
    assert torch.equal(got.tensors["obs"], view.tensors["obs"])


def test_every_truncation_and_byte_flip_raises_frame_error_only() -> None:
    for end in range(len(SMALL)):
        with pytest.raises(FrameError):
            decode_chunk(SMALL[:end])
    for i in range(len(SMALL)):
        flipped = bytearray(SMALL)
        flipped[i] ^= 0x41
        with pytest.raises(FrameError):
            decode_chunk(bytes(flipped))
    with pytest.raises(FrameError, match="bytes-like"):
        decode_chunk(12345)  # type: ignore[arg-type]


def test_structural_errors_with_a_valid_crc() -> None:
    body = SMALL[:-4]
    n = 4

    def header(**kw: int) -> bytes:
        fields = {"flags": 0, "n": n, "n_tensors": 3, "reserved": 0, **kw}
        return HEADER.pack(MAGIC, CHUNK_VERSION, fields["flags"], fields["n"],
                           fields["n_tensors"], fields["reserved"])

    for kw, match in (({"flags": 1}, "flags"), ({"reserved": 1}, "reserved"),
                      ({"n": 0}, "experiences"), ({"n": MAX_CHUNK + 1}, "experiences"),
                      ({"n": 10**6}, "columns"), ({"n_tensors": 65}, "tensors"),
                      ({"n_tensors": 4}, "truncated"), ({"n_tensors": 2}, "unexpected")):
        with pytest.raises(FrameError, match=match):
            decode_chunk(reseal(header(**kw) + body[HEADER.size:]))
    pad_at = body.index(b"obs") + 3 + 2 + 2 * 8 + 8  # name, dtype/ndim, 2 dims, byte length
    padded = bytearray(body)
    assert -pad_at % 8 and padded[pad_at] == 0
    padded[pad_at] = 1
    with pytest.raises(FrameError, match="padding"):
        decode_chunk(reseal(bytes(padded)))
    with pytest.raises(FrameError, match="max_bytes"):
        decode_chunk(SMALL, max_bytes=len(SMALL) - 1)


@FAST
@given(st.data())
def test_resealed_mutations_never_raise_anything_else(data: st.DataObject) -> None:
    body = bytearray(SMALL[:-4])
    for _ in range(data.draw(st.integers(1, 4))):
        body[data.draw(st.integers(0, len(body) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(body)))
    try:
        got = decode_chunk(reseal(bytes(body[:cut]) + data.draw(st.binary(max_size=8))))
    except FrameError:
        return
    for name, t in got.tensors.items():
        assert t.shape[0] == len(got), name


def test_what_a_chunk_cannot_carry_is_a_frame_error() -> None:
    with pytest.raises(FrameError, match="layout"):
        ExperienceChunk.from_experiences([exp(0, 0), make_other(0, 1)])
    with pytest.raises(FrameError, match="at least one"):
        ExperienceChunk.from_experiences([])
    with pytest.raises(FrameError, match="leading dim"):
        ExperienceChunk(np.arange(2), np.arange(2), np.zeros(2, np.int64), np.zeros(2),
                        {"x": torch.zeros(3)})
    with pytest.raises(FrameError, match="length"):
        ExperienceChunk(np.arange(3), np.arange(2), np.zeros(2, np.int64), np.zeros(2), {})
    with pytest.raises(FrameError, match="integers"):
        ExperienceChunk(np.zeros(2), np.arange(2), np.zeros(2, np.int64), np.zeros(2), {})
    sparse = torch.eye(2).to_sparse()
    with pytest.raises(FrameError):
        encode_chunk(ExperienceChunk(np.arange(2), np.arange(2), np.zeros(2, np.int64), np.zeros(2),
                                     {"s": sparse}))


def make_other(agent: int, seq: int):
    one = exp(agent, seq)
    return type(one)(agent, seq, 7, 0.0, {**one.tensors, "obs": one.tensors["obs"].float()})


def test_take_read_entry_and_as_chunks() -> None:
    chunk = chunk_of(2, range(6))
    head, tail = chunk.take(slice(0, 2)), chunk.take(slice(2, None))
    assert (len(head), len(tail)) == (2, 4) and tail.seqs.tolist() == [2, 3, 4, 5]
    picked = chunk.take(np.array([True, False] * 3))
    assert picked.seqs.tolist() == [0, 2, 4]
    assert torch.equal(picked.tensors["obs"][1], exp(2, 2).tensors["obs"])
    stats = FrameStats()
    assert isinstance(read_entry(stats, encode(exp(1, 1))), type(exp(1, 1)))
    assert len(read_entry(stats, SMALL)) == 4
    assert read_entry(stats, b"junk") is None and read_entry(stats, "text") is None
    assert (stats.decoded, stats.malformed) == (2, 2)
    mixed = as_chunks([exp(0, 0), exp(0, 1), make_other(0, 2), chunk])
    assert [len(c) for c in mixed] == [2, 1, 6]


def test_tracker_checks_a_chunk_at_a_time() -> None:
    from labkit.buffers.frame import make_experience

    obs = make_experience(0, 0, 64).tensors["obs"]
    def bench_chunk(agent: int, seqs: list[int], bad: int | None = None) -> ExperienceChunk:
        rows = obs.expand(len(seqs), -1).clone()
        if bad is not None:
            rows[bad, 0] = -1
        return ExperienceChunk(np.full(len(seqs), agent), np.array(seqs),
                               np.zeros(len(seqs), np.int64), np.zeros(len(seqs)), {"obs": rows})

    tracker = Tracker(obs.numpy().tobytes(), guide=False)
    assert tracker.take_chunks([bench_chunk(0, [0, 1, 2, 3]), bench_chunk(1, [0, 1])]) == 6
    assert tracker.take_chunks([bench_chunk(0, [2, 3, 4, 4], bad=2)]) == 0  # 2 3 seen, 4 twice
    assert (tracker.unique, tracker.duplicates, tracker.corrupt) == (7, 3, 1)
    assert tracker.take([e for e in bench_chunk(0, [5, 0]).experiences()]) == 1


# --------------------------------------------------------------------------------------------
# Chunks through the Redis buffers


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer() as srv:
        yield srv


@pytest.fixture
def client(server: RedisServer) -> Iterator[redis.Redis]:
    conn = server.client()
    conn.flushall()
    yield conn
    conn.close()


def rpushes(client: redis.Redis) -> int:
    return int(client.info("commandstats").get("cmdstat_rpush", {}).get("calls", 0))


def test_list_pushes_chunks_in_one_rpush_and_pulls_them_back(server, client):
    with open_buffer("list", server.url, agent_id=1) as agent:
        before = rpushes(client)
        assert agent.push_chunks([chunk_of(1, range(0, 5)), chunk_of(1, range(5, 10))]) == 10
        assert rpushes(client) - before == 1 and client.llen(list_key("lab", 1)) == 2
        agent.push([exp(1, 10), exp(1, 11)])  # version 1 entries in the same list
    learner = open_buffer("list", server.url, agent_id=0, agents=[1])
    first = learner.pull_chunks(7)  # the second chunk is cut: its rest waits for the next pull
    assert [c.seqs.tolist() for c in first] == [[0, 1, 2, 3, 4], [5, 6]]
    rest = learner.pull(100)  # Experience objects, from the kept rows and the v1 entries
    assert [e.seq for e in rest] == [7, 8, 9, 10, 11]
    for e in rest:
        assert_same(e, exp(1, e.seq))
    assert learner.stats().pulled == 12 and learner.pull(5) == []
    learner.close()


def test_list_pulls_chunks_fairly_and_counts_capacity_in_experiences(server, client):
    for agent in (1, 2):
        with open_buffer("list", server.url, agent_id=agent, capacity=8) as buf:
            buf.push_chunks([chunk_of(agent, range(k, k + 4)) for k in range(0, 16, 4)])
            assert buf.stats().dropped == 8  # 16 pushed, 2 chunks of 4 kept
    client.rpush(list_key("lab", 2), b"garbage")
    with open_buffer("list", server.url, agent_id=0, agents=[1, 2]) as learner:
        got = learner.pull_chunks(8)
        assert sorted(int(c.agent_ids[0]) for c in got) == [1, 2]  # a share from each
        rest = learner.pull_chunks(100)
        seqs = sorted((int(a), int(s)) for c in got + rest
                      for a, s in zip(c.agent_ids, c.seqs, strict=True))
        assert seqs == [(a, s) for a in (1, 2) for s in range(8, 16)]
        assert learner.stats().malformed == 1


def test_stream_chunks_are_at_least_once_and_deduplicated_per_experience(server, client):
    agent = open_buffer("stream", server.url, agent_id=3)
    agent.push_chunks([chunk_of(3, range(0, 4)), chunk_of(3, range(4, 8))])
    crashed = open_buffer("stream", server.url, agent_id=0, agents=[3], consumer="a")
    lost = crashed.pull(3)  # three of the first chunk; it dies before acking any
    assert [e.seq for e in lost] == [0, 1, 2]
    crashed.close()
    learner = open_buffer("stream", server.url, agent_id=0, agents=[3], consumer="b")
    new = drain(learner, batch=3)
    assert [e.seq for e in new] == [4, 5, 6, 7]  # the first chunk stays pending on "a"
    agent.push_chunks([chunk_of(3, range(4, 8))])  # a retried push: four repeats
    assert drain(learner) == [] and learner.stats().duplicates == 4
    assert learner.reclaim(0) == 1  # the dead consumer's whole first chunk
    again = drain(learner, batch=3)
    assert [e.seq for e in again] == [0, 1, 2, 3] and learner.stats().redelivered == 4
    for e in new + again:
        assert_same(e, exp(3, e.seq))
    assert learner.pending() == 0  # every entry acked once all its experiences were
    for buf in (agent, learner):
        buf.close()
