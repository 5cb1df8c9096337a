"""How `make test` spreads the suite over pytest-xdist workers (tests/scheduling.py)."""

from __future__ import annotations

import json

from scheduling import DURATIONS_FILE, scope_of, unit_weights


def test_a_module_is_one_unit_and_each_notebook_its_own():
    assert scope_of("tests/test_capstone.py::test_config_round_trips_through_json") \
        == "tests/test_capstone.py"
    assert scope_of("tests/test_capstone.py::TestX::test_y[a::b]") == "tests/test_capstone.py"
    nb = "tests/test_notebooks.py::test_notebook_runs_at_smoke_size[12_orchestration]"
    assert scope_of(nb) == nb


def test_heaviest_units_go_first_and_unknown_ones_count_per_test():
    weights = unit_weights({"a.py": ["a.py::t1", "a.py::t2"], "b.py": ["b.py::t"],
                            "c.py": ["c.py::t"]}, {"b.py": 90.0, "c.py": 5.0})
    assert sorted(weights, key=weights.get, reverse=True) == ["b.py", "c.py", "a.py"]
    assert weights["a.py"] > 0


def test_the_recorded_durations_name_real_units():
    recorded = json.loads(DURATIONS_FILE.read_text())
    assert recorded and all(v >= 0 for v in recorded.values())
    assert all(scope.startswith("tests/test_") for scope in recorded)
