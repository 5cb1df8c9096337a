"""Redis Streams with a consumer group: at-least-once delivery, de-duplicated by (agent, seq).

- One stream per agent, ``lab:xs:{7}`` (Cluster hash tag: one shard per agent). ``push`` sends a
  batch of ``XADD key MAXLEN ~ capacity * f <frame>`` in one ``MULTI`` with ``XLEN`` before and
  after, so ``dropped = len_before + added - len_after`` is exactly what trimming removed.
  ``~`` trims whole stream nodes only (cheap), so a stream may hold somewhat more than
  ``capacity`` entries; the count stays exact.
- The learner reads with ``XREADGROUP GROUP group consumer COUNT n STREAMS key >``, one command
  per stream (single-key, so it also runs on ``RedisCluster``), all in one pipeline. The group
  is created at id 0 with ``MKSTREAM`` on first use (``BUSYGROUP`` ignored), so it also sees what
  agents pushed before the learner started.
- At-least-once: an entry stays pending until ``ack()`` (``XACK``). When a learner dies, its
  pending entries are taken over by another consumer with ``reclaim(min_idle_ms)``
  (``XAUTOCLAIM``) and returned by the following pulls (``redelivered``).
- De-duplication: a learner never returns the same (agent_id, seq) twice. A repeat (a producer
  that retried a push, a reclaimed entry already seen) is counted in ``duplicates``, acked and
  skipped. Malformed entries are counted, acked (else they would come back forever) and skipped.
  Nothing read from Redis is ever unpickled.
- Chunks (``labkit.buffers.chunk``): ``push_chunks`` adds one entry per chunk. The learner
  de-duplicates, returns and counts each experience of a chunk on its own; the entry is acked
  once every experience it returned was acked (those that were duplicates need none), so a
  learner that dies mid-chunk leaves the whole entry pending and ``reclaim`` redelivers it
  (its experiences already returned elsewhere are then duplicates to a learner that saw them).
  Experiences of a chunk past ``max_count`` wait, unacked, for the next pull. XREADGROUP
  counts entries: a stream is asked for as many as its share needs at the chunk length it last
  delivered (one entry while it has seen none). With ``capacity``, a chunked push keeps ``max(1, capacity // n)`` entries for
  chunks of ``n`` and counts ``n`` dropped per entry trimmed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from redis.exceptions import ResponseError

from labkit.buffers.base import RedisBuffer, SeenSeqs, check_count
from labkit.buffers.chunk import ExperienceChunk, encode_chunk, read_entry
from labkit.buffers.frame import Experience, encode
from labkit.buffers.redis_list import fair_shares
from labkit.errors import LabkitError

if TYPE_CHECKING:
    from labkit.buffers.base import RedisLike

FIELD = "f"
_CLAIM_BATCH = 100
Entry = tuple[str, bytes, Any]  # (stream key, entry id, fields)


def stream_key(namespace: str, agent_id: int) -> str:
    """``lab:xs:{7}``: the ``{7}`` hash tag puts one agent's stream on one cluster shard."""
    return f"{namespace}:xs:{{{agent_id}}}"


def _stream_entries(reply: Any) -> list[tuple[Any, Any]]:
    """The (id, fields) pairs of a one-stream XREADGROUP reply (RESP2 list or RESP3 dict)."""
    if not reply:
        return []
    if isinstance(reply, dict):
        return [entry for batches in reply.values() for batch in batches for entry in batch]
    return [entry for _, entries in reply for entry in entries]


class StreamBuffer(RedisBuffer):
    """Pushes to ``{namespace}:xs:{{agent_id}}``; reads the streams of ``agents`` as
    ``consumer`` of ``group``."""

    name = "stream"

    def __init__(
        self,
        url: str | RedisLike,
        *,
        agent_id: int,
        agents: Sequence[int] | None = None,
        capacity: int | None = None,
        group: str = "learners",
        consumer: str = "c0",
        namespace: str = "lab",
        seen_limit: int = 65536,
    ) -> None:
        super().__init__(url, agent_id=agent_id, agents=agents, capacity=capacity,
                         namespace=namespace)
        self.group = group
        self.consumer = consumer
        self.seen = SeenSeqs(seen_limit)
        self._inflight: dict[tuple[int, int], tuple[str, bytes]] = {}  # returned, not acked
        self._reclaimed: deque[Entry] = deque()  # claimed by reclaim(), not yet returned
        self._held: set[tuple[str, bytes]] = set()  # entries in either of the two above
        self._left: dict[tuple[str, bytes], int] = {}  # returned experiences not acked, per entry
        self._kept: deque[Experience] = deque()  # of a chunk, past max_count: next pull's
        self._entry_len: dict[str, int] = {}  # experiences per entry last seen, per stream
        self._groups_ready = False

    def key(self, agent_id: int) -> str:
        return stream_key(self.namespace, agent_id)

    # Producer side.
    def push(self, experiences: Sequence[Experience]) -> int:
        """One MULTI: XLEN, an XADD per experience (MAXLEN ~ capacity), XLEN: one round trip."""
        if not experiences:
            return 0
        return self._xadd([encode(exp) for exp in experiences], len(experiences), 1)

    def push_chunks(self, chunks: Sequence[ExperienceChunk]) -> int:
        """One MULTI: XLEN, an XADD per chunk, XLEN; returns the experiences accepted."""
        if not chunks:
            return 0
        return self._xadd([encode_chunk(c) for c in chunks], sum(len(c) for c in chunks),
                          max(len(c) for c in chunks))

    def _xadd(self, frames: list[bytes], count: int, per_entry: int) -> int:
        key = self.key(self.agent_id)
        bounded = self.capacity is not None
        keep = max(1, self.capacity // per_entry) if self.capacity is not None else None
        pipe = self.redis.pipeline(transaction=True)  # one key: a MULTI works on a cluster too
        if bounded:
            pipe.xlen(key)
        for data in frames:
            pipe.xadd(key, {FIELD: data}, maxlen=keep, approximate=True)
        if bounded:
            pipe.xlen(key)
        replies = pipe.execute()
        if bounded:
            before, after = int(replies[0]), int(replies[-1])
            self._stats.dropped += max(0, before + len(frames) - after) * per_entry
        self._stats.pushed += count
        return count

    # Learner side.
    def pull(self, max_count: int) -> list[Experience]:
        """Kept and reclaimed experiences first, then new ones: a fair share per stream."""
        check_count(max_count)
        out: list[Experience] = []
        done: list[tuple[str, bytes]] = []  # malformed or duplicate: ack right away
        while self._kept and len(out) < max_count:
            out.append(self._kept.popleft())
        while self._reclaimed and len(out) < max_count:
            key, entry_id, fields = self._reclaimed.popleft()
            self._held.discard((key, entry_id))
            exps = self._accept(key, entry_id, fields, done)
            self._stats.redelivered += len(exps)
            self._keep(out, exps, max_count)
        if self.agents and len(out) < max_count:
            self._read_new(max_count, out, done)
        self._xack(done)
        self._stats.pulled += len(out)
        return out

    def _keep(self, out: list[Experience], exps: list[Experience], max_count: int) -> None:
        """Appends ``exps`` to ``out`` up to ``max_count``; the rest wait for the next pull."""
        room = max(0, max_count - len(out))
        out += exps[:room]
        self._kept.extend(exps[room:])

    def _read_new(self, max_count: int, out: list[Experience], done: list) -> None:
        self._ensure_groups()
        start = self._turn % len(self.agents)
        self._turn += 1
        candidates = self.agents[start:] + self.agents[:start]
        regroup = missing = False  # groups are recreated at most once per pull
        error: Exception | None = None
        while candidates and len(out) < max_count:
            shares = fair_shares(max_count - len(out), len(candidates))
            asked = [(agent, 1 if (size := self._entry_len.get(self.key(agent))) is None
                      else -(-n // size))
                     for agent, n in zip(candidates, shares, strict=True) if n > 0]
            pipe = self.redis.pipeline(transaction=False)
            for agent, n in asked:
                pipe.xreadgroup(self.group, self.consumer, {self.key(agent): ">"}, count=n)
            replies = pipe.execute(raise_on_error=False)
            unasked = [agent for agent, n in zip(candidates, shares, strict=True) if n == 0]
            full = []  # gave all they were asked: maybe more left
            for (agent, n), reply in zip(asked, replies, strict=True):
                if isinstance(reply, ResponseError) and "NOGROUP" in str(reply) and not regroup:
                    missing = True  # the stream was deleted since: recreate its group, retry
                    full.append(agent)
                    continue
                if isinstance(reply, Exception):
                    error = error or reply
                    continue
                entries = _stream_entries(reply)
                for entry_id, fields in entries:
                    self._keep(out, self._accept(self.key(agent), entry_id, fields, done),
                               max_count)
                if len(entries) == n:
                    full.append(agent)
            if error is not None:
                raise error  # after keeping what the other streams delivered
            if missing:
                self._groups_ready, regroup, missing = False, True, False
                self._ensure_groups()
            candidates = unasked + full

    def _accept(self, key: str, entry_id: bytes, fields: Any, done: list) -> list[Experience]:
        """The entry's valid, new experiences; counts the rest and queues the entry's ack when
        none of them is new."""
        raw = fields.get(FIELD.encode(), fields.get(FIELD)) if isinstance(fields, dict) else None
        item = read_entry(self.frames, raw) if raw is not None else None
        if item is None:
            self._stats.malformed += 1
            done.append((key, entry_id))
            return []
        if isinstance(item, ExperienceChunk):
            self._entry_len[key] = len(item)
            exps = item.experiences()
        else:
            self._entry_len[key] = 1
            exps = [item]
        new = [exp for exp in exps if self.seen.add(exp.agent_id, exp.seq)]
        self._stats.duplicates += len(exps) - len(new)
        if not new:
            done.append((key, entry_id))
            return []
        for exp in new:
            self._inflight[(exp.agent_id, exp.seq)] = (key, entry_id)
        self._left[(key, entry_id)] = len(new)
        self._held.add((key, entry_id))
        return new

    def ack(self, experiences: Sequence[Experience]) -> None:
        """XACKs the entries whose returned experiences are now all acked (unknown experiences
        are ignored)."""
        done = []
        for exp in experiences:
            where = self._inflight.pop((exp.agent_id, exp.seq), None)
            if where is None:
                continue
            left = self._left.get(where, 1) - 1
            if left > 0:
                self._left[where] = left
                continue
            self._left.pop(where, None)
            self._held.discard(where)
            done.append(where)
        self._xack(done)

    def reclaim(self, min_idle_ms: int) -> int:
        """Takes over entries pending longer than ``min_idle_ms`` (a consumer died before acking)
        with XAUTOCLAIM; the next pulls return them. Returns how many were claimed.

        Entries this buffer already holds are left alone. Entries trimmed away before anyone
        acked them are gone (counted in ``dropped`` by their producer): they are acked here so
        they leave the pending list."""
        if min_idle_ms < 0:
            raise LabkitError(f"min_idle_ms must be >= 0, got {min_idle_ms}")
        self._ensure_groups()
        claimed = 0
        for agent in self.agents:
            key = self.key(agent)
            cursor: Any = "0-0"
            deleted = False
            while True:
                reply = self.redis.xautoclaim(key, self.group, self.consumer, min_idle_ms,
                                              start_id=cursor, count=_CLAIM_BATCH)  # fmt: skip
                cursor, entries = reply[0], reply[1]
                for entry_id, fields in entries:
                    if entry_id is None or fields is None:  # Redis 6.2: a trimmed entry
                        deleted = True
                    elif (key, entry_id) not in self._held:
                        self._reclaimed.append((key, entry_id, fields))
                        self._held.add((key, entry_id))
                        claimed += 1
                if cursor in (b"0-0", "0-0"):
                    break
            if deleted:
                self._ack_deleted(key)
        return claimed

    def _ack_deleted(self, key: str) -> None:
        """XACKs this consumer's pending entries that no longer exist in the stream.

        Redis 6.2's XAUTOCLAIM returns a trimmed entry as nil, without its id, and leaves it
        pending (Redis 7 drops it from the pending list itself): find them with XPENDING."""
        start = "-"
        while True:
            page = self.redis.xpending_range(key, self.group, min=start, max="+",
                                             count=_CLAIM_BATCH, consumername=self.consumer)  # fmt: skip
            ids = [p["message_id"] for p in page if (key, p["message_id"]) not in self._held]
            pipe = self.redis.pipeline(transaction=False)
            for entry_id in ids:
                pipe.xrange(key, entry_id, entry_id, count=1)
            found = pipe.execute() if ids else []
            self._xack((key, i) for i, hit in zip(ids, found, strict=True) if not hit)
            if len(page) < _CLAIM_BATCH:
                return
            last = page[-1]["message_id"]
            start = "(" + (last.decode() if isinstance(last, bytes) else last)

    def pending(self) -> int:
        """How many entries of this group are delivered but not acked (all consumers)."""
        self._ensure_groups()
        pipe = self.redis.pipeline(transaction=False)
        for agent in self.agents:
            pipe.xpending(self.key(agent), self.group)
        return sum(int(info["pending"]) for info in pipe.execute())

    def _ensure_groups(self) -> None:
        """XGROUP CREATE ... 0 MKSTREAM for every stream read, once; BUSYGROUP is fine."""
        if self._groups_ready:
            return
        pipe = self.redis.pipeline(transaction=False)
        for agent in self.agents:
            pipe.xgroup_create(self.key(agent), self.group, id="0", mkstream=True)
        for reply in pipe.execute(raise_on_error=False):
            if isinstance(reply, Exception) and "BUSYGROUP" not in str(reply):
                raise reply
        self._groups_ready = True

    def _xack(self, entries: Iterable[tuple[str, bytes]]) -> None:
        by_key: dict[str, list[bytes]] = {}
        for key, entry_id in entries:
            by_key.setdefault(key, []).append(entry_id)
        if not by_key:
            return
        pipe = self.redis.pipeline(transaction=False)
        for key, ids in by_key.items():
            pipe.xack(key, self.group, *ids)
        pipe.execute()

    def close(self) -> None:
        """Closes the connection; entries pulled and not acked stay pending for ``reclaim``."""
        super().close()


__all__ = ["FIELD", "SeenSeqs", "StreamBuffer", "stream_key"]
