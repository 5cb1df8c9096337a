"""Coordination latency: p50/p99 round trip of one coordination step over five transports.

One round trip is a ping from process A to process B and B's reply back to A, timed on A with
``time.perf_counter_ns``. A and B are two torchrun ranks on this machine (rank 0 pings, rank 1
answers), all over 127.0.0.1, all transports in one launch, each timed in turn (setup, barrier,
warm-up, timed samples, barrier, teardown), so no transport's setup overlaps another's timing:

- ``tcpstore``: a dedicated c10d ``TCPStore`` hosted by rank 0: ``set(ping{i})`` /
  ``get(ping{i})`` (blocks until set) / ``set(pong{i})`` / ``get(pong{i})``.
- ``barrier``: one ``dist.barrier()`` on gloo. A barrier is an all-to-all agreement (everyone
  arrived), not a ping: with two ranks it is the nearest thing to a round trip, nothing more.
- ``redis_blpop``: RPUSH ``ping`` / BLPOP ``ping`` + RPUSH ``pong`` / BLPOP ``pong``.
- ``redis_pubsub``: PUBLISH on channel ``ping``, the answer PUBLISHed on ``pong``; both
  subscriptions are confirmed before any timing, every message is counted.
- ``nats_request``: core NATS ``request()`` on a subject rank 1 answers (no JetStream).

Every ping carries its sequence number and every reply must carry it back: ``ok`` is true only
when all replies matched, in order, on both ranks, with no message lost. Redis and NATS are
private servers started for the run (``labkit.services``) and stopped after it; their URLs
(with passwords) reach the ranks through environment variables, never argv.

The guide's figures (``GUIDE_FIGURES``: 12 ms on Kubernetes, 400 us after moving to a Go
service on bare metal) are its own, unverifiable; they are shown beside ours, never as ours.
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import asdict, dataclass

from labkit.errors import LaunchError, ParameterError
from labkit.runtime.rank_script import rank_script
from labkit.runtime.stats import percentile
from labkit.services.base import CHILD_NATS_URL_ENV, CHILD_REDIS_URL_ENV

TRANSPORTS = ("tcpstore", "barrier", "redis_blpop", "redis_pubsub", "nats_request")
REDIS_TRANSPORTS = frozenset({"redis_blpop", "redis_pubsub"})
NATS_TRANSPORTS = frozenset({"nats_request"})
RANK_SCRIPT = rank_script(__name__)
DEFAULT_SAMPLES = 2000
DEFAULT_WARMUP = 50

GUIDE_FIGURES = {
    "source": "the guide (its own figures: not measured here, unverifiable)",
    "quote": ("Kubernetes adds latency that kills agent coordination loops. We moved "
              "orchestrator logic to a Go service running on bare metal. Latency dropped "
              "from 12ms to 400\u03bcs."),
    "before_us": 12_000,
    "before_setting": "orchestrator logic on Kubernetes",
    "after_us": 400,
    "after_setting": "Go service on bare metal",
}


@dataclass
class CoordinationRow:
    """One transport: round-trip times in microseconds over ``samples`` timed pings."""

    transport: str
    samples: int
    p50_us: float
    p90_us: float
    p99_us: float
    mean_us: float
    max_us: float
    ok: bool


def summarize(transport: str, ns: list[int], ok: bool) -> CoordinationRow:
    """A row from round-trip times in nanoseconds."""
    us = sorted(v / 1000 for v in ns)
    return CoordinationRow(
        transport, len(us), round(percentile(us, 50), 1), round(percentile(us, 90), 1),
        round(percentile(us, 99), 1), round(statistics.fmean(us), 1), round(us[-1], 1), ok)


def parse_transports(transports: str | list[str] | tuple[str, ...]) -> list[str]:
    """Transport names (comma-separated string or list), checked, in the order given."""
    names = transports.split(",") if isinstance(transports, str) else list(transports)
    names = [n.strip() for n in names if n.strip()]
    unknown = [n for n in names if n not in TRANSPORTS]
    if unknown or not names:
        raise ParameterError(
            f"unknown transport(s) {', '.join(map(repr, unknown)) or '(none given)'}: "
            f"valid ones are {', '.join(TRANSPORTS)}")
    if len(set(names)) != len(names):
        raise ParameterError(f"a transport is named twice: {', '.join(names)}")
    return names


def _package_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return ""


def measure_coordination(samples: int = DEFAULT_SAMPLES, warmup: int = DEFAULT_WARMUP,
                         transports: str | list[str] | tuple[str, ...] = TRANSPORTS,
                         timeout_s: float | None = None) -> dict:
    """One launch of two ranks timing every transport in turn.

    Returns ``{"rows": [row dicts], "server": {...versions}, "samples", "warmup",
    "guide": GUIDE_FIGURES}``; rows follow the order of ``transports``.
    """
    from labkit.runtime.launch import launch_local
    from labkit.services.nats_server import NatsServer
    from labkit.services.probes import check_nats, check_redis
    from labkit.services.redis_server import RedisServer

    names = parse_transports(transports)
    if samples < 1:
        raise ParameterError(f"samples must be >= 1, got {samples}")
    if warmup < 0:
        raise ParameterError(f"warmup must be >= 0, got {warmup}")
    if timeout_s is None:
        timeout_s = 120.0 + 0.05 * (samples + warmup) * len(names)
    if timeout_s <= 0:
        raise ParameterError(f"timeout_s must be positive, got {timeout_s}")

    server: dict[str, str] = {"torch": _package_version("torch"),
                              "redis-py": _package_version("redis"),
                              "nats-py": _package_version("nats-py")}
    env: dict[str, str] = {}
    redis_server = nats_server = None
    try:
        if REDIS_TRANSPORTS & set(names):
            redis_server = RedisServer().start()
            env[CHILD_REDIS_URL_ENV] = redis_server.url
            server["redis-server"] = check_redis(redis_server.url).version
        if NATS_TRANSPORTS & set(names):
            nats_server = NatsServer().start()
            env[CHILD_NATS_URL_ENV] = nats_server.url
            server["nats-server"] = check_nats(nats_server.url).version
        result = launch_local(RANK_SCRIPT,
                              json.dumps({"transports": names, "samples": samples,
                                          "warmup": warmup}),
                              nproc_per_node=2, timeout_s=timeout_s, env=env, echo=None,
                              check=True)
    finally:
        for running in (nats_server, redis_server):
            if running is not None:
                running.stop()
    got = result.published
    if not isinstance(got, dict) or "transports" not in got:
        raise LaunchError("the coordination ranks published nothing; last output:\n"
                          + "\n".join(result.output[-20:]))
    rows = []
    for name in names:
        found = got["transports"][name]
        ok = bool(found["ok"]) and len(found["ns"]) == samples
        rows.append(asdict(summarize(name, found["ns"], ok)))
    return {"rows": rows, "server": server, "samples": samples, "warmup": warmup,
            "guide": GUIDE_FIGURES}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``labkit bench coordination``."""
    parser.add_argument("--samples", type=int, default=DEFAULT_SAMPLES,
                        help=f"timed round trips per transport (default {DEFAULT_SAMPLES})")
    parser.add_argument("--warmup", type=int, default=DEFAULT_WARMUP,
                        help=f"untimed round trips first (default {DEFAULT_WARMUP})")
    parser.add_argument("--transports", default=",".join(TRANSPORTS),
                        help=f"comma-separated, of {','.join(TRANSPORTS)}")
    parser.add_argument("--smoke", action="store_true",
                        help="quick check: 200 samples, 20 warm-up")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds for the whole launch (default: from the sample count)")
    parser.add_argument("--json", action="store_true", help="print JSON")


def format_table(report: dict) -> str:
    cols = ("transport", "samples", "p50_us", "p90_us", "p99_us", "mean_us", "max_us", "ok")
    lines = ["  ".join(f"{c:>13}" for c in cols)]
    lines += ["  ".join(f"{row[c]!s:>13}" for c in cols) for row in report["rows"]]
    versions = ", ".join(f"{k} {v}" for k, v in report["server"].items() if v)
    guide = report["guide"]
    lines += [
        f"two processes on 127.0.0.1; {versions}",
        f"the guide's own figures, not measured here: {guide['before_us'] / 1000:g} ms "
        f"({guide['before_setting']}) -> {guide['after_us']} us ({guide['after_setting']})",
    ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """``labkit bench coordination``."""
    samples, warmup = args.samples, args.warmup
    if args.smoke:
        samples, warmup = 200, 20
    report = measure_coordination(samples, warmup, args.transports, args.timeout)
    print(json.dumps(report, indent=2) if args.json else format_table(report))
    return 0 if all(r["ok"] for r in report["rows"]) else 1
