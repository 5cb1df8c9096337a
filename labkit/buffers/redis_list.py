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

At-most-once: LPOP removes an entry before the learner used it; a learner that dies mid-batch
loses that batch. ``ack`` is a no-op. The stream buffer is the at-least-once alternative.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from labkit.buffers.base import RedisBuffer, check_count
from labkit.buffers.frame import Experience, encode

if TYPE_CHECKING:
    from labkit.buffers.base import RedisLike


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

    def key(self, agent_id: int) -> str:
        return list_key(self.namespace, agent_id)

    def push(self, experiences: Sequence[Experience]) -> int:
        """One ``RPUSH`` of the whole batch (+ ``LTRIM`` when bounded): one round trip."""
        if not experiences:
            return 0
        key = self.key(self.agent_id)
        pipe = self.redis.pipeline(transaction=True)  # one key: a MULTI works on a cluster too
        pipe.rpush(key, *[encode(exp) for exp in experiences])
        if self.capacity is not None:
            pipe.ltrim(key, -self.capacity, -1)
        new_len = pipe.execute()[0]
        if self.capacity is not None:
            self._stats.dropped += max(0, int(new_len) - self.capacity)
        self._stats.pushed += len(experiences)
        return len(experiences)

    def pull(self, max_count: int) -> list[Experience]:
        """Up to ``max_count`` experiences, a fair share from each agent, one pipeline a round."""
        check_count(max_count)
        out: list[Experience] = []
        if not self.agents:
            return out
        start = self._turn % len(self.agents)
        self._turn += 1
        candidates = self.agents[start:] + self.agents[:start]
        while candidates and len(out) < max_count:
            shares = fair_shares(max_count - len(out), len(candidates))
            asked = [(agent, n) for agent, n in zip(candidates, shares, strict=True) if n > 0]
            pipe = self.redis.pipeline(transaction=False)
            for agent, n in asked:
                pipe.lpop(self.key(agent), n)
            replies = pipe.execute()
            unasked = [agent for agent, n in zip(candidates, shares, strict=True) if n == 0]
            full = []  # gave all they were asked: maybe more left
            for (agent, n), items in zip(asked, replies, strict=True):
                items = items or []
                for raw in items:
                    exp = self.frames.decode(raw)
                    if exp is not None:
                        out.append(exp)
                if len(items) == n:
                    full.append(agent)
            candidates = full + unasked
        self._stats.pulled += len(out)
        self._stats.malformed = self.frames.malformed
        return out



__all__ = ["ListBuffer", "fair_shares", "list_key"]
