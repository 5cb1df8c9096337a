"""Predict, then measure: resolve, record and calibration, on files only (no processes)."""

from __future__ import annotations

import json
import math
import threading

import pytest

from labkit.course import predictions, results
from labkit.course.predictions import Prediction, calibration, load_predictions, record, resolve
from labkit.errors import ParameterError


@pytest.fixture
def run_dir(tmp_path, monkeypatch):
    folder = tmp_path / "run"
    monkeypatch.setenv(results.RESULTS_ENV, str(folder))
    return folder


def _busbw(learner=None, model=0.0125):
    return resolve(learner, model, lesson="03", name="busbw over the capped link", unit="GB/s",
                   model_says="the cap's rate")


def test_resolve_takes_the_learners_number_else_the_models():
    mine = _busbw(0.02)
    assert (mine.predicted, mine.source, mine.model) == (0.02, "learner", 0.0125)
    theirs = _busbw(None)
    assert (theirs.predicted, theirs.source, theirs.model) == (0.0125, "model", 0.0125)
    assert _busbw(3).predicted == 3.0  # an int is a number too


@pytest.mark.parametrize("typo", ["12", True, math.nan, math.inf, [1.0]])
def test_a_prediction_that_is_not_a_number_is_refused_by_name(typo):
    with pytest.raises(ParameterError, match="predicted_busbw_gbps must be a number"):
        resolve(typo, 1.0, lesson="03", name="x", unit="GB/s", variable="predicted_busbw_gbps")


def test_record_prints_one_line_and_keeps_the_ratio(run_dir, capsys):
    p = record(_busbw(None), measured=0.0119)
    assert p.ratio == pytest.approx(0.0119 / 0.0125) and p.model_ratio == p.ratio
    [line] = capsys.readouterr().out.splitlines()
    assert "[03 prediction]" in line and "0.0125 GB/s" in line and "ratio 0.95" in line
    saved = json.loads((run_dir / "predictions.json").read_text())
    assert saved["predictions"] == [p.to_dict()]
    mine = record(_busbw(0.025), measured=0.0119)
    assert mine.ratio == pytest.approx(0.476, abs=1e-3)
    assert mine.model_ratio == pytest.approx(0.952, abs=1e-3)
    assert "your prediction 0.025" in capsys.readouterr().out


def test_entries_merge_by_lesson_and_name(run_dir):
    record(_busbw(None), measured=0.01)
    other = resolve(None, 2.0, lesson="04", name="async over sync", unit="x")
    record(other, measured=1.8)
    record(_busbw(0.02), measured=0.012)  # a rerun of lesson 03 replaces its own entry only
    kept = load_predictions()
    assert [(e.lesson, e.name) for e in kept] == [("03", "busbw over the capped link"),
                                                  ("04", "async over sync")]
    assert kept[0].source == "learner" and kept[0].measured == 0.012
    assert kept[1].measured == 1.8


def test_a_measurement_that_did_not_happen_is_kept_with_its_reason(run_dir, capsys):
    p = record(_busbw(None), reason="the network lab needs root and iproute2")
    assert p.measured is None and p.ratio is None
    assert "not measured: the network lab needs root" in capsys.readouterr().out
    q = record(_busbw(None), measured=math.nan)
    assert q.measured is None and "not a finite number" in q.reason
    [kept] = load_predictions()
    assert kept.measured is None and kept.reason == q.reason


def test_a_zero_prediction_has_a_ratio_only_when_the_measurement_is_zero_too(run_dir):
    lost = resolve(None, 0, lesson="10", name="updates redone", unit="updates")
    assert record(lost, measured=0).ratio == 1.0
    off = record(lost, measured=3)
    assert off.ratio is None and "prediction was 0" in off.reason


def test_the_file_is_replaced_atomically(run_dir, monkeypatch):
    record(_busbw(None), measured=0.01)
    before = (run_dir / "predictions.json").read_text()

    def crash(*_args, **_kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(predictions.json, "dump", crash)
    with pytest.raises(OSError, match="disk full"):
        record(_busbw(0.5), measured=0.02)
    assert (run_dir / "predictions.json").read_text() == before  # the old file, whole
    assert not list(run_dir.glob("*.tmp"))


def test_concurrent_records_lose_no_entry(run_dir):
    def one(i):
        record(resolve(None, 1.0, lesson=f"{i:02d}", name="n", unit="x"), measured=1.0)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(load_predictions()) == 16


def test_calibration_summarises_the_learner_and_the_models_apart(run_dir):
    record(_busbw(0.025), measured=0.0125)  # learner 2x too high; model exact
    record(resolve(None, 2.0, lesson="04", name="speed-up", unit="x"), measured=1.0)
    record(resolve(None, 5.0, lesson="11", name="detection", unit="s"), reason="not run")
    cal = calibration()
    assert [e.lesson for e in cal.entries] == ["03", "04", "11"]
    s = cal.summary()
    assert s["learner"] == {"predictions": 1, "measured": 1, "with_ratio": 1,
                            "median_abs_log2_ratio": 1.0, "within_2x": 1.0}
    assert s["model"]["predictions"] == 3 and s["model"]["measured"] == 2
    assert s["model"]["median_abs_log2_ratio"] == pytest.approx(0.5)  # |log2 1| and |log2 0.5|
    table = cal.table()
    assert "not measured: not run" in table and "learner" in table
    assert any("your predictions: 1" in line for line in cal.summary_lines())


def test_an_empty_folder_has_an_empty_calibration(run_dir):
    cal = calibration()
    assert cal.entries == [] and cal.summary()["learner"]["median_abs_log2_ratio"] is None
    assert cal.summary_lines() == ["your predictions: none in this folder",
                                   "the lessons' models: none in this folder"]


def test_a_damaged_file_is_named_not_overwritten(run_dir):
    run_dir.mkdir(parents=True)
    (run_dir / "predictions.json").write_text("{not json")
    with pytest.raises(ParameterError, match="not a predictions file"):
        record(_busbw(None), measured=0.01)
    assert (run_dir / "predictions.json").read_text() == "{not json"


def test_entries_round_trip_and_ignore_unknown_keys():
    p = Prediction("07", "lost updates", "updates", 50.0, "model", 50.0, "(n-1) x increments")
    assert Prediction.from_dict({**p.to_dict(), "later_field": 1}) == p
    with pytest.raises(ParameterError, match="lacks"):
        Prediction.from_dict({"lesson": "07"})
