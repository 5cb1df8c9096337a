"""The JetStream experience buffer on a real nats-server.

A NATS fetch waits only ``fetch_timeout_s`` (0.1 s) for messages, so on a busy machine one pull
can come back empty while the server is still delivering: every drain here pulls until the
count it expects came back (``labkit.buffers.base.drain``), bounded by a generous limit, never
"until the first empty pull"."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import nats
import nats.js.errors
import pytest
from buffer_helpers import assert_same, exp

from labkit.buffers.base import ExperienceBuffer
from labkit.buffers.base import drain as drain_until
from labkit.buffers.chunk import ExperienceChunk
from labkit.buffers.frame import Experience, encode
from labkit.buffers.kinds import open_buffer
from labkit.buffers.nats_js import NatsBuffer, subject
from labkit.errors import LabkitError, ServiceError
from labkit.services import NatsServer

N = 12
STREAM = "LAB_EXP"


@pytest.fixture(scope="module")
def server() -> Iterator[NatsServer]:
    with NatsServer() as srv:
        yield srv


def js_call(url: str, call: Callable[[Any], Awaitable[Any]]) -> Any:
    """Runs ``call(js)`` on a fresh JetStream connection (the test's raw view of the server)."""

    async def main() -> Any:
        nc = await nats.connect(url, allow_reconnect=False)
        try:
            return await call(nc.jetstream())
        finally:
            await nc.close()

    return asyncio.run(main())


@pytest.fixture
def url(server: NatsServer) -> Iterator[str]:
    yield server.url

    async def delete(js: Any) -> None:
        try:
            await js.delete_stream(STREAM)
        except nats.js.errors.NotFoundError:
            pass

    js_call(server.url, delete)


def publish_raw(url: str, agent: int, *payloads: bytes) -> None:
    """Publishes bytes straight to an agent's subject: no frame checks, no msg id."""

    async def send(js: Any) -> None:
        for data in payloads:
            await js.publish(subject(agent), data)

    js_call(url, send)


def drain(buf: ExperienceBuffer, want: int, batch: int = 5) -> list[Experience]:
    """Pulls and acks until ``want`` experiences came back (a hang is bounded by the limit)."""
    return drain_until(buf, want, batch=batch).experiences


def settled(buf: NatsBuffer, timeout: float = 30.0) -> bool:
    """True once the consumer has nothing undelivered and nothing unacked (acks are async)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = buf.consumer_state()
        if state.pending == 0 and state.ack_pending == 0:
            return True
        time.sleep(0.05)
    return False


def test_returns_everything_exactly_from_two_agents(url):
    producers = [NatsBuffer(url, agent_id=a) for a in (0, 1)]
    learner = NatsBuffer(url, agent_id=0, agents=[0, 1])
    for a, buf in enumerate(producers):
        assert buf.push([exp(a, s) for s in range(N)]) == N
        assert buf.stats().pushed == N
    got = drain(learner, 2 * N)
    assert len(got) == 2 * N
    for item in got:
        assert_same(item, exp(item.agent_id, item.seq))
    for a in (0, 1):
        assert [e.seq for e in got if e.agent_id == a] == list(range(N))  # in order per agent
    assert learner.stats().pulled == 2 * N and learner.stats().duplicates == 0
    assert settled(learner)
    assert learner.pull(10) == []
    for buf in [*producers, learner]:
        buf.close()
        buf.close()  # twice is fine
    with pytest.raises(LabkitError, match="closed"):
        learner.pull(1)


def test_is_at_least_once_across_a_dead_learner(url):
    began = time.monotonic()
    with NatsBuffer(url, agent_id=0) as producer:
        producer.push([exp(0, s) for s in range(N)])
    # The redelivery delay, from this machine's pace now: ten times a connect, stream set-up
    # and publish, which is about what the second learner does before it has drained.
    ack_wait = max(1.0, 10 * (time.monotonic() - began))
    a = NatsBuffer(url, agent_id=0, ack_wait_s=ack_wait)
    lost = a.pull(4)
    delivered = time.monotonic()
    assert [e.seq for e in lost] == [0, 1, 2, 3]
    a.close()  # dies without ack

    b = NatsBuffer(url, agent_id=0, ack_wait_s=ack_wait)  # same durable: "learners"
    consumed = [(e.agent_id, e.seq) for e in drain(b, N - 4)]
    if time.monotonic() - delivered < ack_wait:  # drained before the lost four were due
        assert consumed == [(0, s) for s in range(4, N)]
    consumed += [(e.agent_id, e.seq) for e in drain(b, N - len(consumed))]  # redelivered
    assert len(consumed) == len(set(consumed)) == N  # consumed == pushed, no duplicates
    assert sorted(consumed) == [(0, s) for s in range(N)]
    assert b.stats().redelivered == 4 and b.stats().duplicates == 0
    assert settled(b)
    b.close()


def test_duplicate_publishes_are_returned_once(url):
    producer = NatsBuffer(url, agent_id=0)
    producer.push([exp(0, 0), exp(0, 1)])
    assert producer.push([exp(0, 1), exp(0, 2), exp(0, 0)]) == 3  # a retried push
    assert producer.publish_duplicates == 2  # JetStream's msg-id window kept them out
    assert producer.stats().pushed == 3
    publish_raw(url, 0, encode(exp(0, 1)))  # no msg id: only the learner can tell
    learner = NatsBuffer(url, agent_id=0)
    got = drain(learner, 3, batch=2)
    assert [e.seq for e in got] == [0, 1, 2]
    deadline = time.monotonic() + 30.0  # only bounds a hang: the duplicate is the next message
    while learner.stats().duplicates == 0 and time.monotonic() < deadline:
        assert learner.pull(2) == []  # read, recognised by (agent, seq), never returned
    assert learner.stats().duplicates == 1
    assert settled(learner)  # the duplicate was acked
    producer.close()
    learner.close()


def chunk(agent: int, seqs: range) -> ExperienceChunk:
    return ExperienceChunk.from_experiences([exp(agent, s) for s in seqs])


def test_chunks_are_returned_per_experience_deduplicated_and_acked(url):
    producer = NatsBuffer(url, agent_id=0)
    assert producer.push_chunks([chunk(0, range(0, 4)), chunk(0, range(4, 8))]) == 8
    assert producer.push_chunks([chunk(0, range(0, 4))]) == 4  # a retried publish, same msg id
    assert producer.publish_duplicates == 1 and producer.stats().pushed == 8
    producer.push_chunks([chunk(0, range(6, 10))])  # overlaps: only the learner can tell
    learner = NatsBuffer(url, agent_id=0)
    got = drain(learner, 10, batch=3)  # chunks cut at max_count: the rest wait, unacked
    assert [e.seq for e in got] == list(range(10))
    for item in got:
        assert_same(item, exp(0, item.seq))
    assert learner.stats().duplicates == 2  # seqs 6 and 7 of the third chunk
    assert settled(learner)  # each message acked once all it returned were
    producer.close()
    learner.close()


def test_capacity_discards_the_oldest_per_agent_and_counts(url):
    producer = NatsBuffer(url, agent_id=0, capacity=10)
    other = NatsBuffer(url, agent_id=1, capacity=10)
    producer.push([exp(0, s) for s in range(8)])
    assert producer.stats().dropped == 0
    producer.push([exp(0, s) for s in range(8, 25)])
    other.push([exp(1, s) for s in range(3)])
    assert producer.stats().dropped == 15 and other.stats().dropped == 0
    learner = NatsBuffer(url, agent_id=0, agents=[0, 1])
    got = drain(learner, 10 + 3)
    assert learner.pull(10) == []  # nothing more: the oldest 15 were discarded
    assert [e.seq for e in got if e.agent_id == 0] == list(range(15, 25))  # the newest survive
    assert [e.seq for e in got if e.agent_id == 1] == [0, 1, 2]
    for buf in (producer, other, learner):
        buf.close()


def test_skips_and_counts_malformed_messages(url):
    learner = NatsBuffer(url, agent_id=0, ack_wait_s=1.0)
    NatsBuffer(url, agent_id=0).push([exp(0, 0)])
    publish_raw(url, 0, b"garbage", b"\x80\x04\x95 not a frame, and never unpickled")
    NatsBuffer(url, agent_id=0).push([exp(0, 1)])
    got = drain(learner, 2)
    assert [e.seq for e in got] == [0, 1]
    assert learner.stats().malformed == 2 and learner.frames.last_error
    assert settled(learner)  # terminated: never redelivered
    learner.close()


def test_memory_storage_and_a_filter_per_agent(url):
    with NatsBuffer(url, agent_id=2, storage="memory") as producer:
        producer.push([exp(2, 0)])
    with NatsBuffer(url, agent_id=5) as other:
        other.push([exp(5, 0)])

    async def storage(js: Any) -> str:
        return (await js.stream_info(STREAM)).config.storage

    assert js_call(url, storage) == "memory"
    with NatsBuffer(url, agent_id=0, agents=[2], group="only-2") as learner:
        assert [(e.agent_id, e.seq) for e in drain(learner, 1)] == [(2, 0)]
        assert learner.pull(10) == []  # agent 5's message is not for this group
    with NatsBuffer(url, agent_id=0, agents=None, group="all") as learner:  # None: every agent
        assert sorted(e.agent_id for e in drain(learner, 2)) == [2, 5]


def test_open_buffer_builds_it(url):
    with open_buffer("nats", url, agent_id=1, agents=[0, 1], capacity=100) as buf:
        assert isinstance(buf, NatsBuffer) and buf.name == "nats"
        assert buf.push([exp(1, 0)]) == 1
        assert [e.seq for e in drain(buf, 1)] == [0]


def test_bad_arguments_are_explained(url):
    with pytest.raises(LabkitError, match="capacity"):
        NatsBuffer(url, agent_id=0, capacity=0)
    with pytest.raises(LabkitError, match="group name"):
        NatsBuffer(url, agent_id=0, group="a.b")
    with pytest.raises(LabkitError, match="storage"):
        NatsBuffer(url, agent_id=0, storage="disk")
    NatsBuffer(url, agent_id=0).close()
    with pytest.raises(ServiceError, match="already belong to another stream"):
        NatsBuffer(url, agent_id=0, stream="OTHER")
    with pytest.raises(LabkitError, match=r"needs a nats:// URL, got redis://:\*\*\*@"):
        open_buffer("nats", "redis://:secret@127.0.0.1:6379/0", agent_id=0)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.timeout(120)  # a bound on a hang (no endless reconnecting), not a speed
def test_unreachable_server_or_wrong_token_fails_fast_and_clearly(url):
    with pytest.raises(ServiceError, match="cannot connect to NATS.*nats-server running"):
        open_buffer("nats", f"nats://127.0.0.1:{closed_port()}", agent_id=0)
    bad = url.replace("://", "://XbadX", 1)
    with pytest.raises(ServiceError, match="wrong token") as info:
        NatsBuffer(bad, agent_id=0)
    assert "XbadX" not in str(info.value)  # the token is redacted
