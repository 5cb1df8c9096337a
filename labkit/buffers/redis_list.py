"""Redis lists done right: batched, typed frames, bounded, fair; delivery is at-most-once.

What changes from the guide's buffer:

- ``push`` sends a whole batch as one multi-value ``RPUSH key f1 f2 ...`` (one round trip), with
  ``LTRIM key -capacity -1`` in the same ``MULTI`` when ``capacity`` is set: overflow drops the
  *oldest*, and ``dropped`` counts ``max(0, new_len - capacity)`` from RPUSH's reply (exact,
  since both run in one transaction on one key).
- Frames (``labkit.buffers.frame``) keep dtype, shape, agent id, seq, policy version and time.
  Reading never unpickles anything: a malformed entry is counted and skipped, never raised.
- ``pull`` pops ``LPOP key count`` (Redis >= 6.2) from every agent's key in one pipeline,
  a fair share of ``max_count`` each (the remainder rotates between pulls), and tops up from
  agents that still have data.
- Keys carry a Redis Cluster hash tag, ``lab:exp:{7}``: an agent's list lives on one shard.
  Every command touches one key, so the same code runs on ``redis.cluster.RedisCluster``.

- Chunks (``labkit.buffers.chunk``): ``push_chunks`` sends several chunk frames (N experiences
  each, stacked tensors) in one ``RPUSH``; ``pull_chunks(max_items)`` returns chunks, decoded
  without a Python loop per experience (views of the reply, see ``chunk``); ``pull`` keeps
  returning ``Experience`` objects from either kind of entry. ``LPOP count`` counts entries,
  so the learner asks each agent for as many entries as its share needs at the chunk length it
  last saw, and keeps the rows past ``max_items`` of the last chunk for the next pull.

At-most-once: LPOP removes an entry before the learner used it; a learner that dies mid-batch
loses that batch (and the rows it kept for the next pull). ``ack`` is a no-op. The stream
buffer is the at-least-once alternative.

``capacity`` counts experiences. A chunked push trims whole chunks: it keeps
``max(1, capacity // n)`` entries for chunks of ``n``, and counts ``n`` dropped per chunk
trimmed, exact when an agent pushes chunks of one length (as agents do).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from itertools import zip_longest
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from labkit.buffers.base import RedisBuffer, check_count
from labkit.buffers.chunk import ExperienceChunk, as_chunks, encode_chunk, read_entry
from labkit.buffers.frame import Experience, encode

if TYPE_CHECKING:
    from labkit.buffers.base import RedisLike

Item = Experience | ExperienceChunk


def list_key(namespace: str, agent_id: int) -> str:
    """``lab:exp:{7}``: the ``{7}`` hash tag puts one agent's list on one cluster shard."""
    return f"{namespace}:exp:{{{agent_id}}}"


def fair_shares(budget: int, parts: int) -> list[int]:
    """``budget`` split over ``parts`` as evenly as possible, the larger shares first."""
    base, extra = divmod(budget, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


class ListBuffer(RedisBuffer):
    """Pushes to ``{namespace}:exp:{{agent_id}}``; pulls from the keys of ``agents``."""

    name = "list"
    chunked: ClassVar[bool] = True

    def __init__(
        self,
        url: str | RedisLike,
        *,
        agent_id: int,
        agents: Sequence[int] | None = None,
        capacity: int | None = None,
        namespace: str = "lab",
    ) -> None:
        super().__init__(url, agent_id=agent_id, agents=agents, capacity=capacity,
                         namespace=namespace)
        self._kept: deque[Item] = deque()  # popped past a pull's max: returned first next time
        self._entry_len: dict[int, int] = {}  # experiences per entry last seen, per agent

    def key(self, agent_id: int) -> str:
        return list_key(self.namespace, agent_id)

    def push(self, experiences: Sequence[Experience]) -> int:
        """One ``RPUSH`` of the whole batch (+ ``LTRIM`` when bounded): one round trip."""
        if not experiences:
            return 0
        return self._rpush([encode(exp) for exp in experiences], len(experiences), 1)

    def push_chunks(self, chunks: Sequence[ExperienceChunk]) -> int:
        """One ``RPUSH`` of one frame per chunk (+ ``LTRIM`` when bounded); returns how many
        experiences were accepted."""
        if not chunks:
            return 0
        count = sum(len(chunk) for chunk in chunks)
        return self._rpush([encode_chunk(chunk) for chunk in chunks], count,
                           max(len(chunk) for chunk in chunks))

    def _rpush(self, frames: list[bytes], count: int, per_entry: int) -> int:
        key = self.key(self.agent_id)
        pipe = self.redis.pipeline(transaction=True)  # one key: a MULTI works on a cluster too
        pipe.rpush(key, *frames)
        keep = None if self.capacity is None else max(1, self.capacity // per_entry)
        if keep is not None:
            pipe.ltrim(key, -keep, -1)
        new_len = pipe.execute()[0]
        if keep is not None:
            self._stats.dropped += max(0, int(new_len) - keep) * per_entry
        self._stats.pushed += count
        return count

    def pull(self, max_count: int) -> list[Experience]:
        """Up to ``max_count`` experiences, a fair share from each agent, one pipeline a round.
        Their tensors are writable: a chunk's are copied once, not per experience."""
        out: list[Experience] = []
        for item in self._pull(max_count, copy=True):
            if isinstance(item, ExperienceChunk):
                out += item.experiences()
            else:
                out.append(item)
        return out

    def pull_chunks(self, max_items: int, *, copy: bool = False) -> list[ExperienceChunk]:
        """Up to ``max_items`` experiences as chunks (version 1 entries stacked into chunks).
        ``copy=False``: tensors are read-only views of the replies (``labkit.buffers.chunk``);
        ``copy=True``: one copy per chunk."""
        return as_chunks(self._pull(max_items, copy=copy))

    def _pull(self, max_count: int, *, copy: bool) -> list[Item]:
        check_count(max_count)
        out: list[Item] = []
        got = self._take_kept(max_count, out, copy)
        if not self.agents:
            self._stats.pulled += got
            return out
        start = self._turn % len(self.agents)
        self._turn += 1
        candidates = self.agents[start:] + self.agents[:start]
        while candidates and got < max_count:
            shares = fair_shares(max_count - got, len(candidates))
            asked = [(agent, self._entries(agent, n))
                     for agent, n in zip(candidates, shares, strict=True) if n > 0]
            pipe = self.redis.pipeline(transaction=False)
            for agent, entries in asked:
                pipe.lpop(self.key(agent), entries)
            replies = pipe.execute()
            unasked = [agent for agent, n in zip(candidates, shares, strict=True) if n == 0]
            full = []  # gave all they were asked: maybe more left
            decoded: list[list[Item]] = []
            for (agent, entries), raws in zip(asked, replies, strict=True):
                raws = raws or []
                items = [item for raw in raws
                         if (item := read_entry(self.frames, raw, copy=copy)) is not None]
                if items:
                    last = items[-1]
                    self._entry_len[agent] = len(last) if isinstance(last, ExperienceChunk) else 1
                decoded.append(items)
                if len(raws) == entries:
                    full.append(agent)
            for row in zip_longest(*decoded):  # an entry from each agent in turn: a chunk
                for item in row:  # bigger than guessed is cut, not the others' share
                    if item is not None:
                        got = self._place(item, got, max_count, out)
            candidates = full + unasked
        self._stats.pulled += got
        self._stats.malformed = self.frames.malformed
        return out

    def _entries(self, agent: int, share: int) -> int:
        """How many entries to pop for ``share`` experiences at this agent's entry length last
        seen (1 before any: what is popped past ``max_count`` is kept for the next pull)."""
        return -(-share // self._entry_len.get(agent, 1))

    def _place(self, item: Item, got: int, max_count: int, out: list[Item]) -> int:
        """Adds ``item`` to ``out`` up to ``max_count`` experiences, keeps the rest."""
        size = len(item) if isinstance(item, ExperienceChunk) else 1
        if got + size <= max_count:
            out.append(item)
        elif got < max_count:  # only a chunk is bigger than what is left
            out.append(item.take(slice(0, max_count - got)))
            self._kept.append(item.take(slice(max_count - got, None)))
        else:
            self._kept.append(item)
        return min(max_count, got + size)

    def _take_kept(self, max_count: int, out: list[Item], copy: bool) -> int:
        got = 0
        while self._kept and got < max_count:
            item = self._kept.popleft()
            size = len(item) if isinstance(item, ExperienceChunk) else 1
            if got + size > max_count:
                self._kept.appendleft(item.take(slice(max_count - got, None)))
                item = item.take(slice(0, max_count - got))
                size = max_count - got
            if copy and isinstance(item, ExperienceChunk) and not item.seqs.flags.writeable:
                item = item.take(np.arange(size))  # kept as views of a reply: copied once here
            out.append(item)
            got += size
        return got


__all__ = ["ListBuffer", "fair_shares", "list_key"]
