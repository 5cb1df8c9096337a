"""Observability: per-rank Prometheus exporters, alert rules promtool accepts, a real
Prometheus that fires PairLatencyHigh for the links of a rank with an injected delay only, and
a run in which nothing fired explained from what the rule saw."""

from __future__ import annotations

import shutil
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from process_helpers import session_processes
from prometheus_client.parser import text_string_to_metric_families

from labkit.errors import LabkitError, ServiceError
from labkit.observability import (
    MIN_EVALUATIONS,
    RULES_FILE,
    ObservedJob,
    PrometheusServer,
    RankMetrics,
    Sample,
    alert_rules,
    check_rules,
    collective_summaries,
    evaluations_to_fire,
    histogram_quantile,
    observe_job,
    pair_matrix,
    plan_slow_link,
    rule_window_s,
)

FAMILIES = {
    "labkit_rank_info": "gauge",  # an Info metric: text format has no info type
    "labkit_collective_latency_seconds": "histogram",
    "labkit_pair_latency_seconds": "gauge",
    "labkit_pingpong_sweeps": "counter",
    "labkit_buffer_depth": "gauge",
    "labkit_buffer_items": "counter",
    "labkit_policy_lag_steps": "gauge",
    "labkit_restart_count": "gauge",
    "labkit_lock_wait_seconds": "histogram",
    "labkit_checkpoint_seconds": "histogram",
}
needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None,
                                    reason="promtool not installed (apt-get install prometheus)")
STARTUP_HANG_S = 600.0  # bounds a hung start-up only (the ranks start in seconds to a minute)
needs_prometheus = pytest.mark.skipif(
    not PrometheusServer.available()[0],
    reason="prometheus not installed (apt-get install prometheus)")


def _prometheus_leftovers() -> tuple[list[str], list[str]]:
    """This session's Prometheus processes and temp dirs that still exist (the prefix is
    labkit's; under pytest-xdist each worker has a temporary folder of its own)."""
    dirs = sorted(str(p) for p in Path(tempfile.gettempdir()).glob("labkit-prometheus-*"))
    procs = session_processes(
        lambda cmdline: "prometheus" in cmdline and "labkit-prometheus-" in cmdline)
    return procs, dirs


def test_exporter_serves_valid_prometheus_text():
    metrics = RankMetrics(rank=1, world=2)
    metrics.observe_collective("all_reduce", 4096, 0.0002)
    metrics.set_pair_latency(1, 0, 0.00015)
    metrics.observe_buffer(depth=7, items=3)
    metrics.set_policy_lag(2)
    metrics.set_restarts(1)
    metrics.observe_lock_wait(0.01, lock="ckpt")
    metrics.observe_checkpoint(1.5, kind="save")
    other = RankMetrics(rank=0, world=2)  # a second exporter in one process: own registry
    port = metrics.serve()
    try:
        assert port > 0 and other.serve() != port
        with urllib.request.urlopen(metrics.url, timeout=5) as reply:
            text = reply.read().decode()
    finally:
        metrics.close()
        other.close()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert {name: families[name].type for name in FAMILIES} == FAMILIES
    pair = families["labkit_pair_latency_seconds"].samples
    assert [(s.labels, s.value) for s in pair] == [({"src": "1", "dst": "0"}, 0.00015)]
    hist = {s.name: s for s in families["labkit_collective_latency_seconds"].samples
            if s.labels.get("le") in (None, "0.00025")}
    assert hist["labkit_collective_latency_seconds_count"].value == 1
    assert hist["labkit_collective_latency_seconds_bucket"].labels["size_bytes"] == "4096"
    with pytest.raises((urllib.error.URLError, OSError)):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)
    metrics.close()  # twice is fine


def test_histogram_quantile_interpolates_like_prometheus():
    buckets = [(0.1, 2.0), (0.2, 6.0), (float("inf"), 8.0)]
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.1 + 0.1 * (4 - 2) / 4)
    assert histogram_quantile(0.25, buckets) == pytest.approx(0.1)
    assert histogram_quantile(0.99, buckets) == 0.2  # in +Inf: the highest finite bound
    assert histogram_quantile(0.5, [(0.1, 0.0), (float("inf"), 0.0)]) is None
    assert histogram_quantile(-0.1, buckets) == float("-inf")  # PromQL's answer outside [0, 1]
    assert histogram_quantile(1.5, buckets) == float("inf")
    samples = [Sample("labkit_collective_latency_seconds_bucket",
                      {"op": "all_reduce", "size_bytes": "8", "le": str(le), "rank": r}, c)
               for r in ("0", "1") for le, c in buckets]
    samples += [Sample("labkit_collective_latency_seconds_count",
                       {"op": "all_reduce", "size_bytes": "8", "rank": r}, 8.0) for r in "01"]
    samples += [Sample("labkit_collective_latency_seconds_sum",
                       {"op": "all_reduce", "size_bytes": "8", "rank": r}, 1.6) for r in "01"]
    (row,) = collective_summaries(samples)
    assert (row.op, row.size_bytes, row.count) == ("all_reduce", 8, 16)
    assert row.mean_s == pytest.approx(0.2) and row.p50_s == pytest.approx(0.15)


def test_pair_matrix_has_none_on_the_diagonal():
    samples = [Sample("labkit_pair_latency_seconds", {"src": str(i), "dst": str(j)}, i + j / 10)
               for i in range(3) for j in range(3) if i != j]
    matrix = pair_matrix(samples, 3)
    assert [matrix[i][i] for i in range(3)] == [None] * 3
    assert matrix[2][1] == pytest.approx(2.1)


def test_shipped_rules_are_the_defaults():
    assert RULES_FILE.read_text() == alert_rules()
    rules = {r["alert"]: r for r in yaml.safe_load(RULES_FILE.read_text())["groups"][0]["rules"]}
    assert rules["PairLatencyHigh"]["expr"] == "labkit_pair_latency_seconds > 0.0005"
    assert rules["PairLatencyHigh"]["for"] == "5s"
    assert "$labels.src" in rules["PairLatencyHigh"]["annotations"]["summary"]
    assert rules["RankDown"]["expr"] == 'up{job="labkit"} == 0'
    assert "> 0.005" in alert_rules(0.005, 1.5) and "for: 1500ms" in alert_rules(0.005, 1.5)
    with pytest.raises(LabkitError):
        alert_rules(0)


@needs_promtool
def test_promtool_accepts_the_rules(tmp_path):
    assert "SUCCESS: 2 rules found" in check_rules(RULES_FILE)
    custom = tmp_path / "custom.rules.yml"
    custom.write_text(alert_rules(0.002, 0.5))
    check_rules(custom)
    broken = tmp_path / "broken.rules.yml"
    broken.write_text(alert_rules().replace("for: 5s", "for: soon", 1))
    with pytest.raises(LabkitError, match="promtool rejects"):
        check_rules(broken)


def test_missing_prometheus_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    ok, why = PrometheusServer.available()
    assert not ok and "apt-get install prometheus" in why
    with pytest.raises(ServiceError, match="apt-get install prometheus"):
        PrometheusServer().start()
    with pytest.raises(ServiceError, match="apt-get install prometheus"):
        PrometheusServer(binary=tmp_path / "prometheus").start()


def test_a_rule_window_gives_for_and_more_evaluations():
    assert evaluations_to_fire(2.0) == 3  # pending, then 2 s of evaluations one second apart
    assert evaluations_to_fire(0.2) == 2 and evaluations_to_fire(5.0, 0.5) == 11
    for for_s in (0.2, 2.0, 20.0):
        assert rule_window_s(for_s) >= for_s + MIN_EVALUATIONS
        assert rule_window_s(for_s) == evaluations_to_fire(for_s) + MIN_EVALUATIONS


def test_the_slow_link_plan_follows_the_healthy_tail():
    healthy = [1e-4] * 99 + [1e-3]
    for scale in (0.1, 1.0, 10.0, 100.0):  # the same distribution on faster and slower machines
        plan = plan_slow_link([v * scale for v in healthy], 0.005, threshold_factor=3.0,
                              delay_floor_s=0.03)
        assert plan.threshold_s >= max(0.005, plan.healthy_p99_s * 3.0)
        assert plan.delay_s >= max(0.03, 2 * 3.0 * plan.threshold_s * (1 - 1e-9))
        assert plan.delay_s / 2 > plan.threshold_s > plan.healthy_p99_s
    slow = plan_slow_link([v * 100 for v in healthy], 0.005)
    assert "p99" in slow.reason and slow.threshold_s == pytest.approx(slow.healthy_p99_s * 3.0)
    empty = plan_slow_link([], 0.005, delay_floor_s=0.001)
    assert empty.threshold_s == 0.005 and empty.healthy_p99_s is None
    assert empty.delay_s == pytest.approx(0.03) and "no healthy sample" in empty.reason
    with pytest.raises(LabkitError):
        plan_slow_link(healthy, 0.0)


def _unfired(**changes) -> ObservedJob:
    """A Prometheus-watched job of 2 ranks, rank 1 slowed, in which nothing fired."""
    job = dict(world=2, source="prometheus", note="", threshold_s=0.005, delay_rank=1,
               delay_s=0.03, pair_latency=[[None, 0.001], [0.001, None]], collectives=[],
               alerts=[], targets=[], first_pending_s=None, first_firing_s=None,
               observed_s=8.0, sweeps=9, endpoints=[], for_s=2.0, targets_up_s=5.5,
               evaluations=8, window_s=8.0)
    job.update(changes)
    return ObservedJob(**job)


def test_a_job_in_which_nothing_fired_says_what_the_rule_saw():
    job = _unfired()
    assert not job.fired and job.evaluations_to_fire == 3
    timeline = job.alert_timeline()
    assert "5.5 s" in timeline and "evaluated 8 times" in timeline and "never firing" in timeline
    assert "below the threshold" in job.no_fire_reason()
    late = _unfired(pair_latency=[[None, 0.02], [0.001, None]], first_pending_s=12.0)
    assert "[(0, 1)]" in late.no_fire_reason() and "pending after 12.0 s" in late.alert_timeline()
    assert "duration_s" in _unfired(evaluations=2).no_fire_reason()
    assert "lastError" in _unfired(targets_up_s=None).no_fire_reason()
    assert "could not be read" in _unfired(evaluations=None).alert_timeline()
    fired = _unfired(first_pending_s=6.0, first_firing_s=8.0)
    assert fired.fired and fired.no_fire_reason() == "" and "firing after 8.0 s" in fired.alert_timeline()
    exporters = _unfired(source="exporters", note="with_prometheus=False")
    assert "with_prometheus=False" in exporters.alert_timeline() + exporters.no_fire_reason()


def test_observe_job_rejects_a_delay_rank_outside_the_world():
    with pytest.raises(LabkitError, match="delay_rank"):
        observe_job(world=2, delay_rank=2)


@pytest.mark.slow
def test_exporters_read_directly_give_the_whole_matrix(tmp_path, leftover_processes):
    run_dir = tmp_path / "run"
    job = observe_job(world=2, with_prometheus=False, duration_s=0.5, rounds=5,
                      sizes=(4096,), run_dir=run_dir, startup_timeout_s=STARTUP_HANG_S)
    assert job.source == "exporters" and job.alerts == [] and job.evaluations is None
    assert job.targets_up_s is not None  # the window began once every rank had a sweep
    assert [t.health for t in job.targets] == ["up"] * 2
    entries = [v for row in job.pair_latency for v in row if v is not None]
    assert len(entries) == 2 * 1 and all(v > 0 for v in entries)
    assert {c.op for c in job.collectives} == {"all_reduce", "all_gather", "broadcast"}
    assert all(c.count > 0 and c.p50_s is not None for c in job.collectives)
    assert job.sweeps >= 1
    assert leftover_processes(run_dir) == []


@pytest.mark.slow
@needs_prometheus
def test_prometheus_fires_pair_latency_high_for_the_slowed_rank_only(tmp_path,
                                                                     leftover_processes):
    procs_before, dirs_before = _prometheus_leftovers()
    run_dir = tmp_path / "run"
    # A slowed pair's one-way latency is at least delay / 2 (the rank sleeps once per round
    # trip), so its pairs are above the threshold by construction. A healthy pair's median
    # round trip on loopback is well under a millisecond idle and a few under load: 50 ms
    # keeps it far below on a machine many times busier. The window starts when every rank is
    # scraped and lasts until 2 s after the first firing: duration_s only bounds a rule that
    # never fires.
    slow, world, threshold, delay = 1, 3, 0.05, 0.2
    job = observe_job(world=world, rounds=3, delay_rank=slow, delay_s=delay,
                      threshold_s=threshold, for_s=1.0, duration_s=300.0,
                      stop_after_firing_s=2.0, run_dir=run_dir, startup_timeout_s=STARTUP_HANG_S,
                      queries={"targets up": "up", "slow pairs": f"labkit_pair_latency_seconds > {threshold}"},
                      keep_history=True)
    assert job.source == "prometheus" and job.prometheus_url and job.threshold_s == threshold
    assert len(job.answers["targets up"]) == world  # asked while the server still held the job
    answered = {(int(s["metric"]["src"]), int(s["metric"]["dst"]))
                for s in job.answers["slow pairs"]}
    assert answered == {(i, j) for i in range(world) for j in range(world) if slow in (i, j) and i != j}
    swept = {(src, dst) for src, dst, _, _ in job.pair_history}  # the second scraper's samples
    assert swept == {(i, j) for i in range(world) for j in range(world) if i != j}
    assert job.targets_up_s is not None and job.evaluations is not None and job.evaluations >= 1
    assert [(t.rank, t.health) for t in job.targets] == [(r, "up") for r in range(world)]
    entries = [(i, j) for i, row in enumerate(job.pair_latency)
               for j, v in enumerate(row) if v is not None]
    assert len(entries) == world * (world - 1)
    involved = {(i, j) for i, j in entries if slow in (i, j)}
    healthy = job.healthy_latencies()
    assert healthy and max(healthy) < threshold, job.pair_latency
    assert all(job.pair_latency[i][j] >= delay / 2 for i, j in involved), job.pair_latency
    assert job.fired and job.no_fire_reason() == "", job.alert_timeline()
    assert set(job.firing_pairs) == involved
    assert {a.name for a in job.firing} == {"PairLatencyHigh"}, job.alerts
    assert leftover_processes(run_dir) == []
    procs_after, dirs_after = _prometheus_leftovers()
    assert procs_after == procs_before and dirs_after == dirs_before
