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

With ``chunk`` N the agents push chunks of N experiences (``labkit.buffers.chunk``,
``chunks_per_push`` chunks a push, more when that is under ``batch`` experiences) and, where the buffer returns chunks as they travelled (``list``), the learner
pulls chunks and checks them with numpy, a chunk at a time; the guide's buffer ignores
``chunk`` (it is the baseline). Every rate comes in items/s and in MB/s of tensor payload.
``parser`` picks redis-py's reply parser for agents and learner: ``hiredis`` or ``python``.

Every returned experience is checked: (agent_id, seq) seen once, tensor bytes as sent. ``lost``
counts pushed experiences that never came back, after a final drain. The guide's buffer sends
raw bytes without ids: its duplicates are unknowable (null). The server's CPU (Redis
``INFO cpu``, user+sys, in cores) is reported next to the rates: saturation shows as ~1.0.
With ``redis-benchmark`` on PATH, its pipelined RPUSH rate on the same server is the ceiling.
Note: agents, learner and server share this machine's cores.
"""

from __future__ import annotations

import os
import statistics
import time
import uuid
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, fields
from typing import Any

from labkit.buffers.bench_pool import AgentPool
from labkit.buffers.bench_report import headline_ratios
from labkit.buffers.bench_server import (
    clear_benchmark_keys,
    parse_benchmark_csv,
    redis_benchmark_rpush,
    server_cpu_seconds,
)
from labkit.buffers.bench_tracking import (
    LEAD_MIN_S,
    LEAD_ROUND_TRIPS,
    Learner,
    Spans,
    Tracker,
    drain_bench,
)
from labkit.errors import ParameterError

IMPLS = ("guide", "list", "stream", "nats")

SWEEP_IMPLS = ("guide", "list")
CHUNKS_PER_PUSH = 8  # chunk frames in one RPUSH when agents push chunks

Spec = tuple[str, int | None, str | None]  # (impl, chunk or None, parser or None)


@dataclass
class ImplResult:
    """One implementation's rates (items/s) and delivery checks; rates None when skipped."""

    impl: str
    chunk: int | None = None  # experiences per frame (None: one frame per experience)
    parser: str | None = None  # parser/packer: "hiredis", "hiredis-reader", "python" (None: NATS)
    push_per_s: float | None = None
    pull_per_s: float | None = None
    e2e_per_s: float | None = None
    redis_benchmark_rpush_per_s: float | None = None
    lost: int | None = None
    duplicates: int | None = None
    malformed: int | None = None
    pushed: int = 0
    server_cpu_push: float | None = None  # server CPU in cores over the push window
    server_cpu_pull: float | None = None  # ... over the drain
    server_cpu_e2e: float | None = None  # ... over the end-to-end window
    agents_cpu_push: float | None = None  # the agents' CPU (cores, all together), push window
    agents_cpu_e2e: float | None = None  # ... end-to-end window
    learner_cpu_pull: float | None = None  # the learner's CPU (cores) over the drain
    learner_cpu_e2e: float | None = None  # ... over the end-to-end window
    push_mb_per_s: float | None = None  # the rates above in MB/s (1e6) of tensor payload
    pull_mb_per_s: float | None = None
    e2e_mb_per_s: float | None = None
    lead_s: float | None = None  # how early the last window's command went out (measured)
    late_start_s: float | None = None  # the latest agent start after a window opened
    end_spread_s: float | None = None  # first to last agent finishing its final batch
    push_overlap: float | None = None  # share of the push phase with every agent pushing
    e2e_overlap: float | None = None  # share of the end-to-end window with every agent pushing
    skipped: str | None = None
    rounds: int = 1  # measurements combined here (``rounds``): rates are their medians
    e2e_rounds: list[float | None] | None = None  # end to end in each round, in order


def _wait_until(moment: float) -> None:
    while (wait := moment - time.time()) > 0:
        time.sleep(min(wait, 0.01))


def _lead_s(pool: AgentPool) -> float:
    """How early a window's command must go out for every agent to be waiting when it opens."""
    return max(LEAD_MIN_S, LEAD_ROUND_TRIPS * pool.round_trip_s())


def item_bytes(payload: int) -> int:
    """Tensor bytes of one benchmark experience (``make_experience``: ``payload`` rounded)."""
    return max(payload - 4, 0) // 4 * 4 + 4


def _measure_impl(pool: AgentPool, spec: Spec, url: str, *, agents: int, payload: int,
                  seconds: float, batch: int, chunks_per_push: int, cpu: Any) -> ImplResult:
    """The three phases for one (impl, chunk, parser); ``cpu()`` reads server CPU seconds or
    None."""
    from labkit.buffers.base import client_options, parser_in_use
    from labkit.buffers.frame import make_experience
    from labkit.buffers.kinds import open_buffer

    impl, chunk, parser = spec
    chunk = None if impl == "guide" else chunk  # the baseline stays as the guide wrote it
    namespace = f"bench{uuid.uuid4().hex[:8]}"
    target: Any = url
    if impl != "nats":
        import redis

        target = redis.Redis.from_url(url, **client_options(parser or ""))
    buffer = open_buffer(impl, target, agent_id=agents, agents=list(range(agents)),
                         namespace=namespace, consumer="bench")
    obs = make_experience(0, 0, payload).tensors["obs"].numpy().tobytes()
    tracker = Tracker(obs, guide=impl == "guide")
    # With chunks: at least ``batch`` experiences a push, so small chunks are not also small
    # pushes; the learner asks for one push of every agent a pull.
    per_push = max(chunks_per_push, -(-batch // chunk)) if chunk else batch
    pull_n = batch if not chunk else chunk * per_push * agents
    learner = Learner(buffer, tracker, pull_n, bool(chunk) and buffer.chunked)
    result = ImplResult(impl, chunk=chunk,
                        parser=None if impl == "nats" else parser_in_use(target))
    push_batch = per_push  # the guide: one RPUSH per item inside
    try:
        def window() -> dict[str, Any]:
            result.lead_s = round(_lead_s(pool), 3)
            start = time.time() + result.lead_s
            cmd = {"cmd": "push", "impl": impl, "namespace": namespace, "start": start,
                   "end": start + seconds, "batch": push_batch, "payload": payload,
                   "chunk": chunk or 0, "parser": parser or ""}
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

        pool.send({"cmd": "open", "impl": impl, "namespace": namespace, "payload": payload,
                   "parser": parser or ""})
        pool.collect()  # every agent connected and warm before the first window opens
        cmd = window()
        _wait_until(cmd["start"])
        cpu0 = cpu()
        replies = pool.collect()
        spans = Spans.of(replies)
        result.server_cpu_push = cores(cpu0, cmd["start"])
        result.agents_cpu_push = _agents_cores(replies, spans)
        pushed = sum(spans.pushed)
        result.push_per_s = spans.own_rate()
        result.push_overlap = spans.overlap()
        late(spans, cmd["start"])

        cpu0, began, mine = cpu(), time.time(), time.process_time()
        intact, took = drain_bench(learner, pushed)
        result.server_cpu_pull = cores(cpu0, began)
        result.learner_cpu_pull = (time.process_time() - mine) / max(time.time() - began, 1e-9)
        result.pull_per_s = intact / took if intact and took > 0 else None

        cmd = window()
        _wait_until(cmd["start"])
        cpu0, mine = cpu(), time.process_time()
        pulls: list[tuple[float, int]] = []  # (when, intact experiences) per pull
        while time.time() < cmd["end"]:
            n, good = learner.pull()
            if n:
                pulls.append((time.time(), good))
            else:
                time.sleep(0.0005)
        result.learner_cpu_e2e = (time.process_time() - mine) / (time.time() - cmd["start"])
        replies = pool.collect()
        spans = Spans.of(replies)
        result.server_cpu_e2e = cores(cpu0, cmd["start"])
        result.agents_cpu_e2e = _agents_cores(replies, spans)
        late(spans, cmd["start"])
        common = spans.together(until=cmd["end"])
        if common is not None:
            got = sum(n for when, n in pulls if common[0] <= when <= common[1])
            result.e2e_per_s = got / (common[1] - common[0])
        result.e2e_overlap = round((common[1] - common[0]) / seconds, 3) if common else 0.0
        pushed += sum(spans.pushed)
        drain_bench(learner, pushed - tracker.returned)  # leftovers, untimed
        stats = buffer.stats()
        result.pushed = pushed
        result.malformed = tracker.corrupt + stats.malformed
        if tracker.guide:
            result.lost = pushed - tracker.returned - stats.malformed
        else:
            result.duplicates = tracker.duplicates + stats.duplicates
            result.lost = pushed - tracker.unique - stats.malformed
        size = item_bytes(payload) / 1e6
        for phase in ("push", "pull", "e2e"):
            rate = getattr(result, f"{phase}_per_s")
            setattr(result, f"{phase}_mb_per_s", None if rate is None else rate * size)
    finally:
        _cleanup(buffer, impl, namespace, agents)
        if target is not url:
            target.close()
    return result


def _agents_cores(replies: list[dict[str, Any]], spans: Spans) -> float | None:
    """The agents' CPU in cores over the phase (first start to last end), all together."""
    whole = max(spans.last) - min(spans.first)
    return sum(float(r.get("cpu_s", 0.0)) for r in replies) / whole if whole > 0 else None


_SUMMED = ("lost", "duplicates", "malformed", "pushed")
_WORST = ("lead_s", "late_start_s", "end_spread_s")


def combine_rounds(rows: Sequence[ImplResult]) -> ImplResult:
    """One row from the same (impl, chunk, parser) measured in several rounds: each rate, CPU
    share and overlap the median of the rounds that measured it; delivery counts summed; the
    latest start and widest spread kept; every round's end-to-end rate listed."""
    first = rows[0]
    if len(rows) == 1 or first.skipped is not None:
        return first
    out = ImplResult(first.impl, chunk=first.chunk, parser=first.parser, rounds=len(rows),
                     e2e_rounds=[r.e2e_per_s for r in rows])
    for name in (f.name for f in fields(ImplResult)):
        values = [getattr(r, name) for r in rows]
        present = [v for v in values if v is not None]
        if name in _SUMMED:
            setattr(out, name, sum(present) if present else None)
        elif name in _WORST:
            setattr(out, name, max(present) if present else None)
        elif (name.endswith(("_per_s", "_overlap")) or name.startswith(
                ("server_cpu", "agents_cpu", "learner_cpu"))) and name != "e2e_rounds":
            setattr(out, name, statistics.median(present) if present else None)
    return out


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


def _check(agents: int, seconds: float, batch: int, payload: int, chunks_per_push: int,
           specs: Sequence[Spec]) -> None:
    from labkit.buffers.base import PARSERS

    impls = [impl for impl, _, _ in specs]
    unknown = sorted(set(impls) - set(IMPLS))
    if unknown or not impls:
        raise ParameterError(f"unknown buffer(s) {unknown}: choose from {', '.join(IMPLS)}")
    if agents < 1 or seconds <= 0 or batch < 1 or payload < 0 or chunks_per_push < 1:
        raise ParameterError("need agents >= 1, seconds > 0, batch >= 1, payload >= 0 and "
                             "chunks_per_push >= 1")
    for _, chunk, parser in specs:
        if chunk is not None and chunk < 1:
            raise ParameterError(f"chunk must be >= 1 (or None: a frame per item), got {chunk}")
        if parser not in (None, "", *PARSERS):
            raise ParameterError(f"parser {parser!r}: choose one of {', '.join(PARSERS)}")


def _measure_spec(pool: AgentPool, spec: Spec, redis_url: str, nats_url: str | None,
                  nats_skip: str | None, client: Any, **sizes: Any) -> ImplResult:
    """One round of one spec, or its row saying why it was skipped."""
    impl = spec[0]
    if impl == "nats" and nats_skip is not None:
        return ImplResult(impl, skipped=nats_skip)
    url = nats_url if impl == "nats" else redis_url
    cpu = (lambda: None) if impl == "nats" else (lambda: server_cpu_seconds(client))
    try:
        return _measure_impl(pool, spec, url, cpu=cpu, **sizes)
    except (NotImplementedError, ImportError) as exc:  # a kind not (yet) there
        return ImplResult(impl, skipped=f"{type(exc).__name__}: {exc}")


def measure_specs(specs: Sequence[Spec], agents: int = 1, payload: int = 1024,
                  seconds: float = 3.0, batch: int = 100,
                  chunks_per_push: int = CHUNKS_PER_PUSH, redis_url: str | None = None,
                  nats_url: str | None = None, redis_benchmark: bool = True,
                  rounds: int = 1) -> dict[str, Any]:
    """Each (impl, chunk, parser) of ``specs`` in turn with the same ``agents`` agent processes,
    all on one Redis (and one NATS) server: the given URLs, or servers started for the run.
    ``rounds`` > 1 measures every spec that many times, the specs taking turns (so a machine
    that gets busier part way through weighs on all of them), and reports medians
    (:func:`combine_rounds`)."""
    from labkit.errors import ServiceError
    from labkit.services.nats_server import NatsServer
    from labkit.services.redis_server import RedisServer

    specs = [(impl, chunk, parser or None) for impl, chunk, parser in specs]
    _check(agents, seconds, batch, payload, chunks_per_push, specs)
    if rounds < 1:
        raise ParameterError(f"rounds must be >= 1, got {rounds}")
    import redis

    with ExitStack() as stack:
        if redis_url is None:
            redis_url = stack.enter_context(RedisServer()).url
        nats_skip = None
        if any(impl == "nats" for impl, _, _ in specs) and nats_url is None:
            try:
                nats_url = stack.enter_context(NatsServer()).url
            except ServiceError as exc:
                nats_skip = str(exc)
        client = stack.enter_context(redis.Redis.from_url(redis_url))
        version = str(client.info("server").get("redis_version", ""))
        ceiling = redis_benchmark_rpush(redis_url, payload) if redis_benchmark else None
        clear_benchmark_keys(client)
        pool = AgentPool(agents, redis_url, nats_url)
        stack.callback(pool.close)
        measured: list[list[ImplResult]] = [[] for _ in specs]
        for _ in range(rounds):
            for k, spec in enumerate(specs):
                measured[k].append(_measure_spec(pool, spec, redis_url, nats_url, nats_skip,
                                                 client, agents=agents, payload=payload,
                                                 seconds=seconds, batch=batch,
                                                 chunks_per_push=chunks_per_push))
        results = []
        for rows in measured:
            row = combine_rounds(rows)
            if row.impl != "nats":
                row.redis_benchmark_rpush_per_s = ceiling
            results.append(row)
    return {
        "benchmark": "buffer",
        "agents": agents,
        "payload": payload,
        "item_bytes": item_bytes(payload),
        "seconds": seconds,
        "batch": batch,
        "chunks_per_push": chunks_per_push,
        "rounds": rounds,
        "results": [_rounded(asdict(r)) for r in results],
        "redis_version": version,
        "redis_benchmark_rpush_per_s": ceiling,
        "redis_benchmark_mb_per_s": None if ceiling is None else round(ceiling * payload / 1e6, 3),
        "cpu_count": os.cpu_count(),
    }


def measure_buffers(impls: tuple[str, ...] | list[str] = IMPLS, agents: int = 1,
                    payload: int = 1024, seconds: float = 3.0, batch: int = 100,
                    redis_url: str | None = None, nats_url: str | None = None,
                    redis_benchmark: bool = True, chunk: int | None = None,
                    chunks_per_push: int = CHUNKS_PER_PUSH,
                    parser: str | None = None, rounds: int = 1) -> dict[str, Any]:
    """Push, pull and end-to-end rates of each buffer with ``agents`` agent processes, all on
    one Redis (and one NATS) server: the given URLs, or servers started for the run. With
    ``chunk`` N, agents push chunks of N (the guide's buffer excepted); ``rounds``: medians of
    that many measurements of each, taken in turns."""
    report = measure_specs([(impl, chunk, parser) for impl in impls], agents, payload, seconds,
                           batch, chunks_per_push, redis_url, nats_url, redis_benchmark, rounds)
    return {**report, "chunk": chunk, **headline_ratios(report, chunk)}


def _rounded(row: dict[str, Any]) -> dict[str, Any]:
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}


__all__ = ["CHUNKS_PER_PUSH", "IMPLS", "SWEEP_IMPLS", "ImplResult", "combine_rounds", "item_bytes",
           "measure_buffers", "measure_specs", "parse_benchmark_csv", "server_cpu_seconds"]
