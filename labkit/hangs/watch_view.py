"""What the live watch sees of one rank at one poll, read from the rank's Prometheus exporter,
and what the ranks' collective counts alone say (``labkit.hangs.watch`` decides with them)."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from labkit.observability.readback import Sample, samples_from_text, scrape


@dataclass
class RankView:
    """One rank at one poll. ``started``/``returned``: collectives by op, entered and returned;
    ``in_flight``: ``"kind op"`` -> calls inside now; ``failed``: ``"kind op"`` -> calls that
    raised; ``slowest_step_s``: the upper bound of the
    slowest histogram bucket any of its steps fell in."""

    rank: int
    reachable: bool = True
    error: str = ""
    started: dict[str, int] = field(default_factory=dict)
    returned: dict[str, int] = field(default_factory=dict)
    in_flight: dict[str, int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)
    steps: int = 0
    slowest_step_s: float | None = None

    @property
    def progress(self) -> tuple[int, int, int]:
        """What moves while the rank makes progress: collectives entered and returned, steps."""
        return sum(self.started.values()), sum(self.returned.values()), self.steps

    @property
    def busy(self) -> bool:
        return any(self.in_flight.values())


def read_view(rank: int, url: str, timeout_s: float) -> RankView:
    """Scrape ``url``; an unreachable exporter is a view with ``reachable=False``."""
    try:
        samples = samples_from_text(scrape(url, timeout=timeout_s))
    except Exception as exc:  # noqa: BLE001 (a rank whose exporter is gone is data here)
        return RankView(rank, reachable=False, error=f"{type(exc).__name__}: {exc}"[:200])
    return view_from_samples(rank, samples)


def view_from_samples(rank: int, samples: list[Sample]) -> RankView:
    view = RankView(rank)
    returned: Counter[str] = Counter()
    buckets: list[tuple[float, float]] = []
    for s in samples:
        if s.name == "labkit_collectives_started_total":
            view.started[s.labels["op"]] = int(s.value)
        elif s.name == "labkit_collective_latency_seconds_count":
            returned[s.labels["op"]] += int(s.value)
        elif s.name == "labkit_in_flight" and s.value > 0:
            view.in_flight[f"{s.labels['kind']} {s.labels['op']}"] = int(s.value)
        elif s.name == "labkit_calls_failed_total" and s.value > 0:
            view.failed[f"{s.labels['kind']} {s.labels['op']}"] = int(s.value)
        elif s.name == "labkit_step_seconds_count":
            view.steps = int(s.value)
        elif s.name == "labkit_step_seconds_bucket":
            buckets.append((float(s.labels["le"]), s.value))
    view.returned = dict(returned)
    below = 0.0
    for bound, count in sorted(buckets):  # cumulative: the first bound holding them all
        if count > below and bound != float("inf"):
            view.slowest_step_s = bound
        below = count
    return view


def counts_disagree(views: list[RankView]) -> bool:
    """Have the ranks entered different numbers of some collective?"""
    ops = {op for v in views for op in v.started}
    return any(len({v.started.get(op, 0) for v in views}) > 1 for op in ops)


def count_verdict(views: list[RankView]) -> tuple[int | None, str, str]:
    """(rank, kind, where) from collective counts alone: the rank on the smaller side of the
    first op whose counts differ is ``ahead`` (more entered) or ``behind`` (fewer). Ranks whose
    exporter is gone count as ``gone``, not as having entered nothing."""
    gone = [v.rank for v in views if not v.reachable]
    views = [v for v in views if v.reachable]
    if gone:
        return (gone[0] if len(gone) == 1 else None), "gone", f"ranks {gone} stopped answering"
    ops = sorted({op for v in views for op in v.started})
    for op in ops:
        by_count: dict[int, list[int]] = defaultdict(list)
        for v in views:
            by_count[v.started.get(op, 0)].append(v.rank)
        if len(by_count) < 2:
            continue
        groups = sorted(by_count.items(), key=lambda item: (len(item[1]), -item[0]))
        count, ranks = groups[0]
        if len(ranks) == len(groups[1][1]):
            return None, "ambiguous", f"{op}: as many ranks on each side"
        top = max(by_count)
        kind = "ahead" if count == top else "behind"
        return ranks[0], kind, f"{op}: rank {ranks[0]} entered {count}, " + ", ".join(
            f"ranks {', '.join(map(str, r))} {c}" for c, r in sorted(by_count.items())
            if c != count)
    return None, "none", "every rank entered as many of each collective"
