"""NATS JetStream behind the buffer interface: at-least-once, de-duplicated by (agent, seq).

- One stream (``LAB_EXP``, subjects ``lab.exp.>``, file or memory storage, limits retention)
  with one subject per agent, ``lab.exp.7``. ``capacity`` becomes the stream's
  ``max_msgs_per_subject`` with discard-old: each agent keeps its newest ``capacity`` messages,
  the same bound as the Redis buffers. The last buffer that names a capacity sets it.
- ``push`` publishes the whole batch with ``publish_async`` and then waits for every PubAck.
  Each message carries ``Nats-Msg-Id: {agent_id}-{seq}``, so JetStream itself drops a
  re-publish of the same experience inside its duplicate window (2 minutes by default): the
  PubAck says ``duplicate`` and it is counted in ``publish_duplicates``, not stored twice.
- Drops, counted honestly: when bounded, ``push`` reads this agent's subject count from the
  stream info before and after the batch; ``dropped += before + stored - after`` is exactly
  what discard-old removed (one producer per agent id, as everywhere in labkit).
- The learner reads with a durable pull consumer named ``group`` (learners sharing a group
  share the work), filtered to the subjects of ``agents`` (all agents when None). Messages stay
  unacked until ``ack()``; one not acked within ``ack_wait_s`` (a learner died) is redelivered
  and counted in ``redelivered``. A learner never returns the same (agent_id, seq) twice:
  repeats are acked and counted in ``duplicates``; malformed messages are counted and
  terminated (never redelivered). Nothing is ever unpickled.
- Chunks (``labkit.buffers.chunk``): ``push_chunks`` publishes one message per chunk, msg id
  ``{agent_id}-{first seq}+{n}``; the learner de-duplicates and returns each experience on
  its own and acks the message once every experience it returned was acked, so a learner that
  dies mid-chunk gets the whole message redelivered. Experiences past ``max_count`` wait,
  unacked, for the next pull. A message holds at most the server's max_payload (1 MiB by
  default): size chunks below it.
- The interface is synchronous: the asyncio client runs on an event loop in a private thread,
  so the buffer also works in Jupyter, whose own loop is already running.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
from collections import deque
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import nats
import nats.errors
import nats.js.errors
from nats.js import api

from labkit.buffers.base import ExperienceBuffer, SeenSeqs, check_capacity, check_count
from labkit.buffers.chunk import ExperienceChunk, encode_chunk, read_entry
from labkit.buffers.frame import Experience, FrameStats, encode
from labkit.buffers.nats_loop import Loop
from labkit.errors import LabkitError, ServiceError
from labkit.services.base import redact

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.aio.msg import Msg
    from nats.js import JetStreamContext

T = TypeVar("T")
PREFIX = "lab.exp"
MSG_ID = "Nats-Msg-Id"
STORAGE = {"file": api.StorageType.FILE, "memory": api.StorageType.MEMORY}
_NAME = re.compile(r"^[A-Za-z0-9_-]+$")  # stream and durable names: no dots, wildcards, spaces
_SCHEMES = ("nats", "tls", "ws", "wss")
_CONNECT_S = 8.0  # bound on connecting: 3 attempts of at most 2 s each, plus waits


def subject(agent_id: int) -> str:
    """``lab.exp.7``: the subject one agent publishes to."""
    return f"{PREFIX}.{agent_id}"


@dataclass
class ConsumerState:
    """The durable consumer as the server sees it (all learners of the group together)."""

    pending: int
    """Messages in the stream that match the filter and were not yet delivered."""
    ack_pending: int
    """Delivered, not acked yet (in flight, or from a learner that died)."""
    redelivered: int
    """Of those, delivered more than once."""


class NatsBuffer(ExperienceBuffer):
    """Publishes to ``lab.exp.<agent_id>`` of ``stream``; pulls the subjects of ``agents`` with
    the durable pull consumer ``group``."""

    name = "nats"

    def __init__(
        self,
        url: str,
        *,
        agent_id: int,
        agents: Sequence[int] | None = None,
        capacity: int | None = None,
        group: str = "learners",
        stream: str = "LAB_EXP",
        ack_wait_s: float = 30.0,
        storage: str = "file",
        fetch_timeout_s: float = 0.1,
        timeout_s: float = 10.0,
        seen_limit: int = 65536,
    ) -> None:
        super().__init__()
        if not isinstance(url, str) or ("://" in url and url.split("://")[0] not in _SCHEMES):
            shown = redact(url) if isinstance(url, str) else type(url).__name__
            raise LabkitError(f"the nats buffer needs a nats:// URL, got {shown}")
        check_capacity(capacity)
        for what, value in (("stream", stream), ("group", group)):
            if not _NAME.match(value):
                raise LabkitError(f"{what} name {value!r}: use letters, digits, '-' and '_' only")
        if storage not in STORAGE:
            raise LabkitError(f"storage {storage!r}: choose 'file' or 'memory'")
        if ack_wait_s <= 0:
            raise LabkitError(f"ack_wait_s must be > 0, got {ack_wait_s}")
        self.url = url
        self.agent_id = agent_id
        self.agents = list(agents) if agents is not None else None
        self.capacity = capacity
        self.group = group
        self.stream = stream
        self.ack_wait_s = ack_wait_s
        self.storage = storage
        self.fetch_timeout_s = fetch_timeout_s
        self.timeout_s = timeout_s
        self.frames = FrameStats()
        self.seen = SeenSeqs(seen_limit)
        self.publish_duplicates = 0
        """Publishes JetStream recognised by their Nats-Msg-Id and did not store again."""
        self._inflight: dict[tuple[int, int], int] = {}  # returned, not acked: stream seq
        self._held: dict[int, list[Any]] = {}  # stream seq: [latest delivery, unacked count]
        self._kept: deque[Experience] = deque()  # of a chunk, past max_count: next pull's
        self._entry_len: int | None = None  # experiences per message last seen
        self._sub: JetStreamContext.PullSubscription | None = None
        self._errors: list[Exception] = []
        self._closed = False
        self._loop = Loop(f"labkit-nats-{agent_id}")
        try:
            self._nc: Client = self._run(self._connect(), "connect", _CONNECT_S)
            self._js = self._nc.jetstream(timeout=timeout_s)
            self._run(self._ensure_stream(), "stream setup")
        except BaseException:
            self.close()
            raise

    # Plumbing.
    def _run(self, coro: Coroutine[Any, Any, T], what: str, timeout: float | None = None) -> T:
        """Runs ``coro`` on the private loop; NATS failures become ServiceError."""
        if self._closed:
            coro.close()
            raise LabkitError("this NatsBuffer is closed")
        limit = self.timeout_s if timeout is None else timeout
        where = redact(self.url)
        try:
            return self._loop.run(coro, limit)
        except concurrent.futures.TimeoutError:
            raise ServiceError(f"NATS {what} at {where} timed out after {limit:g} s") from None
        except nats.errors.NoServersError:
            auth = [e for e in self._errors if "Authorization" in str(e)]
            cause = auth or self._errors  # a refused token may be followed by a reset
            shown = f" ({cause[-1]})" if cause else ""
            hint = (
                "wrong token in the URL?"
                if auth
                else "is nats-server running there? labkit.services.shared.nats_url() starts one"
            )
            raise ServiceError(f"cannot connect to NATS at {where}{shown}: {hint}") from None
        except nats.js.errors.ServiceUnavailableError as exc:
            raise ServiceError(
                f"JetStream is not enabled on {where}: start nats-server with -js ({exc})"
            ) from None
        except nats.errors.Error as exc:
            raise ServiceError(f"NATS {what} at {where} failed: {exc!r}") from exc

    async def _connect(self) -> Client:
        async def on_error(exc: Exception) -> None:  # keeps the cause, quietly
            self._errors[:] = [*self._errors[-7:], exc]

        return await nats.connect(
            self.url, connect_timeout=2.0, allow_reconnect=True, max_reconnect_attempts=3,
            reconnect_time_wait=0.5, error_cb=on_error,
        )  # fmt: skip

    async def _ensure_stream(self) -> None:
        """Creates the stream if missing; a capacity given here updates an existing one."""
        jsm = self._js
        limit = self.capacity if self.capacity is not None else -1
        try:
            info = await jsm.stream_info(self.stream)
        except nats.js.errors.NotFoundError:
            config = api.StreamConfig(
                name=self.stream, subjects=[f"{PREFIX}.>"], retention=api.RetentionPolicy.LIMITS,
                discard=api.DiscardPolicy.OLD, max_msgs_per_subject=limit,
                storage=STORAGE[self.storage],
            )  # fmt: skip
            try:
                await jsm.add_stream(config)
                return
            except nats.js.errors.BadRequestError as exc:
                if "overlap" in str(exc.description):
                    raise ServiceError(
                        f"subjects {PREFIX}.> already belong to another stream than "
                        f"{self.stream!r}: pass that stream's name, or delete it"
                    ) from None
                info = await jsm.stream_info(self.stream)  # another buffer created it just now
        if self.capacity is not None and info.config.max_msgs_per_subject != limit:
            await jsm.update_stream(info.config.evolve(max_msgs_per_subject=limit))

    async def _subject_count(self) -> int:
        name = subject(self.agent_id)
        info = await self._js.stream_info(self.stream, subjects_filter=name)
        return int((info.state.subjects or {}).get(name, 0))

    # Producer side.
    def push(self, experiences: Sequence[Experience]) -> int:
        """Publishes the batch asynchronously, then waits for every PubAck; returns how many
        JetStream acknowledged (duplicates it already held included)."""
        if not experiences:
            return 0
        frames = [(f"{e.agent_id}-{e.seq}", encode(e), 1) for e in experiences]
        return self._run(self._push(frames), "publish")

    def push_chunks(self, chunks: Sequence[ExperienceChunk]) -> int:
        """One message per chunk, the same way; returns the experiences acknowledged."""
        if not chunks:
            return 0
        frames = [(f"{c.agent_ids[0]}-{c.seqs[0]}+{len(c)}", encode_chunk(c), len(c))
                  for c in chunks]
        return self._run(self._push(frames), "publish")

    async def _push(self, frames: list[tuple[str, bytes, int]]) -> int:
        bounded = self.capacity is not None
        before = await self._subject_count() if bounded else 0
        acks, failed = await self._publish(frames)
        if any(isinstance(exc, nats.js.errors.NoStreamResponseError) for _, exc in failed):
            await self._ensure_stream()  # the stream was deleted since: recreate, retry once
            more, failed = await self._publish([frame for frame, _ in failed])
            acks += more
        if failed:
            raise ServiceError(
                f"JetStream refused {len(failed)} of {len(frames)} messages "
                f"({failed[0][1]!r}); re-push them: the msg ids de-duplicate"
            )
        stored = sum(size for size, ack in acks if not ack.duplicate)
        stored_msgs = sum(1 for _, ack in acks if not ack.duplicate)
        self.publish_duplicates += len(acks) - stored_msgs
        self._stats.pushed += stored
        if bounded:
            after = await self._subject_count()
            per = max(size for *_, size in frames)
            self._stats.dropped += max(0, before + stored_msgs - after) * per
        return sum(size for size, _ in acks)

    async def _publish(
        self, frames: list[tuple[str, bytes, int]]
    ) -> tuple[list[tuple[int, api.PubAck]], list[tuple[tuple[str, bytes, int], Exception]]]:
        """Publishes without waiting, then gathers the PubAcks: ([(size, ack)],
        [(frame, error)])."""
        name = subject(self.agent_id)
        futures = [await self._js.publish_async(name, data, headers={MSG_ID: msg_id})
                   for msg_id, data, _ in frames]  # fmt: skip
        replies = await asyncio.gather(*futures, return_exceptions=True)
        acks = [(f[2], r) for f, r in zip(frames, replies, strict=True)
                if isinstance(r, api.PubAck)]
        failed = [(f, r) for f, r in zip(frames, replies, strict=True) if isinstance(r, Exception)]
        return acks, failed

    # Learner side.
    def pull(self, max_count: int) -> list[Experience]:
        """At most ``max_count`` new experiences; waits at most ``fetch_timeout_s`` when there
        are none."""
        check_count(max_count)
        if max_count == 0 or self.agents == []:
            return []
        return self._run(self._pull(max_count), "fetch")

    async def _subscription(self) -> JetStreamContext.PullSubscription:
        """The pull subscription of the durable consumer, created (or updated) on first use."""
        if self._sub is None:
            filters = ([subject(a) for a in self.agents] if self.agents is not None
                       else [f"{PREFIX}.>"])  # fmt: skip
            config = api.ConsumerConfig(
                name=self.group, durable_name=self.group, ack_policy=api.AckPolicy.EXPLICIT,
                deliver_policy=api.DeliverPolicy.ALL, ack_wait=self.ack_wait_s,
                max_ack_pending=65536, max_deliver=-1,
            )  # fmt: skip
            if len(filters) == 1:
                config.filter_subject = filters[0]
            else:
                config.filter_subjects = filters
            await self._js.add_consumer(self.stream, config)  # create, or update in place
            self._sub = await self._js.pull_subscribe_bind(self.group, self.stream)
        return self._sub

    async def _pull(self, max_count: int) -> list[Experience]:
        sub = await self._subscription()
        out: list[Experience] = []
        while self._kept and len(out) < max_count:
            out.append(self._kept.popleft())
        while len(out) < max_count:
            want = 1 if self._entry_len is None else -(-(max_count - len(out)) // self._entry_len)
            try:
                msgs = await sub.fetch(want, timeout=self.fetch_timeout_s)
            except (TimeoutError, nats.errors.TimeoutError):
                break
            for msg in msgs:
                exps = await self._accept(msg)
                room = max(0, max_count - len(out))
                out += exps[:room]
                self._kept.extend(exps[room:])
            if len(msgs) < want:  # the stream had no more: don't wait for another fetch
                break
        self._stats.pulled += len(out)
        return out

    async def _accept(self, msg: Msg) -> list[Experience]:
        """The message's valid, new experiences; else counts it and settles it."""
        item = read_entry(self.frames, msg.data)
        if item is None:
            self._stats.malformed += 1
            await msg.term()  # never redelivered
            return []
        where = msg.metadata.sequence.stream
        if where in self._held:  # redelivered while this learner still holds it
            self._held[where][0] = msg
            return []
        exps = item.experiences() if isinstance(item, ExperienceChunk) else [item]
        self._entry_len = len(exps)
        new = [exp for exp in exps if self.seen.add(exp.agent_id, exp.seq)]
        self._stats.duplicates += len(exps) - len(new)
        if not new:
            await msg.ack()
            return []
        for exp in new:
            self._inflight[(exp.agent_id, exp.seq)] = where
        self._held[where] = [msg, len(new)]
        if msg.metadata.num_delivered > 1:
            self._stats.redelivered += len(new)
        return new

    def ack(self, experiences: Sequence[Experience]) -> None:
        """Acks the messages whose returned experiences are now all acked (unknown ones are
        ignored)."""
        if experiences:
            self._run(self._ack([(e.agent_id, e.seq) for e in experiences]), "ack")

    async def _ack(self, keys: list[tuple[int, int]]) -> None:
        msgs = []
        for key in keys:
            where = self._inflight.pop(key, None)
            held = None if where is None else self._held.get(where)
            if held is None:
                continue
            held[1] -= 1
            if held[1] <= 0:
                msgs.append(self._held.pop(where)[0])
        for msg in msgs:
            await msg.ack()
        if msgs:
            await self._nc.flush(self.timeout_s)

    def consumer_state(self) -> ConsumerState:
        """What the server counts for this group's durable consumer."""
        return self._run(self._consumer_state(), "consumer info")

    async def _consumer_state(self) -> ConsumerState:
        await self._subscription()
        info = await self._js.consumer_info(self.stream, self.group)
        return ConsumerState(info.num_pending or 0, info.num_ack_pending or 0,
                             info.num_redelivered or 0)  # fmt: skip

    async def _shutdown(self) -> None:
        """Flushes what is buffered (acks, terms), then closes. Not ``drain()``: a fetch that
        timed out leaves a late status reply in the pull subscription, and drain would wait for
        it until drain_timeout."""
        try:
            await self._nc.flush(2.0)
        finally:
            await self._nc.close()

    def close(self) -> None:
        """Flushes and closes the connection and stops the loop thread; messages pulled and not
        acked are redelivered after ``ack_wait_s``. Safe to call twice."""
        if self._closed:
            return
        if getattr(self, "_nc", None) is not None and not self._nc.is_closed:
            try:
                self._run(self._shutdown(), "close", 5.0)
            except LabkitError:
                pass  # closing anyway
        self._closed = True
        self._loop.stop()


__all__ = ["ConsumerState", "NatsBuffer", "subject"]
