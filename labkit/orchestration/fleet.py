"""The fleet as the control plane sees it: every agent's state, step and last beat, ``dead`` for
one whose heartbeat expired, as a table or JSON.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from labkit.errors import ParameterError, ServiceError
from labkit.services.base import redact
from labkit.services.redis_server import REDIS_URL_ENV

if TYPE_CHECKING:
    pass
from labkit.orchestration.control import (
    DEAD,
    STANDARD_FIELDS,
    STATES,
    STATUS_TIMEOUT_S,
    _check_name,
    _client,
    _describe,
    _key,
)


@dataclass
class AgentStatus:
    """One agent as :func:`fleet_status` sees it. ``state`` is ``dead`` when its heartbeat
    expired; then the other fields are from its last beat and ``last_state`` says what it
    was doing. ``age_s``: seconds since its last beat (None if never recorded)."""

    name: str
    state: str
    age_s: float | None
    pid: int | None = None
    host: str | None = None
    node: int | None = None
    rank: int | None = None
    step: int | None = None
    last_state: str | None = None
    extra: dict[str, str] = field(default_factory=dict)  # the agent's Heartbeat(extra=...)

    @property
    def alive(self) -> bool:
        """Starting, running or draining (not left, not dead)."""
        return self.state not in ("left", DEAD)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _int(value: object) -> int | None:
    try:
        return int(str(value))
    except ValueError:
        return None


def _float(value: object) -> float | None:
    try:
        return float(str(value))
    except ValueError:
        return None


def fleet_status(url: str, job: str, *, timeout_s: float = STATUS_TIMEOUT_S) -> list[AgentStatus]:
    """Every agent that ever beat for ``job``, sorted by name; ServiceError if Redis is
    unreachable. Ages of live agents come from the key's remaining TTL (Redis's clock); those of
    dead and departed ones from ``last_seen`` (the agent's clock) against Redis's ``TIME``."""
    import redis

    _check_name("job", job)
    client = _client(url, timeout_s)
    try:
        pipe = client.pipeline(transaction=False)
        pipe.time()
        pipe.smembers(_key(job, "members"))
        pipe.hgetall(_key(job, "last_seen"))
        pipe.hgetall(_key(job, "last"))
        (secs, usecs), members, seen, last = pipe.execute()
        names = sorted(members)
        pipe = client.pipeline(transaction=True)  # each hash with its own TTL, atomically
        for name in names:
            pipe.hgetall(_key(job, "agent", name))
            pipe.pttl(_key(job, "agent", name))
        replies = pipe.execute() if names else []
    except redis.RedisError as exc:
        raise ServiceError(
            f"Redis at {redact(url)} is unreachable or failed ({_describe(exc, url)}); start "
            f"one with labkit.services.redis_server.RedisServer() or set {REDIS_URL_ENV} to a running Redis"
        ) from None
    finally:
        client.close()
    now = secs + usecs / 1e6
    statuses = []
    for index, name in enumerate(names):
        fields, pttl = replies[2 * index], replies[2 * index + 1]
        seen_at = _float(seen.get(name, ""))
        age = None if seen_at is None else max(0.0, now - seen_at)
        if fields:
            ttl_ms = _int(fields.get("ttl_ms", ""))
            if pttl >= 0 and ttl_ms is not None:
                age = max(0.0, (ttl_ms - pttl) / 1000)
            state, info, last_state = fields.get("state", "?"), fields, None
        else:
            try:
                info = json.loads(last.get(name) or "{}")
            except ValueError:
                info = {}
            state, last_state = DEAD, info.get("state")
        statuses.append(AgentStatus(
            name=name, state=state, age_s=age, pid=_int(info.get("pid", "")),
            host=info.get("host") or None, node=_int(info.get("node", "")),
            rank=_int(info.get("rank", "")), step=_int(info.get("step", "")),
            last_state=last_state,
            extra={k: str(v) for k, v in info.items() if k not in STANDARD_FIELDS}))
    return statuses


def format_fleet(statuses: Sequence[AgentStatus]) -> str:
    """A plain text table, one agent a line, with a count by state at the end."""
    if not statuses:
        return "no agents"

    def cell(value: object) -> str:
        return "-" if value is None else str(value)

    rows = [("NAME", "STATE", "AGE", "STEP", "NODE", "RANK", "PID", "HOST")]
    for s in statuses:
        state = s.state if s.last_state is None else f"{s.state} (was {s.last_state})"
        age = "-" if s.age_s is None else f"{s.age_s:.1f}s"
        rows.append((s.name, state, age, cell(s.step), cell(s.node), cell(s.rank),
                     cell(s.pid), cell(s.host)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in rows]
    counts: dict[str, int] = {}
    for s in statuses:
        counts[s.state] = counts.get(s.state, 0) + 1
    order = [*STATES, DEAD]
    summary = ", ".join(f"{counts[k]} {k}" for k in sorted(counts, key=lambda k: (
        order.index(k) if k in order else len(order), k)))
    noun = "agent" if len(statuses) == 1 else "agents"
    return "\n".join([*lines, f"{len(statuses)} {noun}: {summary}"])


def forget(url: str, job: str, *, timeout_s: float = STATUS_TIMEOUT_S) -> int:
    """Deletes every key of ``job`` (for a job that has ended: a live agent's next beat writes
    its keys again); returns how many were deleted. ServiceError if Redis is unreachable."""
    import redis

    _check_name("job", job)
    client = _client(url, timeout_s)
    try:
        keys = [_key(job, "members"), _key(job, "last_seen"), _key(job, "last")]
        keys += [_key(job, "agent", n) for n in client.smembers(_key(job, "members"))]
        keys += client.scan_iter(match=_key(job, "agent", "*"), count=1000)  # strays
        return int(client.delete(*set(keys)))
    except redis.RedisError as exc:
        raise ServiceError(
            f"Redis at {redact(url)} is unreachable or failed ({_describe(exc, url)})"
        ) from None
    finally:
        client.close()


def status_main(url: str, job: str, as_json: bool) -> int:
    """``labkit agents status``: prints the fleet as a table (or a JSON list) and returns 0;
    prints the error and returns 2 when Redis is unreachable or ``job`` is invalid."""
    try:
        statuses = fleet_status(url, job)
    except (ServiceError, ParameterError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if as_json:
        print(json.dumps([s.to_dict() for s in statuses], indent=2))
    else:
        print(format_fleet(statuses))
    return 0
