"""The speed tier's wiring on a tiny course of its own: each pace reaches the kernel scaled, the
one-core run is pinned to one core, and speed.json says what happened."""

from __future__ import annotations

import json
import os

import pytest
from test_course import make_notebook

from labkit.course.speed import passed, plan_conditions, run_speed_tier

REPORT = ("import json, os\n"
          "json.dump({'window_s': window_s, 'cores': sorted(os.sched_getaffinity(0))},\n"
          "          open(os.path.join(os.environ['LABKIT_RESULTS_DIR'], 'seen.json'), 'w'))")


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs Linux affinity")
def test_each_condition_runs_the_course_as_declared(tmp_path):
    nbdir = tmp_path / "notebooks"
    make_notebook(nbdir / "04_timed.ipynb", "window_s = 2.0  # a window", REPORT)
    (nbdir / "smoke.yml").write_text("04_timed:\n  window_s: 1.0\n")
    (nbdir / "pace.yml").write_text("04_timed:\n  pace: [window_s]\n")
    assert [c.name for c in plan_conditions(nbdir, (0.5,))] == ["pace-0.5", "one-busy-core"]

    conditions = run_speed_tier(tmp_path / "out", nbdir, paces=(0.5,))
    assert passed(conditions)
    seen = {c.name: json.loads((tmp_path / "out" / c.name / "seen.json").read_text())
            for c in conditions}
    assert seen["pace-0.5"]["window_s"] == 0.5  # the smoke value, scaled
    assert seen["one-busy-core"] == {"window_s": 1.0, "cores": [min(os.sched_getaffinity(0))]}
    table = json.loads((tmp_path / "out" / "speed.json").read_text())
    assert [c["notebooks"] for c in table] == [{"04_timed": "ok"}] * 2
