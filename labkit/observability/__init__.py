"""Observability (lesson 13): every rank exports Prometheus metrics, a real Prometheus scrapes them
and fires an alert when one link between two ranks gets slow.

- ``exporter``: ``RankMetrics``, one rank's metrics served over HTTP (collective latency, the
  pair latency matrix, buffer, lag, restarts, lock waits, checkpoints).
- ``rules``: the alert rules (``PairLatencyHigh``, ``RankDown``) and ``promtool`` checks.
- ``readback``: samples from a scrape or a query, the pair matrix, histogram quantiles.
- ``observe``: the experiment, ``observe_job`` (``observe_rank.py`` is what its ranks run;
  ``watch`` polls the server while it runs, ``observed`` is what it returns).
- ``PrometheusServer`` (from ``labkit.services.prometheus``): the real server on loopback.

::

    from labkit import observability as obs
    job = obs.observe_job(world=4, delay_rank=3)   # rank 3's sends are slowed by 5 ms
    job.first_firing_s, job.pair_latency, job.alerts
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from labkit.runtime.lazy import lazy_surface

if TYPE_CHECKING:  # what each name is, for readers and type checkers
    from labkit.observability.exporter import (
        CHECKPOINT_BUCKETS,
        LATENCY_BUCKETS,
        LOCK_BUCKETS,
        PORTS_FILE,
        STOP_FILE,
        RankMetrics,
    )
    from labkit.observability.observe import (
        PICKUP_TIMEOUT_S,
        SLOW_LINK_MARGIN,
        STARTUP_FLOOR_S,
        SlowLinkPlan,
        observe_job,
        plan_slow_link,
    )
    from labkit.observability.observed import (
        AlertState,
        ObservedJob,
        TargetHealth,
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
        MIN_EVALUATIONS,
        PAIR_LATENCY_THRESHOLD_S,
        RULES_FILE,
        alert_rules,
        check_rules,
        evaluations_to_fire,
        human_seconds,
        rule_window_s,
    )
    from labkit.services.prometheus import (
        PrometheusServer,
        ScrapeTarget,
    )

# name -> the module that defines it: a name is imported when first used,
# so importing one module of the folder (a rank script, a child process) imports no other
_HOME = {
    "ALERT_FOR_S": "labkit.observability.rules",
    "alert_rules": "labkit.observability.rules",
    "AlertState": "labkit.observability.observed",
    "check_rules": "labkit.observability.rules",
    "CHECKPOINT_BUCKETS": "labkit.observability.exporter",
    "collective_summaries": "labkit.observability.readback",
    "CollectiveSummary": "labkit.observability.readback",
    "evaluations_to_fire": "labkit.observability.rules",
    "histogram_quantile": "labkit.observability.readback",
    "human_seconds": "labkit.observability.rules",
    "LATENCY_BUCKETS": "labkit.observability.exporter",
    "LOCK_BUCKETS": "labkit.observability.exporter",
    "MIN_EVALUATIONS": "labkit.observability.rules",
    "observe_job": "labkit.observability.observe",
    "ObservedJob": "labkit.observability.observed",
    "PAIR_LATENCY_THRESHOLD_S": "labkit.observability.rules",
    "pair_matrix": "labkit.observability.readback",
    "PICKUP_TIMEOUT_S": "labkit.observability.observe",
    "plan_slow_link": "labkit.observability.observe",
    "PORTS_FILE": "labkit.observability.exporter",
    "PrometheusServer": "labkit.services.prometheus",
    "RankMetrics": "labkit.observability.exporter",
    "rule_window_s": "labkit.observability.rules",
    "RULES_FILE": "labkit.observability.rules",
    "Sample": "labkit.observability.readback",
    "samples_from_query": "labkit.observability.readback",
    "samples_from_text": "labkit.observability.readback",
    "scrape": "labkit.observability.readback",
    "ScrapeTarget": "labkit.services.prometheus",
    "SLOW_LINK_MARGIN": "labkit.observability.observe",
    "SlowLinkPlan": "labkit.observability.observe",
    "STARTUP_FLOOR_S": "labkit.observability.observe",
    "STOP_FILE": "labkit.observability.exporter",
    "TargetHealth": "labkit.observability.observed",
}
__all__ = sorted(_HOME)
__getattr__, __dir__ = lazy_surface(__name__, _HOME)
