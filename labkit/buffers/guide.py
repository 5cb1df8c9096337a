"""The guide's ``SharedExperienceBuffer``, reproduced faithfully: the baseline to measure against.

What it keeps from the guide, bugs included (it works, slowly, and loses data):

- **One round trip per item.** ``push`` sends one ``RPUSH buffer:{agent_id} <bytes>`` per
  experience; ``pull`` sends one ``LPOP buffer:{i}`` per other agent. The guide uses
  ``redis.asyncio``; this is the sync equivalent with the same round-trip pattern (awaiting each
  command in turn, as the guide does, costs the same round trips).
- **At most one item per other agent per pull.** The loop visits ``i in range(cluster_size)``
  once, pops one item from each, and stops at ``max_count``: a pull returns at most
  ``cluster_size - 1`` experiences, whatever the backlog.
- **rank vs agent_id.** ``push`` writes ``buffer:{agent_id}``, but ``pull`` skips
  ``i == rank``. They only agree when every process has ``rank == agent_id``. Otherwise a
  process reads its *own* experiences back (``buffer:{agent_id}`` with ``agent_id != rank``) and
  never reads the agent whose id equals its rank.
- **Raw bytes.** Only the first tensor of an experience is sent (the guide sends one tensor), as
  ``tensor.cpu().numpy().tobytes()``: no dtype, no shape, no agent id, no seq, no timestamp.
  The guide's ``pull`` returns those raw bytes. To fit the interface this class wraps them in an
  ``Experience`` with ``agent_id = seq = policy_version = -1``, ``timestamp = nan`` and one
  tensor ``"raw"`` read back with ``torch.frombuffer(..., dtype=float32)``: **this is exactly
  where information is lost** (an int64 (2, 3) tensor comes back as 12 float32 garbage values).
  Bytes whose length is not a multiple of 4 cannot be read as float32: counted as malformed.
- **No capacity, no ack.** Lists grow without bound; ``lpop`` removes the item before the
  learner used it (at-most-once): ``ack`` is a no-op.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from labkit.buffers.base import ExperienceBuffer, check_count, connect
from labkit.buffers.frame import Experience

if TYPE_CHECKING:
    from labkit.buffers.base import RedisLike

RAW = "raw"
"""The name of the one tensor a guide experience comes back with."""


class GuideBuffer(ExperienceBuffer):
    """The guide's buffer: ``buffer:{agent_id}`` lists, RPUSH/LPOP one item per round trip.

    ``rank`` stands in for the guide's ``dist.get_rank()``: pass a value different from
    ``agent_id`` to see the mix-up.
    """

    name = "guide"

    def __init__(
        self, url: str | RedisLike, *, agent_id: int, cluster_size: int, rank: int
    ) -> None:
        super().__init__()
        self.redis, self._owned = connect(url)
        self.agent_id = agent_id
        self.cluster_size = cluster_size
        self.rank = rank

    def push(self, experiences: Sequence[Experience]) -> int:
        """One ``RPUSH buffer:{agent_id}`` per experience, first tensor only, as raw bytes."""
        for exp in experiences:
            tensor = next(iter(exp.tensors.values()))
            serialized = tensor.cpu().numpy().tobytes()  # the guide: dtype and shape are gone
            self.redis.rpush(f"buffer:{self.agent_id}", serialized)
            self._stats.pushed += 1
        return len(experiences)

    def pull(self, max_count: int = 100) -> list[Experience]:
        """The guide's loop: one ``LPOP buffer:{i}`` for each ``i != rank``, stop at max_count."""
        check_count(max_count)
        experiences: list[Experience] = []
        if max_count == 0:
            return experiences
        for i in range(self.cluster_size):
            if i == self.rank:
                continue
            raw = self.redis.lpop(f"buffer:{i}")
            if raw:
                exp = self._wrap(raw)
                if exp is not None:
                    experiences.append(exp)
            if len(experiences) >= max_count:
                break
        self._stats.pulled += len(experiences)
        return experiences

    def _wrap(self, raw: bytes) -> Experience | None:
        """Raw bytes -> an Experience: everything but the bytes is unknown (-1 / nan)."""
        if len(raw) % 4:
            self._stats.malformed += 1
            return None
        data = torch.frombuffer(bytearray(raw), dtype=torch.float32)  # the guess the bytes force
        return Experience(agent_id=-1, seq=-1, policy_version=-1, timestamp=math.nan,
                          tensors={RAW: data})  # fmt: skip

    def close(self) -> None:
        if self._owned:
            self.redis.close()


__all__ = ["RAW", "GuideBuffer"]
