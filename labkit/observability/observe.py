"""Lesson 13's experiment: a job whose every rank exports metrics, a real Prometheus that scrapes
them, and an alert that fires when one link between two ranks gets slow.

The guide's team ran "Prometheus + Grafana with a custom NCCL metrics exporter" that "alerts
when communication latencies exceed 500us". :func:`observe_job` is that setup at lab size: it
launches gloo ranks (``observe_rank.py``) that run collectives and ping-pong, optionally with one
rank delaying every send (a slowed link), scrapes them and reports the matrix, collective
summaries, alerts and target health. Its watch starts when every rank has been scraped with a
finished sweep and lasts at least ``for:`` plus a few rule evaluations, so "the rule never fired"
is a result, not a window that was too short. :func:`plan_slow_link` derives the slow-link run's
threshold and injected delay from the healthy latencies measured in the same run, so the lesson
holds on a faster or slower machine.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labkit.errors import LabkitError, LaunchError, ParameterError
from labkit.observability.exporter import PORTS_FILE, STOP_FILE
from labkit.observability.observed import ObservedJob
from labkit.observability.readback import (
    collective_summaries,
    pair_matrix,
)
from labkit.observability.rules import (
    ALERT_FOR_S,
    MIN_EVALUATIONS,
    PAIR_LATENCY_THRESHOLD_S,
    alert_rules,
    evaluations_to_fire,
    human_seconds,
    rule_window_s,
)
from labkit.observability.watch import (
    PairHistory,
    _LaunchThread,
    _read_back,
    _rule_evaluations,
    _wait_for_ports,
    _Watch,
    _watch,
)
from labkit.runtime.pace import startup_allowance_s
from labkit.runtime.rank_script import rank_script
from labkit.services.base import HOST
from labkit.services.prometheus import PrometheusServer, ScrapeTarget

RANK_SCRIPT = rank_script(__name__)





"""A watch with rules lasts at least ``for:`` plus this many rule evaluations after every rank
was scraped: enough chances for a condition to fire, so "never fired" means something."""


PICKUP_TIMEOUT_S = 300.0


"""Bounds the wait for every rank to be scraped with a finished sweep (a hang bound: Prometheus
picks up new targets on a 5 s tick, and a sweep takes well under a second on an idle machine)."""


STARTUP_FLOOR_S = 90.0  # the ranks' start-up bound is never below this (see observe_job)


@dataclass(frozen=True)
class SlowLinkPlan:
    """The slow-link run's rule threshold and injected delay, and where they came from."""

    threshold_s: float
    delay_s: float
    healthy_p99_s: float | None  # p99 of the healthy latencies it was derived from
    healthy_samples: int
    reason: str  # one line: which floor or measurement set each number


SLOW_LINK_MARGIN = 3.0


"""The slowed pairs' one-way latency is planned at least this many thresholds."""


def plan_slow_link(healthy_s: Sequence[float], threshold_floor_s: float,
                   threshold_factor: float = 3.0, delay_floor_s: float = 0.0,
                   margin: float = SLOW_LINK_MARGIN) -> SlowLinkPlan:
    """Threshold = max(``threshold_floor_s``, p99 of ``healthy_s`` x ``threshold_factor``): the
    rule stays above the healthy tail this machine measured. Delay = max(``delay_floor_s``,
    2 x ``margin`` x threshold): a rank that sleeps d before each send adds d / 2 to a pair's
    one-way latency (median round trip / 2), so its pairs land ``margin`` thresholds up."""
    if threshold_floor_s <= 0 or threshold_factor <= 0 or margin <= 1:
        raise LabkitError("need threshold_floor_s > 0, threshold_factor > 0 and margin > 1")
    import numpy as np

    p99 = float(np.percentile(healthy_s, 99)) if len(healthy_s) else None
    derived = p99 * threshold_factor if p99 is not None else 0.0
    threshold = max(threshold_floor_s, derived)
    if p99 is None:
        why = (f"threshold {human_seconds(threshold)}: the floor (no healthy sample to derive "
               "from)")
    elif derived > threshold_floor_s:
        why = (f"threshold {human_seconds(threshold)} = healthy p99 {human_seconds(p99)} x "
               f"{threshold_factor:g} (above the {human_seconds(threshold_floor_s)} floor)")
    else:
        why = (f"threshold {human_seconds(threshold)}: the floor (healthy p99 "
               f"{human_seconds(p99)} x {threshold_factor:g} = {human_seconds(derived)} is "
               "below it)")
    needed = 2 * margin * threshold
    delay = max(delay_floor_s, needed)
    why += (f"; delay {human_seconds(delay)} per send: "
            + (f"2 x {margin:g} x the threshold, above the {human_seconds(delay_floor_s)} asked for"
               if needed > delay_floor_s * (1 + 1e-9) else
               f"as asked (at least 2 x {margin:g} x the threshold = {human_seconds(needed)})"))
    return SlowLinkPlan(threshold, delay, p99, len(healthy_s), why)


def observe_job(
    world: int = 4,
    rounds: int = 10,
    delay_rank: int | None = None,
    delay_s: float = 0.005,
    with_prometheus: bool = True,
    duration_s: float = 12.0,
    threshold_s: float = PAIR_LATENCY_THRESHOLD_S,
    for_s: float = ALERT_FOR_S,
    nnodes: int = 1,
    interval_s: float = 0.2,
    sizes: Sequence[int] = (4096, 262144),
    ops: Sequence[str] = ("all_reduce", "all_gather", "broadcast"),
    startup_timeout_s: float | None = None,
    stop_after_firing_s: float | None = None,
    run_dir: str | os.PathLike[str] | None = None,
    echo: Any = None,
    min_evaluations: int = MIN_EVALUATIONS,
    pickup_timeout_s: float = PICKUP_TIMEOUT_S,
    queries: Mapping[str, str] | None = None,
    keep_history: bool = False,
) -> ObservedJob:
    """Launch ``world`` gloo ranks (``nnodes`` simulated nodes) that serve metrics and loop:
    collectives at ``sizes``, then a ping-pong sweep over every ordered pair (``rounds`` round
    trips each), then ``interval_s`` of rest. With ``delay_rank`` that rank sleeps ``delay_s``
    before each send (a slowed link: every pair it is in gets slower).

    With ``with_prometheus`` and a prometheus binary, a real server scrapes the ranks with
    rules at ``threshold_s``/``for_s``; otherwise the exporters are read directly (``source``
    says which, ``note`` why). The window starts once every rank has been scraped with a
    finished sweep (Prometheus picks up new targets on a 5 s tick; ``pickup_timeout_s`` bounds
    that wait) and lasts ``duration_s``, and with rules at least :func:`rule_window_s` (``for_s``
    plus ``min_evaluations`` evaluations), so a rule that did not fire had its chances.
    ``stop_after_firing_s`` ends it that long after the first alert fires, but never before the
    alerts pending by then had the evaluations they need to fire too. ``queries`` (name ->
    PromQL) are asked at the end of the window, while the server still holds the job's series;
    their results are ``ObservedJob.answers`` (empty without a server). ``keep_history`` also
    scrapes every exporter four times a second and keeps each pair latency once per sweep
    (``ObservedJob.pair_history``): the distribution, not only the latest value. The ranks' start-up
    is bounded by ``startup_timeout_s`` (default: derived from this machine's measured torch
    import, never below 90 s). The ranks then stop; the launch always ends (timeout) and
    nothing it started stays behind."""
    if world < 2 or world % nnodes:
        raise ParameterError(f"need world >= 2 ranks split evenly over nnodes, got world={world}, "
                          f"nnodes={nnodes}")
    if delay_rank is not None and not 0 <= delay_rank < world:
        raise ParameterError(f"delay_rank must be a rank in 0..{world - 1}, got {delay_rank}")
    use_prom, note = False, "with_prometheus=False: read each rank's /metrics directly"
    if with_prometheus:
        use_prom, found = PrometheusServer.available()
        note = f"a real Prometheus ({found}) scraped the ranks" if use_prom else (
            f"{found}; read each rank's /metrics directly, no alerts")
    if startup_timeout_s is None:  # every rank and agent imports torch at once
        startup_timeout_s = max(STARTUP_FLOOR_S, startup_allowance_s(world + nnodes))
    evaluation_interval_s = PrometheusServer.evaluation_interval_s
    window_s = max(duration_s, rule_window_s(for_s, min_evaluations, evaluation_interval_s)
                   if use_prom else 0.0)
    watch_limit_s = pickup_timeout_s + window_s
    if stop_after_firing_s is not None:  # let the alerts pending at the first firing fire too
        stop_after_firing_s = max(stop_after_firing_s, evaluation_interval_s
                                  * evaluations_to_fire(for_s, evaluation_interval_s))
    own_dir = run_dir is None
    folder = Path(tempfile.mkdtemp(prefix="labkit-metrics-") if own_dir else run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    for stale in (PORTS_FILE, STOP_FILE):
        (folder / stale).unlink(missing_ok=True)
    cfg = {"rounds": rounds, "delay_rank": delay_rank, "delay_s": delay_s,
           "interval_s": interval_s, "sizes": list(sizes), "ops": list(ops),
           "max_s": startup_timeout_s + watch_limit_s + 60.0}
    launch = _LaunchThread(
        RANK_SCRIPT, json.dumps(cfg), nnodes=nnodes,
        nproc_per_node=world // nnodes, timeout_s=startup_timeout_s + watch_limit_s + 90.0,
        env={"LABKIT_BACKEND": "gloo"}, echo=echo, run_dir=folder)
    prom: PrometheusServer | None = None
    history: PairHistory | None = None
    try:
        launch.start()
        ports = _wait_for_ports(folder, launch, startup_timeout_s)
        endpoints = [f"{HOST}:{p}" for p in ports]
        if keep_history:
            history = PairHistory(endpoints)
            history.start()
        if use_prom:
            rules = folder / "labkit.rules.yml"
            rules.write_text(alert_rules(threshold_s, for_s))
            prom = PrometheusServer(
                targets=[ScrapeTarget(e, {"rank": str(r)}) for r, e in enumerate(endpoints)],
                rule_files=[rules]).start()
        watch = _watch(prom, endpoints, launch, _Watch(
            time.monotonic(), window_s, pickup_timeout_s, stop_after_firing_s))
        evaluations_after = _rule_evaluations(prom)
        samples, alerts, targets = _read_back(prom, endpoints)
        answers = {name: prom.query(expr) for name, expr in (queries or {}).items()} \
            if prom is not None else {}
        prom_url = prom.url if prom is not None else ""
        pair_history = history.finish() if history is not None else []
    finally:
        if history is not None:
            history.stop.set()
        (folder / STOP_FILE).touch()
        launch.join(timeout=startup_timeout_s + watch_limit_s + 120.0)
        if prom is not None:
            prom.stop()
        if own_dir:
            shutil.rmtree(folder, ignore_errors=True)
    if launch.is_alive():  # launch_local's own timeout ends it well before this
        raise LaunchError("the metrics job did not end after its stop file and timeout")
    launch.raise_failure()
    published = launch.result.published or {}
    evaluations = (evaluations_after - watch.evaluations_before
                   if evaluations_after is not None and watch.evaluations_before is not None
                   else None)
    return ObservedJob(
        world=world, source="prometheus" if use_prom else "exporters", note=note,
        threshold_s=threshold_s, delay_rank=delay_rank, delay_s=delay_s,
        pair_latency=pair_matrix(samples, world), collectives=collective_summaries(samples),
        alerts=alerts, targets=targets, first_pending_s=watch.first_pending_s,
        first_firing_s=watch.first_firing_s,
        observed_s=watch.ended_s - (watch.ended_s if watch.window_from_s is None
                                    else watch.window_from_s),
        sweeps=int(published.get("sweeps", 0)), endpoints=endpoints, prometheus_url=prom_url,
        for_s=for_s, targets_up_s=watch.targets_up_s, evaluations=evaluations,
        evaluation_interval_s=evaluation_interval_s, window_s=window_s, answers=answers,
        pair_history=pair_history,
    )
