"""The buffer benchmark's sweeps, each on one server: over agent counts (``sweep_agents``), over
chunk sizes with the same agent processes (``sweep_chunks``: the guide's buffer, the list buffer
one frame per experience, then at each chunk size), and redis-py's two reply parsers side by
side (``compare_parsers``).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from typing import Any

from labkit.buffers.bench_core import (
    CHUNKS_PER_PUSH,
    SWEEP_IMPLS,
    Spec,
    measure_buffers,
    measure_specs,
)
from labkit.buffers.bench_report import headline_ratios


def sweep_agents(agent_counts: Sequence[int] = (1, 2, 4, 8, 16, 32),
                 impls: Sequence[str] = SWEEP_IMPLS, payload: int = 1024,
                 seconds: float = 2.0, batch: int = 100, redis_url: str | None = None,
                 chunk: int | None = None, chunks_per_push: int = CHUNKS_PER_PUSH,
                 parser: str | None = None) -> list[dict[str, Any]]:
    """``measure_buffers`` at each agent count on one server: one row per (agents, impl),
    with the server's CPU (cores) next to the rates. ``chunk``: agents push chunks of it."""
    from labkit.services.redis_server import RedisServer

    rows = []
    with ExitStack() as stack:
        if redis_url is None:
            redis_url = stack.enter_context(RedisServer()).url
        for n in agent_counts:
            report = measure_buffers(list(impls), agents=n, payload=payload, seconds=seconds,
                                     batch=batch, redis_url=redis_url, redis_benchmark=False,
                                     chunk=chunk, chunks_per_push=chunks_per_push, parser=parser)
            rows += [{"agents": n, **r} for r in report["results"]]
    return rows


def sweep_chunks(chunks: Sequence[int] = (1, 8, 64, 256), agents: int = 4, payload: int = 1024,
                 seconds: float = 3.0, batch: int = 100, chunks_per_push: int = CHUNKS_PER_PUSH,
                 parser: str | None = None, redis_url: str | None = None,
                 redis_benchmark: bool = True,
                 python_parser_at: Sequence[int | None] = (), rounds: int = 1) -> dict[str, Any]:
    """The guide's buffer, the list buffer with a frame per experience, then the list buffer
    at each chunk size: one server, the same agent processes, one report. Each list row gets
    ``vs_guide_e2e`` and ``push_bytes_vs_redis_benchmark``. ``python_parser_at``: chunk sizes
    (None: a frame per item) measured again with redis-py's pure-Python parser, for
    ``hiredis_gain`` (hiredis's end-to-end rate over the Python parser's, per size).
    ``rounds``: medians of that many measurements of each, taken in turns."""
    specs: list[Spec] = [("guide", None, parser), ("list", None, parser),
                         *(("list", c, parser) for c in chunks)]
    extra = [("list", c, "python") for c in python_parser_at] if parser != "python" else []
    report = measure_specs(specs + extra, agents, payload, seconds, batch, chunks_per_push,
                           redis_url, redis_benchmark=redis_benchmark, rounds=rounds)
    main = report["results"][:len(specs)]  # the rows of ``parser`` (the python ones follow)
    for row in main:
        if row["impl"] == "list":
            ratios = headline_ratios({**report, "results": main}, row["chunk"])
            row["vs_guide_e2e"] = ratios["list_vs_guide_e2e"]
            row["push_bytes_vs_redis_benchmark"] = ratios["list_push_bytes_vs_redis_benchmark"]
    best = max((r for r in main if r["impl"] == "list" and r["chunk"]),
               key=lambda r: r["e2e_per_s"] or 0.0, default=None)
    best_chunk = best and best["chunk"]
    return {**report, "chunks": list(chunks), "best_chunk": best_chunk,
            "hiredis_gain": _gains(report, python_parser_at),
            **headline_ratios({**report, "results": main}, best_chunk)}


def _gains(report: dict[str, Any], sizes: Sequence[int | None]) -> dict[str, float | None]:
    """hiredis's end-to-end rate over the Python parser's, per chunk size ("per item": None)."""
    gain = {}
    for c in sizes:
        rates = {r["parser"]: r["e2e_per_s"] for r in report["results"]
                 if r["impl"] == "list" and r["chunk"] == c}
        py, hi = rates.get("python"), rates.get("hiredis")
        gain["per item" if c is None else f"chunk {c}"] = (
            round(hi / py, 3) if py and hi is not None else None)
    return gain


def compare_parsers(agents: int = 4, payload: int = 1024, seconds: float = 3.0,
                    chunk: int = 64, batch: int = 100, chunks_per_push: int = CHUNKS_PER_PUSH,
                    redis_url: str | None = None) -> dict[str, Any]:
    """The list buffer with redis-py's pure-Python parser and with hiredis, one frame per
    experience and in chunks of ``chunk``: one server, the same agents. ``hiredis_gain`` maps
    "per item" and "chunk N" to hiredis's end-to-end rate over the Python parser's."""
    specs = [("list", c, p) for c in (None, chunk) for p in ("python", "hiredis")]
    report = measure_specs(specs, agents, payload, seconds, batch, chunks_per_push, redis_url,
                           redis_benchmark=False)
    return {**report, "hiredis_gain": _gains(report, (None, chunk))}


def codec_rates(payload: int = 1024, chunk: int = 64, seconds: float = 0.5) -> dict[str, float]:
    """Experiences/s one core encodes and decodes, with a frame per experience and in chunks of
    ``chunk`` (decoded as views and with one copy a chunk): where a buffer's CPU goes, without
    Redis. Each figure loops for about ``seconds``."""
    import time

    import numpy as np

    from labkit.buffers.chunk import ExperienceChunk, decode_chunk, encode_chunk
    from labkit.buffers.frame import decode, encode, make_experience

    one = make_experience(0, 0, payload)
    stacked = {k: t.expand(chunk, *t.shape).contiguous() for k, t in one.tensors.items()}
    batch = ExperienceChunk(np.zeros(chunk, np.int64), np.arange(chunk),
                            np.zeros(chunk, np.int64), np.zeros(chunk), stacked)
    frame, chunk_frame = encode(one), encode_chunk(batch)

    def rate(call: Any, per_call: int) -> float:
        calls, began = 0, time.perf_counter()
        while (took := time.perf_counter() - began) < seconds or calls < 3:
            call()
            calls += 1
        return round(calls * per_call / took, 1)

    return {
        "encode_per_item": rate(lambda: encode(one), 1),
        "decode_per_item": rate(lambda: decode(frame), 1),
        "encode_chunk": rate(lambda: encode_chunk(batch), chunk),
        "decode_chunk_views": rate(lambda: decode_chunk(chunk_frame, copy=False), chunk),
        "decode_chunk_copy": rate(lambda: decode_chunk(chunk_frame, copy=True), chunk),
        "crc32_chunk": rate(lambda: zlib_crc32(chunk_frame), chunk),
    }


def parser_rates(payload: int = 1024, chunk: int = 64, items: int = 512, seconds: float = 0.3,
                 redis_url: str | None = None) -> list[dict[str, Any]]:
    """What redis-py's parser and packer cost one client, without encoding: ``RPUSH`` then
    ``LPOP`` of ``items`` experiences' frames (one frame each, or chunks of ``chunk``), in
    experiences per CPU second of this process, for each ``client_options`` mode."""
    import time

    import numpy as np
    import redis

    from labkit.buffers.base import PARSERS, client_options
    from labkit.buffers.chunk import ExperienceChunk, encode_chunk
    from labkit.buffers.frame import encode, make_experience
    from labkit.services.redis_server import RedisServer

    one = make_experience(0, 0, payload)
    stacked = {k: t.expand(chunk, *t.shape).contiguous() for k, t in one.tensors.items()}
    frame = encode_chunk(ExperienceChunk(np.zeros(chunk, np.int64), np.arange(chunk),
                                         np.zeros(chunk, np.int64), np.zeros(chunk), stacked))
    shapes = {"per item": [encode(one)] * items, f"chunk {chunk}": [frame] * max(1, items // chunk)}
    rows = []
    with ExitStack() as stack:
        if redis_url is None:
            redis_url = stack.enter_context(RedisServer()).url
        for mode in PARSERS:
            try:
                client = stack.enter_context(redis.Redis.from_url(redis_url,
                                                                  **client_options(mode)))
            except Exception as exc:  # noqa: BLE001 (hiredis not installed: the row says so)
                rows.append({"mode": mode, "skipped": str(exc)})
                continue
            for shape, frames in shapes.items():
                n = len(frames) * (1 if shape == "per item" else chunk)
                push = pop = 0.0
                rounds, began = 0, time.perf_counter()
                while time.perf_counter() - began < seconds or rounds < 3:
                    a = time.process_time()
                    client.rpush("parser_rates", *frames)
                    b = time.process_time()
                    client.lpop("parser_rates", len(frames))
                    push, pop = push + b - a, pop + time.process_time() - b
                    rounds += 1
                rows.append({"mode": mode, "frames": shape, "skipped": None,
                             "push_per_cpu_s": round(n * rounds / max(push, 1e-9), 1),
                             "pop_per_cpu_s": round(n * rounds / max(pop, 1e-9), 1)})
            client.delete("parser_rates")
    return rows


def zlib_crc32(data: bytes) -> int:
    import zlib

    return zlib.crc32(data)


__all__ = ["codec_rates", "compare_parsers", "parser_rates", "sweep_agents", "sweep_chunks"]
