"""A control plane for agents in Redis: heartbeats and states (lesson 12).

Every agent process runs a :class:`Heartbeat`, a daemon thread that rewrites the agent's hash
``labkit:fleet:{job}:agent:{name}`` every ``interval_s`` seconds with a TTL of ``ttl_s``
(one MULTI/EXEC: HSET + PEXPIRE). The agent says what it is doing with its state:
``starting``, ``running``, ``draining`` or ``left``. One that stops beating (killed, its
machine gone, its process frozen) loses the hash when the TTL runs out, and
``fleet.fleet_status`` shows it ``dead``: a non-expiring members set and ``last_seen`` hash keep
it listed, with the age of its last beat. An agent that leaves cleanly is ``left``, not dead
(its last hash is kept without a TTL).

How soon a dead agent shows (:func:`dead_after_s`): Redis expires a key on every access to it
(and in the background), with 1 ms resolution, so no read returns the hash later than ``ttl_s``
after the last beat that reached Redis. The last beat comes before the agent stops, so it is
shown dead at most ``ttl_s`` after it stopped (plus one poll period of whoever watches), and,
while it beat on time, not sooner than ``ttl_s - interval_s`` after it stopped.

A heartbeat thread proves that the *process* lives, not that it progresses: a main thread stuck
in a collective that releases the GIL keeps beating. Watch ``step`` for progress.

Values in Redis are strings and JSON; nothing is pickled.
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
import subprocess
import sys
import threading
import time
from typing import IO, TYPE_CHECKING, Any

from labkit.errors import ParameterError, ServiceError
from labkit.services.base import CHILD_REDIS_URL_ENV, parent_death_signal, redact, scrub_secrets

if TYPE_CHECKING:
    import redis

PREFIX = "labkit:fleet"

STATES = ("starting", "running", "draining", "left")


"""The states an agent sets itself; ``dead`` is only ever computed by :func:`fleet_status`."""


DEAD = "dead"

STANDARD_FIELDS = ("state", "pid", "host", "node", "rank", "step", "since", "ts", "ttl_ms")
"""The fields every beat writes; a Heartbeat's ``extra`` fields come beside them."""



"""How :func:`spawn_agent` hands the Redis URL to an agent (the environment, not argv)."""


JOB_ENV = "LABKIT_CONTROL_JOB"


"""Set in every agent :func:`spawn_agent` starts, so leftover processes can be found."""


STATUS_TIMEOUT_S = 2.0

DRAIN_S = 0.2

STOP_GRACE_S = 10.0  # SIGTERMed agents leave within a second; SIGKILL only one that hangs

_NAME = re.compile(r"^[A-Za-z0-9_.@-]{1,128}$")  # no ':' or glob characters in keys


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
                 rank: int | None = None, extra: dict[str, str] | None = None) -> None:
        self.job, self.name = _check_name("job", job), _check_name("name", name)
        self.extra = {str(k): str(v) for k, v in (extra or {}).items()
                      if k not in STANDARD_FIELDS}
        """More fields for every beat (where this agent serves metrics, where it dumps), so a
        watcher finds them with the agent; the standard fields cannot be overridden."""
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

        return {**self.extra, "state": self._state, "pid": str(os.getpid()), "host": self._host,
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


def spawn_agent(url: str, job: str, name: str, *, ttl_s: float = 3.0, interval_s: float = 1.0,
                step_s: float = 0.1, steps: int | None = None,
                stderr: IO[Any] | int | None = None) -> subprocess.Popen[bytes]:
    """Starts ``python -m labkit.orchestration.control_agent agent`` in its own session (Ctrl-C in a terminal does
    not reach it; it gets SIGTERM if this thread's process dies). The URL goes in the
    environment, not argv. The caller kills and reaps it."""
    _check_name("job", job)
    _check_name("name", name)
    _check_timing(ttl_s, interval_s)
    argv = [sys.executable, "-m", "labkit.orchestration.control_agent", "agent", "--job", job, "--name", name,
            "--ttl-s", repr(float(ttl_s)), "--interval-s", repr(float(interval_s)),
            "--step-s", repr(_check_seconds("step_s", step_s))]
    if steps is not None:
        argv += ["--steps", str(int(steps))]
    env = {**os.environ, CHILD_REDIS_URL_ENV: url, JOB_ENV: job, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=stderr,
                            start_new_session=True, preexec_fn=parent_death_signal())
