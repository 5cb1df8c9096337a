"""The repository's promises about itself: pinned dependencies that agree, a CI that runs the
README's command, notebooks that follow the course conventions."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import yaml

from labkit.course.runner import find_notebooks, plan_course

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_every_dependency_is_pinned_exactly():
    project = _pyproject()
    for requirement in project["dependencies"] + project["optional-dependencies"]["dev"]:
        assert re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][0-9A-Za-z.+-]*", requirement), requirement


def test_environment_yml_matches_pyproject():
    project = _pyproject()
    wanted = set(project["dependencies"]) | set(project["optional-dependencies"]["dev"])
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert "conda-forge" in env["channels"]
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    pinned = {line for line in pip_section if not line.startswith("-e")}
    assert pinned == wanted, (
        f"only in environment.yml: {sorted(pinned - wanted)}; "
        f"only in pyproject.toml: {sorted(wanted - pinned)}"
    )
    python = [d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python")]
    assert python == ["python=3.11"]


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "make test" in ci and "make test" in readme
    assert "make run" in readme


def test_make_help_lists_every_target():
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][a-z-]*):", makefile, flags=re.M))
    documented = set(re.findall(r"^([a-z][a-z-]*):.*## ", makefile, flags=re.M))
    assert targets == documented, f"targets without a ## help line: {targets - documented}"
    assert {"run", "test", "lab", "help"} <= documented


def test_notebooks_follow_the_course_conventions():
    notebooks = find_notebooks(NOTEBOOKS)
    numbers = [int(p.name[:2]) for p in notebooks]
    # Lesson numbers are unique and in order, starting at 00.
    assert numbers == sorted(set(numbers)) and numbers[0] == 0, numbers
    for path in notebooks:
        nb = json.loads(path.read_text())
        cells = nb["cells"]
        first = "".join(cells[0]["source"])
        assert cells[0]["cell_type"] == "markdown" and first.startswith(f"# {path.name[:2]} ")
        assert "What you will learn" in first and "How to run" in first, path.name
        tagged = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
        assert len(tagged) == 1, f"{path.name}: exactly one cell tagged 'parameters'"
        assert cells.index(tagged[0]) == 1, f"{path.name}: parameters right after the title"
        ids = [cell.get("id") for cell in cells]
        assert all(ids) and len(set(ids)) == len(ids), (
            f"{path.name}: every cell needs a unique id (nbformat 4.5); a cell added by hand has none"
        )
        for cell in cells:
            if cell["cell_type"] == "code":
                assert not cell["outputs"] and cell["execution_count"] is None, (
                    f"{path.name} is committed with outputs: clear them"
                )


def test_smoke_file_covers_every_notebook_with_known_parameters():
    # plan_course validates names against each notebook's parameters cell and coverage.
    planned = plan_course(NOTEBOOKS, smoke=True)
    assert [p.name for p, _ in planned] == [p.name for p in find_notebooks(NOTEBOOKS)]
    smoke = yaml.safe_load((NOTEBOOKS / "smoke.yml").read_text())
    assert set(smoke) == {p.stem for p in find_notebooks(NOTEBOOKS)}


PREDICTING_LESSONS = ("03", "04", "07", "10", "11", "14")  # predict, then measure: their headline


def test_each_predicting_lesson_asks_before_it_measures_and_records():
    for path in find_notebooks(NOTEBOOKS):
        cells = json.loads(path.read_text())["cells"]
        tagged = [i for i, c in enumerate(cells) if "prediction" in c["metadata"].get("tags", [])]
        if path.name[:2] not in PREDICTING_LESSONS:
            assert not tagged, f"{path.name}: a 'prediction' cell in a lesson not in PREDICTING_LESSONS"
            continue
        assert len(tagged) == 1, f"{path.name}: exactly one cell tagged 'prediction'"
        source = "".join(cells[tagged[0]]["source"])
        assert re.fullmatch(r"(\w+ = None  # .+\n?)+", source), f"{path.name}: predictions default to None"
        later = "".join("".join(c["source"]) for c in cells[tagged[0] + 1:] if c["cell_type"] == "code")
        assert re.search(r"\brecord\(", later), f"{path.name}: no record(...) after its prediction cell"
