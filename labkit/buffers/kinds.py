"""The buffer kinds behind one interface, and ``open_buffer``, which opens one by name (each
kind's module is imported when it is opened: NATS needs nothing of Redis, and the reverse)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from labkit.buffers.base import ExperienceBuffer
from labkit.errors import LabkitError

if TYPE_CHECKING:
    from labkit.buffers.base import RedisLike

KINDS = ("guide", "list", "stream", "nats")


def open_buffer(
    kind: str,
    url: str | RedisLike,
    *,
    agent_id: int,
    agents: list[int] | None = None,
    capacity: int | None = None,
    group: str = "learners",
    consumer: str = "c0",
    namespace: str = "lab",
) -> ExperienceBuffer:
    """The buffer of ``kind`` ("guide", "list", "stream", "nats") on the server at ``url``
    (a redis:// URL or client for the first three, a nats:// URL for "nats").

    ``agent_id`` is where this process pushes; ``agents`` are the agents a learner pulls from
    (default: just ``agent_id``). ``capacity`` bounds each agent's backlog (None: unbounded).
    ``group``/``consumer`` name the stream consumer; ``namespace`` prefixes the keys.

    "guide" ignores ``capacity``, ``group``, ``consumer`` and ``namespace`` (the guide has none):
    it gets ``cluster_size = max(agents) + 1`` and ``rank = agent_id``, the case where rank and
    agent id agree.
    """
    members = list(agents) if agents is not None else [agent_id]
    common: dict[str, Any] = {"agent_id": agent_id}
    if kind == "guide":
        from labkit.buffers.guide import GuideBuffer

        size = max([*members, agent_id]) + 1
        return GuideBuffer(url, cluster_size=size, rank=agent_id, **common)
    if kind == "list":
        from labkit.buffers.redis_list import ListBuffer

        return ListBuffer(url, agents=members, capacity=capacity, namespace=namespace, **common)
    if kind == "stream":
        from labkit.buffers.redis_stream import StreamBuffer

        return StreamBuffer(url, agents=members, capacity=capacity, group=group,
                            consumer=consumer, namespace=namespace, **common)  # fmt: skip
    if kind == "nats":
        from labkit.buffers.nats_js import NatsBuffer

        return NatsBuffer(url, agents=members, capacity=capacity, group=group, **common)
    raise LabkitError(f"unknown buffer kind {kind!r}: choose one of {', '.join(KINDS)}")
