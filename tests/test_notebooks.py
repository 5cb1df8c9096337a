"""Every notebook of the course, executed headless at smoke size through real papermill."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.course.runner import find_notebooks, run_course

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
# Notebooks whose smoke run is the shared run of a test module, which executes them the same way
# and asserts on what they produced: one run each in the suite.
RUN_BY_THEIR_MODULE = {"10_checkpoint_and_recovery": "tests/test_train_recovery.py",
                       "12_orchestration": "tests/test_elastic.py",
                       "15_capstone": "tests/test_capstone.py"}


@pytest.mark.notebook
@pytest.mark.parametrize("notebook", [p for p in find_notebooks(NOTEBOOKS)
                                      if p.stem not in RUN_BY_THEIR_MODULE], ids=lambda p: p.stem)
def test_notebook_runs_at_smoke_size(notebook: Path, tmp_path: Path):
    result = run_course(NOTEBOOKS, out=tmp_path / "run", smoke=True, only=[notebook.stem],
                        progress=False)
    [outcome] = result.results
    assert outcome.ok, f"{notebook.name} failed: {outcome.error}"
    assert (tmp_path / "run" / outcome.output).exists()
    assert (tmp_path / "run" / "summary.json").exists()


def test_every_notebook_left_to_a_module_is_run_there():
    root = NOTEBOOKS.parent
    stems = {p.stem for p in find_notebooks(NOTEBOOKS)}
    for stem, module in RUN_BY_THEIR_MODULE.items():
        assert stem in stems
        assert f'only=["{stem}"]' in (root / module).read_text(), module
