"""Experience buffers on a real redis-server: the guide's baseline, lists and streams."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
import torch
from buffer_helpers import assert_same, drain, exp

from labkit.buffers.base import SeenSeqs
from labkit.buffers.frame import encode
from labkit.buffers.guide import RAW, GuideBuffer
from labkit.buffers.kinds import open_buffer
from labkit.buffers.redis_list import ListBuffer, fair_shares, list_key
from labkit.buffers.redis_stream import StreamBuffer, stream_key
from labkit.errors import LabkitError
from labkit.services import RedisServer

N = 12


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


@pytest.fixture
def url(server: RedisServer, client: redis.Redis) -> str:
    return server.url


def calls(client: redis.Redis, command: str) -> int:
    return int(client.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


# --------------------------------------------------------------------------------------------
# The guide's buffer


def test_guide_loses_dtype_and_shape_and_never_reads_its_own_rank(url, client):
    agents = [GuideBuffer(url, agent_id=a, cluster_size=2, rank=a) for a in (0, 1)]
    before = calls(client, "rpush")
    for a, buf in enumerate(agents):
        assert buf.push([exp(a, s) for s in range(N)]) == N
    assert calls(client, "rpush") - before == 2 * N  # one round trip per item

    assert len(agents[0].pull(100)) == 1  # one LPOP per *other* agent per pull
    got = [*agents[0].pull(0), *drain(agents[0])]
    assert len(got) == N - 1
    for s, item in enumerate(got, start=1):  # rank 0 only ever read buffer:1 (agent 1)
        assert (item.agent_id, item.seq, item.policy_version) == (-1, -1, -1)
        assert list(item.tensors) == [RAW]
        raw = item.tensors[RAW]
        assert raw.dtype == torch.float32 and raw.shape == (12,)  # was int64 (2, 3)
        assert raw.numpy().tobytes() == exp(1, s).tensors["obs"].numpy().tobytes()
    assert client.llen("buffer:0") == N  # its own agent's data: never read by rank 0
    assert len(drain(agents[1])) == N  # rank 1 reads buffer:0
    for buf in agents:
        buf.close()


def test_guide_rank_agent_id_mixup_reads_its_own_data(url, client):
    # torchrun gave agent 0 rank 1 and agent 1 rank 0: each skips the other's buffer.
    a0 = GuideBuffer(url, agent_id=0, cluster_size=2, rank=1)
    a1 = GuideBuffer(url, agent_id=1, cluster_size=2, rank=0)
    a0.push([exp(0, s) for s in range(3)])
    a1.push([exp(1, s) for s in range(3)])
    own0, own1 = drain(a0), drain(a1)
    assert [e.tensors[RAW].numpy().tobytes() for e in own0] == [
        exp(0, s).tensors["obs"].numpy().tobytes() for s in range(3)
    ]
    assert [e.tensors[RAW].numpy().tobytes() for e in own1] == [
        exp(1, s).tensors["obs"].numpy().tobytes() for s in range(3)
    ]
    assert a0.stats().pulled == a1.stats().pulled == 3


def test_guide_counts_bytes_that_are_not_float32(url, client):
    buf = GuideBuffer(url, agent_id=1, cluster_size=2, rank=1)
    client.rpush("buffer:0", b"abc")
    assert buf.pull(10) == [] and buf.stats().malformed == 1


# --------------------------------------------------------------------------------------------
# Both typed buffers


@pytest.mark.parametrize("kind", ["list", "stream"])
def test_typed_buffers_return_everything_exactly(url, kind):
    producers = [open_buffer(kind, url, agent_id=a) for a in (0, 1)]
    learner = open_buffer(kind, url, agent_id=0, agents=[0, 1])
    for a, buf in enumerate(producers):
        assert buf.push([exp(a, s) for s in range(N)]) == N
    first = learner.pull(4)
    assert sorted(e.agent_id for e in first) == [0, 0, 1, 1]  # a fair share of each agent
    learner.ack(first)
    got = first + drain(learner, batch=5)
    assert len(got) == 2 * N
    for item in got:
        assert_same(item, exp(item.agent_id, item.seq))
    for a in (0, 1):
        assert [e.seq for e in got if e.agent_id == a] == list(range(N))  # in order per agent
    assert learner.stats().pulled == 2 * N and producers[1].stats().pushed == N
    assert learner.pull(10) == []


# --------------------------------------------------------------------------------------------
# Lists


def test_list_key_has_a_hash_tag():
    assert list_key("lab", 7) == "lab:exp:{7}" and stream_key("lab", 7) == "lab:xs:{7}"
    assert fair_shares(7, 3) == [3, 2, 2] and fair_shares(1, 3) == [1, 0, 0]


def test_list_batched_push_is_one_rpush(url, client):
    buf = ListBuffer(url, agent_id=3, capacity=1000)
    before = calls(client, "rpush")
    assert buf.push([exp(3, s) for s in range(50)]) == 50
    assert calls(client, "rpush") - before == 1
    assert client.llen("lab:exp:{3}") == 50
    before = calls(client, "lpop")
    assert len(buf.pull(50)) == 50
    assert calls(client, "lpop") - before == 1  # LPOP key 50


def test_list_overflow_drops_the_oldest_and_counts(url, client):
    buf = ListBuffer(url, agent_id=0, capacity=10)
    buf.push([exp(0, s) for s in range(8)])
    buf.push([exp(0, s) for s in range(8, 25)])
    assert buf.stats().dropped == 15 and client.llen("lab:exp:{0}") == 10
    assert [e.seq for e in drain(buf)] == list(range(15, 25))


def test_list_skips_and_counts_malformed_frames(url, client):
    buf = ListBuffer(url, agent_id=0)
    buf.push([exp(0, 0)])
    client.rpush("lab:exp:{0}", b"garbage", b"\x80\x04\x95 not a frame, and never unpickled")
    buf.push([exp(0, 1)])
    got = drain(buf)
    assert [e.seq for e in got] == [0, 1]
    assert buf.stats().malformed == 2 and buf.frames.last_error


# --------------------------------------------------------------------------------------------
# Streams


def pending(client: redis.Redis, agent: int, group: str = "learners") -> int:
    return int(client.xpending(stream_key("lab", agent), group)["pending"])


def test_stream_is_at_least_once_across_a_dead_consumer(url, client):
    StreamBuffer(url, agent_id=0).push([exp(0, s) for s in range(N)])
    a = StreamBuffer(url, agent_id=0, consumer="a")
    lost = a.pull(4)
    a.close()  # dies without ack
    assert pending(client, 0) == 4

    b = StreamBuffer(url, agent_id=0, consumer="b")
    assert b.reclaim(min_idle_ms=60_000) == 0  # not idle long enough yet
    assert b.reclaim(min_idle_ms=0) == 4
    assert b.reclaim(min_idle_ms=0) == 0  # already held: not claimed twice
    again = b.pull(4)
    assert [e.seq for e in again] == [e.seq for e in lost] == [0, 1, 2, 3]
    assert b.stats().redelivered == 4
    b.ack(again)
    rest = drain(b)
    assert [e.seq for e in rest] == list(range(4, N))
    assert pending(client, 0) == 0 and b.stats().duplicates == 0


def test_stream_kill_learner_mid_batch_then_restart(url, client):
    agents = [0, 1, 2]
    for a in agents:
        StreamBuffer(url, agent_id=a).push([exp(a, s) for s in range(N)])
    consumed: list[tuple[int, int]] = []
    first = StreamBuffer(url, agent_id=0, agents=agents, consumer="learner-1")
    for _ in range(2):
        batch = first.pull(6)
        first.ack(batch)  # trained on and acked
        consumed += [(e.agent_id, e.seq) for e in batch]
    first.pull(6)  # killed mid-batch: never acked, never counted
    first.close()

    second = StreamBuffer(url, agent_id=0, agents=agents, consumer="learner-2")
    assert second.reclaim(min_idle_ms=0) == 6
    consumed += [(e.agent_id, e.seq) for e in drain(second, batch=4)]
    assert len(consumed) == len(set(consumed)) == 3 * N  # consumed == pushed, no duplicates
    assert set(consumed) == {(a, s) for a in agents for s in range(N)}
    assert second.stats().redelivered == 6
    assert sum(pending(client, a) for a in agents) == 0 == second.pending()


def test_stream_duplicates_are_counted_acked_and_not_returned(url, client):
    producer = StreamBuffer(url, agent_id=0)
    producer.push([exp(0, 0), exp(0, 1)])
    producer.push([exp(0, 1), exp(0, 2), exp(0, 0)])  # a retried push
    learner = StreamBuffer(url, agent_id=0)
    got = drain(learner, batch=2)
    assert [e.seq for e in got] == [0, 1, 2]
    assert learner.stats().duplicates == 2 and pending(client, 0) == 0


def test_stream_maxlen_trimming_is_counted(url, client):
    producer = StreamBuffer(url, agent_id=0, capacity=20)
    for start in range(0, 500, 50):
        producer.push([exp(0, s) for s in range(start, start + 50)])
    length = client.xlen("lab:xs:{0}")
    assert 20 <= length < 500  # "~": whole nodes only, at least capacity kept
    assert producer.stats().dropped == 500 - length > 0
    got = drain(StreamBuffer(url, agent_id=0))
    assert [e.seq for e in got] == list(range(500 - length, 500))  # the newest survive


def test_stream_entries_trimmed_before_ack_leave_the_pending_list(url, client):
    producer = StreamBuffer(url, agent_id=0, capacity=10)
    producer.push([exp(0, s) for s in range(5)])
    StreamBuffer(url, agent_id=0, consumer="a").pull(5)  # dies without ack
    producer.push([exp(0, s) for s in range(5, 300)])  # trims the pending five away
    b = StreamBuffer(url, agent_id=0, consumer="b")
    assert b.reclaim(0) == 0
    assert pending(client, 0) == 0
    assert len(drain(b)) == client.xlen("lab:xs:{0}")


def test_stream_skips_acks_and_counts_malformed_entries(url, client):
    learner = StreamBuffer(url, agent_id=0)
    learner.pull(1)  # creates the group
    client.xadd("lab:xs:{0}", {"f": b"garbage"})
    client.xadd("lab:xs:{0}", {"other": encode(exp(0, 5))})
    StreamBuffer(url, agent_id=0).push([exp(0, 0)])
    got = drain(learner)
    assert [e.seq for e in got] == [0]
    assert learner.stats().malformed == 2 and pending(client, 0) == 0


def test_stream_survives_a_deleted_stream(url, client):
    learner = StreamBuffer(url, agent_id=0)
    assert learner.pull(1) == []
    client.flushall()  # the group went with the stream: recreated on the next pull
    StreamBuffer(url, agent_id=0).push([exp(0, 0)])
    assert [e.seq for e in learner.pull(5)] == [0]


def test_seen_seqs_is_bounded():
    seen = SeenSeqs(limit=3)
    assert seen.add(0, 1) and seen.add(0, 0) and not seen.add(0, 1) and not seen.add(0, 0)
    assert seen.add(1, 0)  # per agent
    for s in (10, 20, 30, 40):  # gap grows past the limit: the floor jumps
        assert seen.add(0, s)
    assert not seen.add(0, 5)  # inside the abandoned gap
    assert seen.add(0, 41) and not seen.add(0, 41)


# --------------------------------------------------------------------------------------------
# One factory


def test_open_buffer_swaps_kinds(url):
    for kind, cls in [("guide", GuideBuffer), ("list", ListBuffer), ("stream", StreamBuffer)]:
        with open_buffer(kind, url, agent_id=1, agents=[0, 1], capacity=100) as buf:
            assert isinstance(buf, cls) and buf.name == kind
    with pytest.raises(LabkitError, match="needs a nats:// URL"):
        open_buffer("nats", url, agent_id=0)  # a Redis URL given to the NATS buffer
    with pytest.raises(LabkitError, match="unknown buffer kind"):
        open_buffer("kafka", url, agent_id=0)
    with pytest.raises(LabkitError, match="capacity"):
        open_buffer("list", url, agent_id=0, capacity=0)


def test_buffers_accept_a_client_and_leave_it_open(client):
    buf = open_buffer("list", client, agent_id=0)
    buf.push([exp(0, 0)])
    buf.close()
    assert client.llen("lab:exp:{0}") == 1  # still usable: the buffer did not own it
