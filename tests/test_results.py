"""Results a notebook leaves for a later lesson: JSON in the run folder."""

from __future__ import annotations

from labkit.course import results


def test_results_go_to_the_configured_run_folder(tmp_path, monkeypatch):
    monkeypatch.setenv(results.RESULTS_ENV, str(tmp_path / "run"))
    path = results.save_result("alpha_beta", {"alpha_us": 12.5, "rows": [1, 2]})
    assert path == tmp_path / "run" / "alpha_beta.json"
    assert results.load_result("alpha_beta") == {"alpha_us": 12.5, "rows": [1, 2]}
    assert results.load_result("missing") is None
    assert not list((tmp_path / "run").glob("*.tmp"))
