"""notebooks/pace.yml: every wall-clock parameter is declared pace or fixed, and --pace scales
exactly the pace ones (checked on the real notebooks, without running any)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from labkit.course.pace import PACE_FILE, load_pace_file, notebook_defaults
from labkit.course.runner import find_notebooks, plan_course
from labkit.errors import ParameterError

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
IN_SECONDS = re.compile(r"(_s|seconds)$")


def test_every_wall_clock_parameter_is_declared_once():
    kinds = load_pace_file(NOTEBOOKS / PACE_FILE)
    stems = {p.stem: p for p in find_notebooks(NOTEBOOKS)}
    assert set(kinds) <= set(stems), f"pace.yml names no such notebook: {set(kinds) - set(stems)}"
    for stem, path in stems.items():
        defaults = notebook_defaults(path)
        declared = kinds.get(stem, {"pace": [], "fixed": []})
        both = set(declared["pace"]) & set(declared["fixed"])
        assert not both, f"{stem}: {both} is declared pace and fixed"
        listed = set(declared["pace"]) | set(declared["fixed"])
        assert listed <= set(defaults), f"{stem}: pace.yml lists {listed - set(defaults)}"
        wall_clock = {name for name in defaults if IN_SECONDS.search(name)}
        assert wall_clock <= listed, f"{stem}: declare {wall_clock - listed} in pace.yml"
        for name in declared["pace"]:
            assert isinstance(defaults[name], int | float), f"{stem}.{name} is not a number"


@pytest.mark.parametrize("factor", [0.1, 10.0])
def test_pace_scales_the_pace_parameters_only(factor):
    kinds = load_pace_file(NOTEBOOKS / PACE_FILE)
    smoke = dict(plan_course(NOTEBOOKS, smoke=True))
    for path, params in plan_course(NOTEBOOKS, smoke=True, pace=factor):
        defaults = notebook_defaults(path)
        pace = kinds.get(path.stem, {}).get("pace", [])
        for name, value in params.items():
            before = smoke[path].get(name, defaults.get(name))
            want = before * factor if name in pace else before
            assert value == pytest.approx(want), f"{path.stem}.{name}"
        assert set(pace) <= set(params)


def test_a_bad_pace_is_refused_before_anything_runs():
    with pytest.raises(ParameterError, match="positive factor"):
        plan_course(NOTEBOOKS, smoke=True, only=["05"], pace=0)
