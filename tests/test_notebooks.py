"""Every notebook of the course, executed headless at smoke size through real papermill."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.course.runner import find_notebooks, run_course

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


@pytest.mark.notebook
@pytest.mark.parametrize("notebook", find_notebooks(NOTEBOOKS), ids=lambda p: p.stem)
def test_notebook_runs_at_smoke_size(notebook: Path, tmp_path: Path):
    result = run_course(NOTEBOOKS, out=tmp_path / "run", smoke=True, only=[notebook.stem],
                        progress=False)
    [outcome] = result.results
    assert outcome.ok, f"{notebook.name} failed: {outcome.error}"
    assert (tmp_path / "run" / outcome.output).exists()
    assert (tmp_path / "run" / "summary.json").exists()
