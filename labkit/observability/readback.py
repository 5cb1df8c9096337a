"""Reading metrics back, the same code for Prometheus query results and raw ``/metrics`` text:
samples, the pair latency matrix, histogram quantiles and per-collective summaries.
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Sample:
    """One series' current value: metric name, labels, value."""

    name: str
    labels: dict[str, str]
    value: float


def samples_from_text(text: str, extra: dict[str, str] | None = None) -> list[Sample]:
    """Parse exposition text (``prometheus_client.parser``); ``extra`` labels are added (the
    rank of the endpoint, as Prometheus would add it)."""
    from prometheus_client.parser import text_string_to_metric_families

    return [Sample(s.name, {**s.labels, **(extra or {})}, float(s.value))
            for family in text_string_to_metric_families(text) for s in family.samples]


def samples_from_query(result: Iterable[dict[str, Any]]) -> list[Sample]:
    """A Prometheus instant-vector result as samples."""
    out = []
    for series in result:
        labels = dict(series["metric"])
        name = labels.pop("__name__", "")
        out.append(Sample(name, labels, float(series["value"][1])))
    return out


def scrape(url: str, timeout: float = 5.0) -> str:
    """GET an exporter's /metrics text."""
    with urllib.request.urlopen(url, timeout=timeout) as reply:
        return reply.read().decode()


def pair_matrix(samples: Iterable[Sample], world: int) -> list[list[float | None]]:
    """``labkit_pair_latency_seconds`` as a world x world list: [src][dst] seconds, None on
    the diagonal and where nothing was measured (``np.array(m, dtype=float)`` makes it NaN)."""
    matrix: list[list[float | None]] = [[None] * world for _ in range(world)]
    for s in samples:
        if s.name == "labkit_pair_latency_seconds":
            src, dst = int(s.labels["src"]), int(s.labels["dst"])
            if 0 <= src < world and 0 <= dst < world and src != dst:
                matrix[src][dst] = s.value
    return matrix


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """Prometheus's ``histogram_quantile`` on cumulative ``(le, count)`` buckets: linear
    interpolation inside the bucket that holds the rank; the +Inf bucket answers with the
    highest finite bound. Like PromQL, ``q`` below 0 gives -Inf and above 1 gives +Inf."""
    if q < 0 or q > 1:
        return float("-inf") if q < 0 else float("inf")
    buckets = sorted(buckets)
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    prev_le, prev_count = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if le == float("inf"):
                return prev_le
            if count == prev_count:
                return le
            return prev_le + (le - prev_le) * (rank - prev_count) / (count - prev_count)
        prev_le, prev_count = le, count
    return prev_le


@dataclass(frozen=True)
class CollectiveSummary:
    """One (op, size) of the collective latency histogram, summed over every rank."""

    op: str
    size_bytes: int
    count: int
    mean_s: float
    p50_s: float | None
    p99_s: float | None


def collective_summaries(samples: Iterable[Sample]) -> list[CollectiveSummary]:
    """Count, mean and p50/p99 (bucket-interpolated) per (op, size), over all ranks."""
    base = "labkit_collective_latency_seconds"
    buckets: dict[tuple[str, int], dict[float, float]] = {}
    sums: dict[tuple[str, int], float] = {}
    counts: dict[tuple[str, int], float] = {}
    for s in samples:
        if not s.name.startswith(base):
            continue
        key = (s.labels.get("op", ""), int(s.labels.get("size_bytes", "0")))
        if s.name == base + "_bucket":
            le = float(s.labels["le"])
            buckets.setdefault(key, {})
            buckets[key][le] = buckets[key].get(le, 0.0) + s.value
        elif s.name == base + "_sum":
            sums[key] = sums.get(key, 0.0) + s.value
        elif s.name == base + "_count":
            counts[key] = counts.get(key, 0.0) + s.value
    rows = []
    for key in sorted(counts):
        n = counts[key]
        cumulative = list(buckets.get(key, {}).items())
        rows.append(CollectiveSummary(
            key[0], key[1], int(n), sums.get(key, 0.0) / n if n else 0.0,
            histogram_quantile(0.5, cumulative), histogram_quantile(0.99, cumulative)))
    return rows
