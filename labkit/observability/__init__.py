"""Observability (lesson 13): every rank exports Prometheus metrics, a real Prometheus scrapes them
and fires an alert when one link between two ranks gets slow.

- ``exporter``: ``RankMetrics``, one rank's metrics served over HTTP (collective latency, the
  pair latency matrix, buffer, lag, restarts, lock waits, checkpoints).
- ``rules``: the alert rules (``PairLatencyHigh``, ``RankDown``) and ``promtool`` checks.
- ``readback``: samples from a scrape or a query, the pair matrix, histogram quantiles.
- ``observe``: the experiment, ``observe_job`` (``observe_rank.py`` is what its ranks run).
- ``PrometheusServer`` (from ``labkit.services.prometheus``): the real server on loopback.

::

    from labkit import observability as obs
    job = obs.observe_job(world=4, delay_rank=3)   # rank 3's sends are slowed by 5 ms
    job.first_firing_s, job.pair_latency, job.alerts
"""

from __future__ import annotations

from labkit.observability.exporter import (
    CHECKPOINT_BUCKETS,
    LATENCY_BUCKETS,
    LOCK_BUCKETS,
    RankMetrics,
)
from labkit.observability.observe import (
    MIN_EVALUATIONS,
    PICKUP_TIMEOUT_S,
    PORTS_FILE,
    RANK_SCRIPT,
    SLOW_LINK_MARGIN,
    STARTUP_FLOOR_S,
    STOP_FILE,
    AlertState,
    ObservedJob,
    SlowLinkPlan,
    TargetHealth,
    evaluations_to_fire,
    observe_job,
    plan_slow_link,
    rule_window_s,
)
from labkit.observability.readback import (
    CollectiveSummary,
    Sample,
    collective_summaries,
    histogram_quantile,
    pair_matrix,
    samples_from_query,
    samples_from_text,
    scrape,
)
from labkit.observability.rules import (
    ALERT_FOR_S,
    PAIR_LATENCY_THRESHOLD_S,
    RULES_FILE,
    alert_rules,
    check_rules,
)
from labkit.services.prometheus import PrometheusServer, ScrapeTarget

__all__ = [
    "PrometheusServer",
    "ScrapeTarget",
    "ALERT_FOR_S",
    "alert_rules",
    "AlertState",
    "check_rules",
    "CHECKPOINT_BUCKETS",
    "collective_summaries",
    "CollectiveSummary",
    "evaluations_to_fire",
    "histogram_quantile",
    "LATENCY_BUCKETS",
    "LOCK_BUCKETS",
    "MIN_EVALUATIONS",
    "observe_job",
    "ObservedJob",
    "PAIR_LATENCY_THRESHOLD_S",
    "pair_matrix",
    "PICKUP_TIMEOUT_S",
    "plan_slow_link",
    "PORTS_FILE",
    "RANK_SCRIPT",
    "RankMetrics",
    "rule_window_s",
    "RULES_FILE",
    "Sample",
    "samples_from_query",
    "samples_from_text",
    "scrape",
    "SLOW_LINK_MARGIN",
    "SlowLinkPlan",
    "STARTUP_FLOOR_S",
    "STOP_FILE",
    "TargetHealth",
]
