"""Experience buffers side by side: push, pull and end-to-end rates on one server per run.

``N`` agents are separate processes (``labkit.buffers.bench_agent``, JSON lines over pipes, no
pickle) pushing synthetic experiences of ``payload`` bytes for ``seconds``; a learner in this
process pulls. Per implementation, three phases on the same server:

- push: agents push concurrently, nobody pulls (items/s accepted over the window);
- pull: the learner drains what was pushed (items/s);
- end-to-end: agents push while the learner pulls (items/s the learner got intact in the window).

Each window's command goes out a few measured agent round trips before the window opens, so
the agents start together on any machine. Rates are taken over what really happened: push/s
sums each agent's own rate over the span it pushed (``first`` to ``last``), end-to-end counts
what the learner got while every agent was pushing, and ``push_overlap`` / ``e2e_overlap`` say
how much of the phase that was (1.0: all together throughout); :func:`notes` explains a run
where agents started late or a window saw nothing.

Every returned experience is checked: (agent_id, seq) seen once, tensor bytes as sent. ``lost``
counts pushed experiences that never came back, after a final drain. The guide's buffer sends
raw bytes without ids: its duplicates are unknowable (null). The server's CPU (Redis
``INFO cpu``, user+sys, in cores) is reported next to the rates: saturation shows as ~1.0.
With ``redis-benchmark`` on PATH, its pipelined RPUSH rate on the same server is the ceiling.
Note: agents, learner and server share this machine's cores.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import time
import uuid
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from labkit.buffers.bench_pool import AgentPool
from labkit.buffers.bench_report import explained_table
from labkit.buffers.bench_tracking import (
    DRAIN_LIMIT_S,
    DRAIN_QUIET_S,
    LEAD_MIN_S,
    LEAD_ROUND_TRIPS,
    Spans,
    Tracker,
)
from labkit.errors import ParameterError

IMPLS = ("guide", "list", "stream", "nats")

SWEEP_IMPLS = ("guide", "list")






@dataclass
class ImplResult:
    """One implementation's rates (items/s) and delivery checks; rates None when skipped."""

    impl: str
    push_per_s: float | None = None
    pull_per_s: float | None = None
    e2e_per_s: float | None = None
    redis_benchmark_rpush_per_s: float | None = None
    lost: int | None = None
    duplicates: int | None = None
    malformed: int | None = None
    pushed: int = 0
    server_cpu_push: float | None = None  # server CPU in cores over the push window
    server_cpu_e2e: float | None = None  # ... over the end-to-end window
    lead_s: float | None = None  # how early the last window's command went out (measured)
    late_start_s: float | None = None  # the latest agent start after a window opened
    end_spread_s: float | None = None  # first to last agent finishing its final batch
    push_overlap: float | None = None  # share of the push phase with every agent pushing
    e2e_overlap: float | None = None  # share of the end-to-end window with every agent pushing
    skipped: str | None = None


def server_cpu_seconds(client: Any) -> float:
    """Redis's own CPU time so far (user + sys, all threads), from ``INFO cpu``."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def redis_benchmark_rpush(url: str, payload: int, requests: int = 100_000,
                          timeout_s: float = 120.0) -> float | None:
    """``redis-benchmark -t rpush -d payload -P 16`` against ``url``: RPUSH/s, None when the
    tool is not on PATH or fails. Removes the list it filled."""
    exe = shutil.which("redis-benchmark")
    if exe is None:
        return None
    parts = urlsplit(url)
    command = [exe, "-h", parts.hostname or "127.0.0.1", "-p", str(parts.port or 6379)]
    if parts.password:
        command += ["-a", unquote(parts.password)]
    command += ["-t", "rpush", "-d", str(payload), "-P", "16", "-n", str(requests), "-q", "--csv"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_benchmark_csv(done.stdout, "RPUSH")


def parse_benchmark_csv(text: str, test: str) -> float | None:
    """The requests/s of ``test`` in redis-benchmark ``--csv`` output (old and 7.x layouts)."""
    for row in csv.reader(text.splitlines()):
        if len(row) >= 2 and row[0].strip().upper().startswith(test.upper()):
            try:
                return float(row[1])
            except ValueError:
                return None
    return None


def _drain(learner: Any, tracker: Tracker, batch: int, want: int) -> tuple[int, float]:
    """Pulls until ``want`` experiences came back, or pulls stayed empty ``DRAIN_QUIET_S``
    (a slow server may answer one pull empty and the next one full); returns (intact, seconds
    until the last experience came back)."""
    started = time.time()
    got = intact = 0
    last_item = quiet_since = started
    while got < want and time.time() - started < DRAIN_LIMIT_S:
        exps = learner.pull(batch)
        if not exps:
            if time.time() - quiet_since >= DRAIN_QUIET_S:
                break
            time.sleep(0.01)
            continue
        got += len(exps)
        intact += tracker.take(exps)
        learner.ack(exps)
        last_item = quiet_since = time.time()
    return intact, last_item - started


def _wait_until(moment: float) -> None:
    while (wait := moment - time.time()) > 0:
        time.sleep(min(wait, 0.01))


def _lead_s(pool: AgentPool) -> float:
    """How early a window's command must go out for every agent to be waiting when it opens."""
    return max(LEAD_MIN_S, LEAD_ROUND_TRIPS * pool.round_trip_s())


def _measure_impl(pool: AgentPool, impl: str, url: str, *, agents: int, payload: int,
                  seconds: float, batch: int, cpu: Any) -> ImplResult:
    """The three phases for one implementation; ``cpu()`` reads server CPU seconds or None."""
    from labkit.buffers.frame import make_experience
    from labkit.buffers.kinds import open_buffer

    namespace = f"bench{uuid.uuid4().hex[:8]}"
    learner = open_buffer(impl, url, agent_id=agents, agents=list(range(agents)),
                          namespace=namespace, consumer="bench")
    obs = make_experience(0, 0, payload).tensors["obs"].numpy().tobytes()
    tracker = Tracker(obs, guide=impl == "guide")
    result = ImplResult(impl)
    push_batch = batch  # the guide's push still sends one RPUSH per item inside
    try:
        def window() -> dict[str, Any]:
            result.lead_s = round(_lead_s(pool), 3)
            start = time.time() + result.lead_s
            cmd = {"cmd": "push", "impl": impl, "namespace": namespace, "start": start,
                   "end": start + seconds, "batch": push_batch, "payload": payload}
            pool.send(cmd)
            return cmd

        def cores(before: float | None, start: float) -> float | None:
            after = cpu()
            return None if before is None or after is None else (after - before) / (
                time.time() - start)

        def late(spans: Spans, start: float) -> None:
            result.late_start_s = round(max(result.late_start_s or 0.0,
                                            max(spans.first) - start), 3)
            result.end_spread_s = round(max(result.end_spread_s or 0.0,
                                            max(spans.last) - min(spans.last)), 3)

        pool.send({"cmd": "open", "impl": impl, "namespace": namespace, "payload": payload})
        pool.collect()  # every agent connected and warm before the first window opens
        cmd = window()
        _wait_until(cmd["start"])
        cpu0 = cpu()
        spans = Spans.of(pool.collect())
        result.server_cpu_push = cores(cpu0, cmd["start"])
        pushed = sum(spans.pushed)
        result.push_per_s = spans.own_rate()
        result.push_overlap = spans.overlap()
        late(spans, cmd["start"])

        intact, took = _drain(learner, tracker, batch, pushed)
        result.pull_per_s = intact / took if intact and took > 0 else None

        cmd = window()
        _wait_until(cmd["start"])
        cpu0 = cpu()
        pulls: list[tuple[float, int]] = []  # (when, intact experiences) per pull
        while time.time() < cmd["end"]:
            exps = learner.pull(batch)
            if exps:
                pulls.append((time.time(), tracker.take(exps)))
                learner.ack(exps)
            else:
                time.sleep(0.0005)
        spans = Spans.of(pool.collect())
        result.server_cpu_e2e = cores(cpu0, cmd["start"])
        late(spans, cmd["start"])
        common = spans.together(until=cmd["end"])
        if common is not None:
            got = sum(n for when, n in pulls if common[0] <= when <= common[1])
            result.e2e_per_s = got / (common[1] - common[0])
        result.e2e_overlap = round((common[1] - common[0]) / seconds, 3) if common else 0.0
        pushed += sum(spans.pushed)
        _drain(learner, tracker, batch, pushed - tracker.returned)  # leftovers, untimed
        stats = learner.stats()
        result.pushed = pushed
        result.malformed = tracker.corrupt + stats.malformed
        if tracker.guide:
            result.lost = pushed - tracker.returned - stats.malformed
        else:
            result.duplicates = tracker.duplicates + stats.duplicates
            result.lost = pushed - len(tracker.seen) - stats.malformed
    finally:
        _cleanup(learner, impl, namespace, agents)
    return result


def _cleanup(learner: Any, impl: str, namespace: str, agents: int) -> None:
    """Deletes the keys this run made (the guide's are ``buffer:{i}``), closes the learner."""
    client = getattr(learner, "redis", None)
    try:
        if client is not None:
            keys = [f"buffer:{i}" for i in range(agents + 1)] if impl == "guide" else list(
                client.scan_iter(match=f"{namespace}:*"))
            if keys:
                client.delete(*keys)
    finally:
        learner.close()


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def measure_buffers(impls: tuple[str, ...] | list[str] = IMPLS, agents: int = 1,
                    payload: int = 1024, seconds: float = 3.0, batch: int = 100,
                    redis_url: str | None = None, nats_url: str | None = None,
                    redis_benchmark: bool = True) -> dict[str, Any]:
    """Push, pull and end-to-end rates of each buffer with ``agents`` agent processes, all on
    one Redis (and one NATS) server: the given URLs, or servers started for the run."""
    from labkit.errors import ServiceError
    from labkit.services.nats_server import NatsServer
    from labkit.services.redis_server import RedisServer

    impls = list(impls)
    unknown = sorted(set(impls) - set(IMPLS))
    if unknown or not impls:
        raise ParameterError(f"unknown buffer(s) {unknown}: choose from {', '.join(IMPLS)}")
    if agents < 1 or seconds <= 0 or batch < 1 or payload < 0:
        raise ParameterError("need agents >= 1, seconds > 0, batch >= 1 and payload >= 0")
    import redis

    with ExitStack() as stack:
        if redis_url is None:
            redis_url = stack.enter_context(RedisServer()).url
        nats_skip = None
        if "nats" in impls and nats_url is None:
            try:
                nats_url = stack.enter_context(NatsServer()).url
            except ServiceError as exc:
                nats_skip = str(exc)
        client = stack.enter_context(redis.Redis.from_url(redis_url))
        version = str(client.info("server").get("redis_version", ""))
        ceiling = redis_benchmark_rpush(redis_url, payload) if redis_benchmark else None
        pool = AgentPool(agents, redis_url, nats_url)
        stack.callback(pool.close)
        results = []
        for impl in impls:
            is_nats = impl == "nats"
            row = ImplResult(impl, skipped=nats_skip if is_nats else None)
            if row.skipped is None:
                url = nats_url if is_nats else redis_url
                cpu = (lambda: None) if is_nats else (lambda: server_cpu_seconds(client))
                try:
                    row = _measure_impl(pool, impl, url, agents=agents, payload=payload,
                                        seconds=seconds, batch=batch, cpu=cpu)
                except (NotImplementedError, ImportError) as exc:  # a kind not (yet) there
                    row = ImplResult(impl, skipped=f"{type(exc).__name__}: {exc}")
            if not is_nats:
                row.redis_benchmark_rpush_per_s = ceiling
            results.append(row)
    by_impl = {r.impl: r for r in results}
    listed, guide = by_impl.get("list"), by_impl.get("guide")
    return {
        "benchmark": "buffer",
        "agents": agents,
        "payload": payload,
        "seconds": seconds,
        "batch": batch,
        "results": [_rounded(asdict(r)) for r in results],
        "redis_version": version,
        "redis_benchmark_rpush_per_s": ceiling,
        "list_vs_guide_e2e": _ratio(listed and listed.e2e_per_s, guide and guide.e2e_per_s),
        "list_vs_redis_benchmark": _ratio(listed and listed.push_per_s, ceiling),
        "cpu_count": os.cpu_count(),
    }


def _rounded(row: dict[str, Any]) -> dict[str, Any]:
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}


def sweep_agents(agent_counts: tuple[int, ...] | list[int] = (1, 2, 4, 8, 16, 32),
                 impls: tuple[str, ...] | list[str] = SWEEP_IMPLS, payload: int = 1024,
                 seconds: float = 2.0, batch: int = 100,
                 redis_url: str | None = None) -> list[dict[str, Any]]:
    """``measure_buffers`` at each agent count on one server: one row per (agents, impl),
    with the server's CPU (cores) next to the rates."""
    from labkit.services.redis_server import RedisServer

    rows = []
    with ExitStack() as stack:
        if redis_url is None:
            redis_url = stack.enter_context(RedisServer()).url
        for n in agent_counts:
            report = measure_buffers(impls, agents=n, payload=payload, seconds=seconds,
                                     batch=batch, redis_url=redis_url, redis_benchmark=False)
            rows += [{"agents": n, **r} for r in report["results"]]
    return rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``labkit bench buffer``."""
    parser.add_argument("--impl", help=f"comma list of {','.join(IMPLS)} (default: all; "
                                       f"with --sweep: {','.join(SWEEP_IMPLS)})")
    parser.add_argument("--agents", type=int, default=1, help="agent processes")
    parser.add_argument("--payload", type=int, default=1024, help="tensor bytes per item")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each window")
    parser.add_argument("--batch", type=int, default=100, help="items per push and pull")
    parser.add_argument("--sweep", help="agent counts, e.g. 1,2,4,8,16,32 (ignores --agents)")
    parser.add_argument("--json", action="store_true", help="print JSON")


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ParameterError(f"want comma-separated integers, got {text!r}") from None


def run(args: argparse.Namespace) -> int:
    """``labkit bench buffer``: one measurement, or a sweep over agent counts."""
    impls = [x.strip() for x in args.impl.split(",")] if args.impl else None
    if args.sweep:
        rows = sweep_agents(_ints(args.sweep), impls or SWEEP_IMPLS, args.payload,
                            args.seconds, args.batch)
        print(json.dumps(rows, indent=2) if args.json else explained_table(rows, args.seconds))
        return 0
    report = measure_buffers(impls or IMPLS, args.agents, args.payload, args.seconds, args.batch)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        rows = [{"agents": report["agents"], **r} for r in report["results"]]
        print(explained_table(rows, args.seconds))
        print(f"redis {report['redis_version']}, redis-benchmark RPUSH: "
              f"{report['redis_benchmark_rpush_per_s']}/s")
    return 0
