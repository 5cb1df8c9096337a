"""One interface for every experience buffer, so a notebook swaps implementations with one argument.

Agents ``push`` experiences, the learner ``pull``s them and ``ack``s what it has used. The buffers
differ in round trips, what survives serialization and the delivery guarantee:

- ``guide``: the guide's ``SharedExperienceBuffer``, reproduced with its bugs (the baseline);
- ``list``: Redis lists, batched, typed frames, at-most-once;
- ``stream``: Redis Streams with a consumer group, at-least-once, de-duplicated;
- ``nats``: NATS JetStream, a durable pull consumer, at-least-once, de-duplicated.
"""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

from labkit.errors import LabkitError

if TYPE_CHECKING:
    import redis
    from redis.cluster import RedisCluster

    from labkit.buffers.chunk import ExperienceChunk
    from labkit.buffers.frame import Experience

    RedisLike = redis.Redis | RedisCluster

DRAIN_LIMIT_S = 60.0  # only bounds a drain whose experiences never all arrive
REDIS_PARSER_ENV = "LABKIT_REDIS_PARSER"
"""``hiredis``, ``hiredis-reader`` or ``python``: the reply parser and command packer of the
clients the buffers open from a URL (:func:`client_options`); unset: redis-py's default."""
PARSERS = ("hiredis", "hiredis-reader", "python")
READ_SIZE = 1 << 18
"""Bytes one socket read takes in the clients the buffers open (redis-py's ``socket_read_size``,
64 KiB by default). A pull of chunk frames returns megabytes; at 64 KiB a read, a 64-experience
chunk of 1 KiB experiences (67 KB) takes two rounds through the parser's Python read loop, and
that loop, not the copy, was most of the learner's time."""


@dataclass
class BufferStats:
    """What a buffer counted since it was opened (this client's view, not the server's)."""

    pushed: int = 0
    """Experiences this client handed to Redis."""
    pulled: int = 0
    """Experiences returned to the learner by ``pull``."""
    dropped: int = 0
    """Experiences removed by capacity trimming (the oldest go first)."""
    malformed: int = 0
    """Entries read back that were not valid frames: counted and skipped, never raised."""
    duplicates: int = 0
    """Entries whose (agent_id, seq) the learner already got: acked, not returned again."""
    redelivered: int = 0
    """Experiences returned after being reclaimed from a consumer that never acked them."""


class ExperienceBuffer(ABC):
    """Agents push experiences, the learner pulls them; the subclasses are interchangeable."""

    name: ClassVar[str] = ""
    chunked: ClassVar[bool] = False
    """True where ``pull_chunks`` returns the chunks as they travelled (no re-stacking)."""

    def __init__(self) -> None:
        self._stats = BufferStats()

    @abstractmethod
    def push(self, experiences: Sequence[Experience]) -> int:
        """Sends ``experiences``; returns how many were accepted."""

    @abstractmethod
    def pull(self, max_count: int) -> list[Experience]:
        """What the learner consumes next: at most ``max_count``, maybe fewer (or none)."""

    def push_chunks(self, chunks: Sequence[ExperienceChunk]) -> int:
        """Sends chunks of experiences; returns how many experiences were accepted. This default
        pushes each chunk's experiences; the kinds that carry chunk frames override it."""
        return self.push([exp for chunk in chunks for exp in chunk.experiences()])

    def pull_chunks(self, max_items: int, *, copy: bool = False) -> list[ExperienceChunk]:
        """At most ``max_items`` experiences as chunks. This default stacks what ``pull``
        returns (runs of one layout); ``chunked`` kinds return the chunks as they came."""
        from labkit.buffers.chunk import as_chunks

        return as_chunks(self.pull(max_items))

    def ack(self, experiences: Sequence[Experience]) -> None:
        """Marks pulled experiences as done. A no-op where delivery is at-most-once."""
        return None

    def stats(self) -> BufferStats:
        """A snapshot of the counters."""
        return replace(self._stats)

    @abstractmethod
    def close(self) -> None:
        """Releases the connection (when the buffer opened it). Safe to call twice."""

    def __enter__(self) -> ExperienceBuffer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@dataclass
class Drained:
    """What :func:`drain` got back, and what ended it."""

    want: int | None
    ended: str
    """``"all"`` (got ``want``), ``"empty"`` (no ``want``: a pull came back empty) or
    ``"limit"`` (``limit_s`` passed first)."""
    seconds: float
    experiences: list[Experience] = field(default_factory=list, repr=False)

    def describe(self) -> str:
        """One sentence: how many came back, and why the drain stopped there."""
        got = len(self.experiences)
        if self.ended == "all":
            return f"all {got} came back in {self.seconds:.2f} s"
        if self.ended == "empty":
            return f"{got} came back before a pull found nothing left"
        return (f"{got} of {self.want} came back within {self.seconds:.0f} s; the rest had not "
                "arrived when the drain stopped waiting (a stalled or overloaded server)")


def drain(buffer: ExperienceBuffer, want: int | None = None, *, batch: int = 64,
          limit_s: float = DRAIN_LIMIT_S, ack: bool = True) -> Drained:
    """Pulls (and acks) until ``want`` experiences came back or, without ``want``, until a pull
    comes back empty; ``limit_s`` bounds it. With ``want`` an empty pull does not end it: a
    server may answer one pull empty while it is still delivering (a NATS fetch waits only
    ``fetch_timeout_s``), so only the count or the limit does."""
    started = time.monotonic()
    got: list[Experience] = []
    ended = "limit"
    while time.monotonic() - started < limit_s:
        if want is not None and len(got) >= want:
            ended = "all"
            break
        items = buffer.pull(batch if want is None else min(batch, want - len(got)))
        if not items:
            if want is None:
                ended = "empty"
                break
            time.sleep(0.01)  # a Redis pull answers at once: don't spin on the server
            continue
        got += items
        if ack and items:
            buffer.ack(items)
    return Drained(want, ended, time.monotonic() - started, got)


def client_options(parser: str | None = None) -> dict[str, Any]:
    """redis-py client options for ``parser`` (default: ``$LABKIT_REDIS_PARSER``; {} when unset):

    - "hiredis": hiredis's C reply parser and its command packer, redis-py's default when
      hiredis is installed. The packer copies every value into one buffer per command;
    - "hiredis-reader": hiredis's parser with redis-py's own packer, which sends values over
      6000 bytes as they are, uncopied (what large chunk frames want);
    - "python": redis-py's own parser and packer, as without hiredis.

    Every mode reads up to ``READ_SIZE`` bytes a socket read."""
    parser = parser if parser is not None else os.environ.get(REDIS_PARSER_ENV, "")
    if not parser:
        return {"socket_read_size": READ_SIZE}
    if parser not in PARSERS:
        raise LabkitError(f"redis parser {parser!r}: choose one of {', '.join(PARSERS)}")
    from redis import connection
    from redis._parsers import Encoder, _HiredisParser, _RESP2Parser

    if parser.startswith("hiredis") and not connection.HIREDIS_AVAILABLE:
        raise LabkitError("the hiredis parser needs `pip install hiredis`")
    own = connection.PythonRespSerializer(6000, Encoder("utf-8", "strict", False).encode)
    if parser == "hiredis":
        chosen = {"parser_class": _HiredisParser,
                  "command_packer": connection.HiredisRespSerializer()}
    elif parser == "hiredis-reader":
        chosen = {"parser_class": _HiredisParser, "command_packer": own}
    else:
        chosen = {"parser_class": _RESP2Parser, "command_packer": own}
    return {**chosen, "socket_read_size": READ_SIZE}


def connect(target: str | RedisLike) -> tuple[RedisLike, bool]:
    """A client for ``target`` (a URL, or a ``redis.Redis`` / ``RedisCluster`` used as is) and
    whether the buffer owns it (opened it here, so closes it). A URL's client uses the parser
    ``$LABKIT_REDIS_PARSER`` names (:func:`client_options`)."""
    if isinstance(target, str):
        import redis

        return redis.Redis.from_url(target, **client_options()), True
    return target, False


def parser_in_use(client: Any) -> str:
    """"hiredis", "hiredis-reader" or "python" (see :func:`client_options`): the reply parser
    and command packer ``client``'s connections use."""
    from redis import connection
    from redis._parsers import _HiredisParser

    kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
    chosen = kwargs.get("parser_class", connection.DefaultParser)
    packer = kwargs.get("command_packer")
    if chosen is not _HiredisParser:
        return "python"
    own = isinstance(packer, connection.PythonRespSerializer) or (
        packer is None and not connection.HIREDIS_AVAILABLE)
    return "hiredis-reader" if own else "hiredis"


def check_capacity(capacity: int | None) -> None:
    if capacity is not None and capacity < 1:
        raise LabkitError(f"capacity must be >= 1 or None (unbounded), got {capacity}")


class RedisBuffer(ExperienceBuffer):
    """What the list and stream buffers share: the connection, whose keys to read, the cap."""

    def __init__(self, url: str | RedisLike, *, agent_id: int,
                 agents: Sequence[int] | None = None, capacity: int | None = None,
                 namespace: str = "lab") -> None:
        from labkit.buffers.frame import FrameStats  # torch: only once a buffer is built

        super().__init__()
        check_capacity(capacity)
        self.redis, self._owned = connect(url)
        self.agent_id = agent_id
        self.agents = list(agents) if agents is not None else [agent_id]
        self.capacity = capacity
        self.namespace = namespace
        self.frames = FrameStats()
        self._turn = 0  # which agent gets the remainder of max_count next

    def close(self) -> None:
        if self._owned:
            self.redis.close()


def check_count(max_count: int) -> None:
    """Rejects a negative ``max_count`` with a clear message (0 is allowed: pulls nothing)."""
    if max_count < 0:
        raise LabkitError(f"max_count must be >= 0, got {max_count}")


class SeenSeqs:
    """Which (agent, seq) pairs a learner already returned, in bounded memory.

    Per agent: every seq below ``floor`` counts as seen, plus a set of seen seqs above it. Seqs
    count up from 0, so in steady state the set holds only the few that arrived out of order.
    When the set outgrows ``limit`` (a long gap), the floor jumps to its smallest member:
    the gap's seqs then count as seen, and arrive too late to be used anyway.
    """

    def __init__(self, limit: int = 65536) -> None:
        self.limit = limit
        self._floor: dict[int, int] = {}
        self._above: dict[int, set[int]] = {}

    def add(self, agent_id: int, seq: int) -> bool:
        """Records (agent_id, seq); True when it is new."""
        floor = self._floor.get(agent_id, 0)
        above = self._above.setdefault(agent_id, set())
        if seq < floor or seq in above:
            return False
        above.add(seq)
        if len(above) > self.limit:
            floor = min(above)
        while floor in above:
            above.remove(floor)
            floor += 1
        self._floor[agent_id] = floor
        return True


__all__ = ["BufferStats", "Drained", "ExperienceBuffer", "SeenSeqs", "drain"]
