"""The capstone end to end: 3 simulated nodes x 2 ranks under torchrun, async actors and a
learner through a real redis-server, a real Prometheus when installed, one rank SIGKILLed.

Invariants only (no speed thresholds): one group restart, every slot started twice, the learner
resumed from a checkpoint on its cadence and redid exactly the updates since it, replaying at
least their rollouts; policy versions never repeat and lag is never negative; no rollout was
trained twice; nothing is left running.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from labkit.capstone import (
    PORTS_ENV,
    REPORT_FILE,
    CapstoneConfig,
    CapstoneReport,
    build_report,
    contiguous_runs,
)
from labkit.course.predictions import record, resolve
from labkit.course.runner import run_course
from labkit.errors import ParameterError
from labkit.locks import FencedLock, FencedStore, StaleTokenError
from labkit.observability import PrometheusServer
from labkit.services import RedisServer

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
# notebooks/smoke.yml's 15_capstone sizes: the notebook's run is the one these tests read.
SMALL = dict(steps=30_000, kill_slot=3, kill_at_update=8, checkpoint_every_updates=5)


@pytest.mark.parametrize("changes, message", [
    ({"nodes": 1, "ranks_per_node": 1}, "at least 2 ranks"),
    ({"min_nodes": 4}, "min_nodes"),
    ({"kill_slot": 6}, "kill_slot must be a slot in 0..5"),
    ({"max_restarts": 0}, "max_restarts"),
    ({"kill_at_update": 10_000}, "kill_at_update must be in"),
    ({"checkpoint_every_updates": 0}, "checkpoint_every_updates"),
    ({"checkpoint_every_updates": 5, "checkpoint_every_s": 2.0}, "not both"),
    ({"lease_ttl_s": 0.2}, "lease_ttl_s"),
])
def test_impossible_runs_are_refused_before_anything_starts(changes, message):
    with pytest.raises(ParameterError, match=message):
        CapstoneConfig(**changes).validate()


def test_config_round_trips_through_json():
    cfg = CapstoneConfig(steps=1234, kill_slot=None)
    again = CapstoneConfig.from_json(cfg.to_json())
    assert again == cfg and again.staleness.method == "vtrace"
    assert cfg.steps_per_update == 5 * cfg.hyper.envs_per_agent * cfg.hyper.rollout_len


def test_a_zombie_learner_cannot_publish_over_a_newer_one():
    """The learner's policy is written all-or-nothing under its lease's fencing token."""
    with RedisServer() as server:
        client = server.client()
        lock, store = FencedLock(client, "z:lease", ttl_s=5), FencedStore(client)
        old = lock.acquire()
        store.write_many("z:policy", {"z:weights": b"old", "z:version": 7}, old)
        lock.release()
        new = lock.acquire()
        store.write_many("z:policy", {"z:weights": b"new", "z:version": 8}, new)
        with pytest.raises(StaleTokenError, match="refused"):
            store.write_many("z:policy", {"z:weights": b"zombie", "z:version": 9}, old)
        assert client.mget("z:weights", "z:version") == [b"new", b"8"]
        client.close()


def test_alert_samples_group_into_stretches():
    assert contiguous_runs([5, 1, 2, 3, 9, 10]) == [(1, 3), (5, 5), (9, 10)]
    assert contiguous_runs([]) == []


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tuple[CapstoneReport, Path]:
    """Notebook 15 at smoke size (the SMALL run), through papermill: the capstone's one run in
    the suite (tests/test_notebooks.py leaves this notebook to this module)."""
    out = tmp_path_factory.mktemp("capstone")
    for learner, measured in ((0.025, 0.0125), (None, None)):  # what two lessons left in the folder
        lesson = "03" if learner else "11"
        record(resolve(learner, 0.0125 if learner else 5.0, lesson=lesson, name="headline", unit="x"),
               measured=measured, reason="" if measured else "not run", folder=out)
    result = run_course(NOTEBOOKS, out=out, smoke=True, only=["15_capstone"], progress=False)
    [outcome] = result.results
    assert outcome.ok, f"15_capstone failed: {outcome.error}"
    folder = out / "capstone"
    return CapstoneReport.load(folder / REPORT_FILE), folder


@pytest.mark.slow
def test_the_notebook_ran_the_small_configuration(report):
    rep, _ = report
    assert {key: rep.config[key] for key in SMALL} == SMALL


@pytest.mark.slow
def test_a_killed_rank_restarts_the_group_and_the_learner_resumes(report):
    rep, _ = report
    assert rep.kill is not None and rep.kill["slot"] == 3 and rep.kill["role"] == "actor"
    assert rep.kill["at_update"] >= SMALL["kill_at_update"]
    assert rep.restarts["group_restarts"] == 1
    assert rep.restarts["learner_generations"] == 2
    assert rep.restarts["rank_starts"] == {str(s): 2 for s in range(6)}
    [resumed], [reached] = rep.lost_work["resumed_from_update"], rep.lost_work["reached_update"]
    # From a checkpoint on the cadence (or the final one, if the learner finished first).
    assert resumed % SMALL["checkpoint_every_updates"] == 0 or resumed == rep.throughput["updates"]
    assert resumed <= reached
    assert rep.lost_work["lost_updates"] == reached - resumed
    # Every rollout the lost updates used was pending (not acked) and came back.
    assert rep.lost_work["replayed_rollouts"] >= rep.lost_work["lost_updates"] * 5


@pytest.mark.slow
def test_versions_never_repeat_and_no_rollout_is_trained_twice(report):
    rep, _ = report
    versions = rep.timeline["version"]
    assert all(b > a for a, b in zip(versions, versions[1:], strict=False))
    assert min(rep.timeline["mean_lag"]) >= 0 and rep.lag["max"] >= 0
    assert rep.lost_work["duplicates_skipped"] == 0
    cfg = CapstoneConfig(**SMALL)
    assert rep.throughput["env_steps_trained"] >= cfg.steps
    assert rep.throughput["env_steps_trained"] == rep.throughput["updates"] * cfg.steps_per_update
    assert rep.final_return["eval_return"] > 0
    assert rep.checkpoints["count"] >= 2


@pytest.mark.slow
def test_the_report_is_saved_as_json_and_a_figure(report):
    rep, out = report
    saved = json.loads((out / REPORT_FILE).read_text())
    assert saved["lost_work"] == rep.lost_work and saved["kill"] == rep.kill
    assert saved == rep.to_dict()
    assert (out / "capstone_report.png").stat().st_size > 10_000
    for key in ("throughput", "lag", "restarts", "lost_work", "final_return"):
        assert key in rep.summary()


@pytest.mark.slow
def test_the_capstone_closes_with_the_calibration_of_its_folder(report):
    _, out = report
    summary = json.loads((out.parent / "calibration.json").read_text())
    assert summary["learner"] == {"predictions": 1, "measured": 1, "with_ratio": 1,
                                  "median_abs_log2_ratio": 1.0, "within_2x": 1.0}
    assert summary["model"]["predictions"] == 2 and summary["model"]["measured"] == 1


@pytest.mark.slow
def test_prometheus_saw_the_ranks_go_down_and_come_back(report):
    rep, _ = report
    if not PrometheusServer.available()[0]:
        assert rep.metrics["source"] == "log"
        pytest.skip("no prometheus binary: the report used the learner's log")
    assert rep.metrics["source"] == "prometheus"
    up = [v for t, v in rep.metrics["series"]["ranks_up"] if t >= rep.kill["at_s"]]
    down = next(i for i, v in enumerate(up) if v < 6)  # the restart took every rank down ...
    assert 6 in up[down:]  # ... and all six came back
    assert max(v for _, v in rep.metrics["series"]["collected_steps_per_s"]) > 0


@pytest.mark.slow
def test_nothing_is_left_running(report, leftover_processes):
    rep, _ = report
    ports = ",".join(e.rsplit(":", 1)[1] for e in rep.metrics["endpoints"])
    assert leftover_processes(ports, name=PORTS_ENV) == []


def test_a_report_without_prometheus_draws_from_the_learner_log(tmp_path):
    log = [{"event": "start", "generation": 1, "from_update": 0, "reached": 0, "lost_updates": 0,
            "replayed": 0, "lease_wait_s": 0.0, "t": 100.0}]
    log += [{"update": u, "generation": 1, "t": 110.0 + u, "version": u, "env_steps": 640 * u,
             "mean_return": 10.0 + u, "lags": [0, 1], "ages": [0.1, 0.2]} for u in range(1, 6)]
    published = {"env_steps_trained": 3200, "env_steps_collected": 3300, "updates": 5,
                 "starts": {"0": 1, "1": 1}, "duplicates_skipped": 0, "eval_return": 21.0,
                 "final_mean_return": 15.0, "steps_to_solved": None, "episodes": 40}
    rep = build_report(CapstoneConfig(kill_slot=None), log, published, None, 100.0, 120.0,
                       source="log", note="no prometheus", series={}, alerts=[], failures=0)
    assert rep.restarts["group_restarts"] == 0 and rep.lost_work["lost_updates"] == 0
    assert rep.throughput["trained_steps_per_s"] == 800.0  # 3200 steps over 4 s of updates
    report_path, figure_path = rep.save(tmp_path)
    assert json.loads(report_path.read_text())["metrics"]["source"] == "log"
    assert figure_path.stat().st_size > 10_000
