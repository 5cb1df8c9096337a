"""A control plane for agents in Redis: heartbeats, states, and a view of the fleet.

Every agent process runs a :class:`Heartbeat`, a daemon thread that rewrites the agent's hash
``labkit:fleet:{job}:agent:{name}`` every ``interval_s`` seconds with a TTL of ``ttl_s``
(one MULTI/EXEC: HSET + PEXPIRE). The agent says what it is doing with its state:
``starting``, ``running``, ``draining`` or ``left``. One that stops beating (killed, its
machine gone, its process frozen) loses the hash when the TTL runs out, and
:func:`fleet_status` shows it ``dead``: a non-expiring members set and ``last_seen`` hash keep
it listed, with the age of its last beat. An agent that leaves cleanly is ``left``, not dead
(its last hash is kept without a TTL).

How soon a dead agent shows (:func:`dead_after_s`): Redis expires a key on every access to it
(and in the background), with 1 ms resolution, so no read returns the hash later than ``ttl_s``
after the last beat that reached Redis. The last beat comes before the agent stops, so it is
shown dead at most ``ttl_s`` after it stopped (plus one poll period of whoever watches), and,
while it beat on time, not sooner than ``ttl_s - interval_s`` after it stopped.

A heartbeat thread proves that the *process* lives, not that it progresses: a main thread stuck
in a collective that releases the GIL keeps beating. Watch ``step`` for progress.

Command line (the Redis URL comes from ``$LABKIT_CONTROL_REDIS_URL`` or ``$REDIS_URL`` when
``--redis`` is left out; URLs in argv are visible to ``ps``)::

    python -m labkit.orchestration.control agent --job J --name N [--ttl-s 3 --interval-s 1 --steps K --step-s S]
    python -m labkit.orchestration.control status --job J [--json]

Values in Redis are strings and JSON; nothing is pickled.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import IO, TYPE_CHECKING, Any

from labkit.errors import LaunchError, ParameterError, ServiceError
from labkit.services.servers import REDIS_URL_ENV, parent_death_signal, redact, scrub_secrets

if TYPE_CHECKING:
    import redis

PREFIX = "labkit:fleet"
STATES = ("starting", "running", "draining", "left")
"""The states an agent sets itself; ``dead`` is only ever computed by :func:`fleet_status`."""
DEAD = "dead"
URL_ENV = "LABKIT_CONTROL_REDIS_URL"
"""How :func:`spawn_agent` hands the Redis URL to an agent (the environment, not argv)."""
JOB_ENV = "LABKIT_CONTROL_JOB"
"""Set in every agent :func:`spawn_agent` starts, so leftover processes can be found."""
STATUS_TIMEOUT_S = 2.0
DRAIN_S = 0.2
STOP_GRACE_S = 10.0  # SIGTERMed agents leave within a second; SIGKILL only one that hangs
_NAME = re.compile(r"^[A-Za-z0-9_.@-]{1,128}$")  # no ':' or glob characters in keys


# --------------------------------------------------------------------------------------------
# Keys, checks, connecting


def _key(job: str, *parts: str) -> str:
    return ":".join((PREFIX, job, *parts))


def _check_name(what: str, value: object) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise ParameterError(
            f"{what} must be 1-128 letters, digits or '_.@-', got {value!r}"
        )
    return value


def _check_seconds(what: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ParameterError(f"{what} must be a finite number of seconds, got {value!r}")
    if value <= 0:
        raise ParameterError(f"{what} must be > 0 s, got {value}")
    return float(value)


def _check_timing(ttl_s: object, interval_s: object) -> tuple[float, float]:
    ttl, interval = _check_seconds("ttl_s", ttl_s), _check_seconds("interval_s", interval_s)
    if ttl <= interval:
        raise ParameterError(
            f"ttl_s ({ttl:g} s) must exceed interval_s ({interval:g} s): otherwise the key "
            "expires between two beats and a live agent shows as dead; use ttl_s >= 2-3x "
            "interval_s to survive a late beat"
        )
    return ttl, interval


def _check_state(state: object) -> str:
    if state not in STATES:
        raise ParameterError(
            f"state must be one of {', '.join(STATES)}, got {state!r} "
            f"({DEAD!r} is computed from a missing heartbeat, never set)"
        )
    return str(state)


def _client(url: str, timeout_s: float) -> redis.Redis:
    """A client with short timeouts and no retries: a dead server fails fast."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    try:
        return redis.Redis.from_url(url, socket_timeout=timeout_s,
                                    socket_connect_timeout=timeout_s,
                                    retry=Retry(NoBackoff(), 0), decode_responses=True)
    except ValueError as exc:
        raise ServiceError(f"not a Redis URL: {redact(url)} ({scrub_secrets(str(exc), url)})") from None


def _describe(exc: BaseException, url: str) -> str:
    return scrub_secrets(f"{type(exc).__name__}: {exc}", url)


def dead_after_s(ttl_s: float, poll_s: float = 0.0) -> float:
    """The longest an agent that stopped beating is still shown alive: ``ttl_s`` after its
    last beat (Redis never returns an expired key), plus ``poll_s`` for a watcher polling
    every ``poll_s``. Measured from the moment it stopped, the delay is at most this, and at
    least ``ttl_s - interval_s`` while its beats were on time."""
    return _check_seconds("ttl_s", ttl_s) + (float(poll_s) if poll_s else 0.0)


# --------------------------------------------------------------------------------------------
# The agent's side


class Heartbeat:
    """Publishes one agent's state to Redis every ``interval_s`` with a TTL of ``ttl_s``.

    ``with Heartbeat(url, job, name) as hb: hb.set_state("running", step=0) ...``. Redis
    errors never reach the caller: the thread keeps retrying and :attr:`last_error` says what
    failed last (None after a beat that worked); a malformed URL is a ServiceError at once.
    Call it from normal code, not from a signal handler (set a flag there and act on it in the
    main loop).
    """

    def __init__(self, url: str, job: str, name: str, *, ttl_s: float = 3.0,
                 interval_s: float = 1.0, node: int | None = None,
                 rank: int | None = None) -> None:
        self.job, self.name = _check_name("job", job), _check_name("name", name)
        self.ttl_s, self.interval_s = _check_timing(ttl_s, interval_s)
        self.node, self.rank = node, rank
        self.url = url
        self.last_error: str | None = None
        """The last failed beat's error (URL password removed), None once a beat works."""
        self.beats = 0
        """Beats that reached Redis."""
        self.failed_beats = 0
        self._last_ok: float | None = None  # time.monotonic() of the last beat that worked
        self._longest_gap_s = 0.0
        self._state, self._step, self._since = "starting", None, time.time()
        self._timeout_s = min(2.0, max(0.25, self.interval_s))
        self._client = _client(url, self._timeout_s)
        self._lock = threading.Lock()  # one beat at a time, so beats land in order
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._left = False
        self._host = socket.gethostname()

    @property
    def state(self) -> str:
        return self._state

    @property
    def step(self) -> int | None:
        return self._step

    @property
    def longest_gap_s(self) -> float:
        """The longest this agent went without a beat reaching Redis, the current silence
        included. Above ``ttl_s - interval_s`` a reader may have seen it dead: a beat came late
        (a busy machine, a pause), not a dead agent."""
        if self._last_ok is None or self._left:
            return self._longest_gap_s
        return max(self._longest_gap_s, time.monotonic() - self._last_ok)

    def start(self) -> Heartbeat:
        """Beats once with state ``starting`` and starts the daemon thread; returns self.
        No-op while running; after :meth:`leave`, rejoins."""
        if self._thread is not None and self._thread.is_alive():
            return self
        self._left = False
        self._stop.clear()
        self._set("starting", None)
        self._beat()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"labkit-heartbeat-{self.name}")
        self._thread.start()
        return self

    def set_state(self, state: str, step: int | None = None) -> bool:
        """Sets ``state`` (and ``step`` when given) and beats now; True if Redis got it.
        ParameterError for an unknown state or after :meth:`leave` (use :meth:`start`)."""
        _check_state(state)
        if self._left:
            raise ParameterError(f"agent {self.name!r} has left; call start() to rejoin")
        if state == "left":
            return self.leave()
        self._set(state, step)
        return self._beat()

    def set_step(self, step: int) -> None:
        """Records progress for the next periodic beat (no round trip)."""
        self._step = step

    def leave(self) -> bool:
        """Stops the thread and beats a last time with state ``left`` and no TTL, so the agent
        shows as departed, not dead; True if Redis got it. Safe to call twice."""
        if self._left:
            return True
        self._left = True
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(2 * self._timeout_s + self.interval_s)
        self._set("left", None)
        ok = self._beat(final=True)
        self._client.close()
        return ok

    def __enter__(self) -> Heartbeat:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.leave()

    # Internals.
    def _set(self, state: str, step: int | None) -> None:
        if state != self._state:
            self._since = time.time()
        self._state = state
        if step is not None:
            self._step = step

    def _fields(self) -> dict[str, str]:
        def text(value: object) -> str:
            return "" if value is None else str(value)

        return {"state": self._state, "pid": str(os.getpid()), "host": self._host,
                "node": text(self.node), "rank": text(self.rank), "step": text(self._step),
                "since": repr(self._since), "ts": repr(time.time()),
                "ttl_ms": str(round(self.ttl_s * 1000))}

    def _beat(self, *, final: bool = False, periodic: bool = False) -> bool:
        with self._lock:
            if periodic and self._stop.is_set():
                return False  # leave() beats last; a late periodic beat must not undo it
            fields = self._fields()
            agent = _key(self.job, "agent", self.name)
            try:
                pipe = self._client.pipeline(transaction=True)
                pipe.hset(agent, mapping=fields)
                if final:
                    pipe.persist(agent)
                else:
                    pipe.pexpire(agent, round(self.ttl_s * 1000))
                pipe.sadd(_key(self.job, "members"), self.name)
                pipe.hset(_key(self.job, "last_seen"), self.name, fields["ts"])
                pipe.hset(_key(self.job, "last"), self.name, json.dumps(fields))
                pipe.execute()
            except Exception as exc:  # noqa: BLE001 (a heartbeat never raises into the agent)
                self.failed_beats += 1
                self.last_error = _describe(exc, self.url)
                return False
            self.beats += 1
            self.last_error = None
            now = time.monotonic()
            if self._last_ok is not None:
                self._longest_gap_s = max(self._longest_gap_s, now - self._last_ok)
            self._last_ok = now
            return True

    def _run(self) -> None:
        due = time.monotonic() + self.interval_s
        while not self._stop.wait(max(0.0, due - time.monotonic())):
            self._beat(periodic=True)
            due = max(due + self.interval_s, time.monotonic())


# --------------------------------------------------------------------------------------------
# The fleet


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
            f"one with labkit.services.servers.RedisServer() or set {REDIS_URL_ENV} to a running Redis"
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
            last_state=last_state))
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


# --------------------------------------------------------------------------------------------
# Agent processes


def spawn_agent(url: str, job: str, name: str, *, ttl_s: float = 3.0, interval_s: float = 1.0,
                step_s: float = 0.1, steps: int | None = None,
                stderr: IO[Any] | int | None = None) -> subprocess.Popen[bytes]:
    """Starts ``python -m labkit.orchestration.control agent`` in its own session (Ctrl-C in a terminal does
    not reach it; it gets SIGTERM if this thread's process dies). The URL goes in the
    environment, not argv. The caller kills and reaps it."""
    _check_name("job", job)
    _check_name("name", name)
    _check_timing(ttl_s, interval_s)
    argv = [sys.executable, "-m", "labkit.orchestration.control", "agent", "--job", job, "--name", name,
            "--ttl-s", repr(float(ttl_s)), "--interval-s", repr(float(interval_s)),
            "--step-s", repr(_check_seconds("step_s", step_s))]
    if steps is not None:
        argv += ["--steps", str(int(steps))]
    env = {**os.environ, URL_ENV: url, JOB_ENV: job, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=stderr,
                            start_new_session=True, preexec_fn=parent_death_signal())


def agent_main(url: str, job: str, name: str, *, ttl_s: float = 3.0, interval_s: float = 1.0,
               steps: int | None = None, step_s: float = 0.1, drain_s: float = DRAIN_S,
               node: int | None = None, rank: int | None = None) -> int:
    """A toy agent: ``starting``, then ``running`` with ``step`` + 1 every ``step_s``; on
    SIGTERM/SIGINT (or after ``steps`` steps) ``draining`` for ``drain_s``, then ``left``.
    Returns 0."""
    if isinstance(drain_s, bool) or not isinstance(drain_s, int | float) or not drain_s >= 0:
        raise ParameterError(f"drain_s must be >= 0 s, got {drain_s!r}")
    hb = Heartbeat(url, job, name, ttl_s=ttl_s, interval_s=interval_s, node=node, rank=rank)
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()  # only a flag: the main loop drains and leaves

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    hb.start()
    step = 0
    if not stop.is_set():
        hb.set_state("running", step=step)
    while not stop.wait(step_s):
        if steps is not None and step >= steps:
            break
        step += 1
        hb.set_step(step)
    hb.set_state("draining", step=step)
    time.sleep(drain_s)
    hb.leave()
    return 0


# --------------------------------------------------------------------------------------------
# Measuring detection


@dataclass
class DetectionResult:
    """What :func:`measure_detection` saw. Times in seconds, measured by the watcher."""

    ttl_s: float
    interval_s: float
    poll_s: float
    killed: str
    """The agent that got SIGKILL."""
    detection_s: float
    """From the SIGKILL to the end of the first status read that showed it dead."""
    silent_at_kill_s: float
    """How long it had not beaten when killed (its age when found dead minus detection_s):
    detection_s is about ttl_s minus this, plus up to one poll."""
    terminated: str
    """The agent that got SIGTERM."""
    left_s: float
    """From the SIGTERM to the first status that showed it ``left`` (includes its drain)."""
    terminated_exit_code: int
    bound_s: float
    """:func:`dead_after_s` (ttl_s + poll_s): detection_s should not exceed it by more than
    the time one status read takes."""
    statuses: list[AgentStatus] = field(default_factory=list)
    """The fleet after both were seen (the other agents still running)."""
    alive_read_s: float = 0.0
    """When (after the SIGKILL) the last read that still showed it alive began: its hash
    expired between then and ``detection_s``. A detection past ``bound_s`` with this below
    ``ttl_s`` expired in time and was *seen* late: the watcher's reads ran late (a busy
    machine), not Redis."""

    @property
    def read_window_s(self) -> float:
        """From the start of the last read that saw it alive to the end of the one that saw
        it dead: ``poll_s`` plus two reads when the watcher keeps its pace."""
        return self.detection_s - self.alive_read_s

    def explain(self) -> str | None:
        """Why this detection fell outside [``ttl_s - interval_s``, ``bound_s``], in words
        from what was measured; None when it fell inside."""
        early = self.ttl_s - self.interval_s
        if self.detection_s < early:
            return (f"its last beat came {self.silent_at_kill_s:.2f} s before the kill, "
                    f"{self.silent_at_kill_s - self.interval_s:.2f} s later than its "
                    f"{self.interval_s:g} s interval: a late beat (a busy machine), so less "
                    "TTL was left")
        if self.detection_s <= self.bound_s:
            return None
        if self.alive_read_s < self.ttl_s:
            return (f"its hash expired between {self.alive_read_s:.2f} s and "
                    f"{self.detection_s:.2f} s after the kill, within the TTL; the watcher's "
                    f"reads took {self.read_window_s:.2f} s against a {self.poll_s:g} s poll "
                    "(a busy machine) and saw it late")
        return (f"a read {self.alive_read_s:.2f} s after the kill still saw it alive: a beat "
                "was still on its way to Redis when the agent was killed")


def _stop_all(procs: Sequence[subprocess.Popen[bytes]], grace_s: float) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + grace_s
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _stderr_tail(log: IO[bytes], lines: int = 10) -> str:
    log.seek(0)
    text = log.read().decode(errors="replace").splitlines()[-lines:]
    return "\n".join(text) or "(empty)"


def measure_detection(url: str, job: str | None = None, *, agents: int = 3, ttl_s: float = 1.0,
                      interval_s: float = 0.25, step_s: float = 0.1, poll_s: float = 0.05,
                      start_timeout_s: float = 60.0, seed: int | None = None) -> DetectionResult:
    """Starts ``agents`` agent processes, waits until all run and then a random 1-2
    ``interval_s`` (``seed``), so the kill falls anywhere between two beats, SIGKILLs the
    first and SIGTERMs the second, and polls :func:`fleet_status` every ``poll_s`` until one shows dead and the
    other left. Clears ``job``'s keys first (default: a fresh job) and leaves them for
    inspection (:func:`forget`). Every process started is stopped and reaped, whatever
    happens. LaunchError if an agent fails to start or a transition is not seen in time."""
    ttl, interval = _check_timing(ttl_s, interval_s)
    poll = _check_seconds("poll_s", poll_s)
    if isinstance(agents, bool) or not isinstance(agents, int) or agents < 2:
        raise ParameterError(f"agents must be an integer >= 2 (one killed, one stopped), "
                             f"got {agents!r}")
    job = _check_name("job", job or f"detect-{uuid.uuid4().hex[:8]}")
    forget(url, job)  # also checks that Redis answers, before any process starts
    names = [f"agent-{i}" for i in range(agents)]
    procs: list[subprocess.Popen[bytes]] = []
    logs: list[IO[bytes]] = []
    try:
        for name in names:
            logs.append(tempfile.TemporaryFile())
            procs.append(spawn_agent(url, job, name, ttl_s=ttl, interval_s=interval,
                                     step_s=step_s, stderr=logs[-1]))
        deadline = time.monotonic() + start_timeout_s
        while True:
            for name, proc, log in zip(names, procs, logs, strict=True):
                if proc.poll() is not None:
                    raise LaunchError(f"{name} exited with code {proc.returncode} while "
                                      f"starting; its stderr ends with:\n{_stderr_tail(log)}")
            if [s.state for s in fleet_status(url, job)] == ["running"] * agents:
                break
            if time.monotonic() > deadline:
                raise LaunchError(f"agents not all running within {start_timeout_s:g} s "
                                  "(machine overloaded? raise start_timeout_s)")
            time.sleep(poll)
        time.sleep(random.Random(seed).uniform(interval, 2 * interval))
        killed, terminated = names[0], names[1]
        procs[0].kill()
        t_kill = time.monotonic()
        procs[1].terminate()
        t_term = time.monotonic()
        detection = left = None
        dead_age = alive_read = 0.0
        deadline = t_kill + ttl + interval + 30.0
        while detection is None or left is None:
            began = time.monotonic()
            statuses = {s.name: s for s in fleet_status(url, job)}
            seen = time.monotonic()
            if detection is None and statuses[killed].state != DEAD:
                alive_read = began - t_kill
            if detection is None and statuses[killed].state == DEAD:
                detection, dead_age = seen - t_kill, statuses[killed].age_s or 0.0
            if left is None and statuses[terminated].state == "left":
                left = seen - t_term
            if detection is None or left is None:
                if seen > deadline:
                    raise LaunchError(
                        f"not seen within {deadline - t_kill:.0f} s: "
                        f"{killed} {statuses[killed].state}, {terminated} "
                        f"{statuses[terminated].state}")
                time.sleep(poll)
        try:
            code = procs[1].wait(10.0)
        except subprocess.TimeoutExpired:
            raise LaunchError(f"{terminated} showed left but did not exit within 10 s") from None
        return DetectionResult(
            ttl_s=ttl, interval_s=interval, poll_s=poll, killed=killed,
            detection_s=detection, silent_at_kill_s=max(0.0, dead_age - detection),
            terminated=terminated, left_s=left, terminated_exit_code=code,
            bound_s=dead_after_s(ttl, poll), statuses=fleet_status(url, job),
            alive_read_s=max(0.0, alive_read))
    finally:
        _stop_all(procs, grace_s=STOP_GRACE_S + DRAIN_S)
        for log in logs:
            log.close()


# --------------------------------------------------------------------------------------------
# Command line


def _url(given: str | None) -> str:
    url = given or os.environ.get(URL_ENV) or os.environ.get(REDIS_URL_ENV)
    if not url:
        raise ParameterError(f"no Redis URL: pass --redis or set {URL_ENV} or {REDIS_URL_ENV}")
    return url


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labkit.orchestration.control",
                                     description="Agent heartbeats and fleet status in Redis.")
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--redis", help=f"Redis URL (default ${URL_ENV} or ${REDIS_URL_ENV}; "
                                        "a URL here is visible to ps)")
    common.add_argument("--job", required=True)
    agent = sub.add_parser("agent", parents=[common], help="run a toy agent that beats")
    agent.add_argument("--name", required=True)
    agent.add_argument("--ttl-s", type=float, default=3.0)
    agent.add_argument("--interval-s", type=float, default=1.0)
    agent.add_argument("--steps", type=int, default=None, help="leave after this many steps")
    agent.add_argument("--step-s", type=float, default=0.1)
    agent.add_argument("--drain-s", type=float, default=DRAIN_S)
    agent.add_argument("--node", type=int, default=None)
    agent.add_argument("--rank", type=int, default=None)
    status = sub.add_parser("status", parents=[common], help="show the fleet")
    status.add_argument("--json", action="store_true", help="a JSON list instead of a table")
    args = parser.parse_args(argv)
    try:
        url = _url(args.redis)
        if args.command == "status":
            return status_main(url, args.job, args.json)
        return agent_main(url, args.job, args.name, ttl_s=args.ttl_s,
                          interval_s=args.interval_s, steps=args.steps,
                          step_s=_check_seconds("step_s", args.step_s),
                          drain_s=args.drain_s, node=args.node, rank=args.rank)
    except (ParameterError, ServiceError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


__all__ = [
    "DEAD",
    "STATES",
    "AgentStatus",
    "DetectionResult",
    "Heartbeat",
    "agent_main",
    "dead_after_s",
    "fleet_status",
    "forget",
    "format_fleet",
    "measure_detection",
    "spawn_agent",
    "status_main",
]


if __name__ == "__main__":
    sys.exit(main())
