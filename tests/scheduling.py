"""How `make test` spreads the suite over pytest-xdist workers.

A test module is one unit of work, so a launch or cluster its tests share (a module-scoped
fixture) starts once, on one worker; each notebook is a unit of its own. Units are handed out
heaviest first (longest-processing-time first), from the seconds each took in a recorded run
(``durations.json``), so the long notebooks and cluster modules do not end up last on one
worker while the other idles. A unit the record does not know counts a small time per test.
The record only orders the work: a stale one costs balance, never a result.
``make test ARGS=--store-durations`` rewrites it from the run.

pytest-xdist's own ``--dist loadgroup`` cannot do this under pytest 9: it groups by a suffix it
writes into ``item._nodeid``, which pytest 9 no longer reads, so every test became a unit of its
own and module fixtures ran once per worker.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from xdist.scheduler import LoadScopeScheduling

DURATIONS_FILE = Path(__file__).resolve().parent / "durations.json"
EACH_TEST_ITS_OWN = ("tests/test_notebooks.py",)  # modules whose tests share nothing
UNKNOWN_TEST_S = 0.5  # what a test the record does not know is taken to cost


def scope_of(nodeid: str) -> str:
    """The unit a test belongs to: its module, or itself in a module of independent tests."""
    module = nodeid.split("::", 1)[0]
    return nodeid if module in EACH_TEST_ITS_OWN else module


def recorded_durations() -> dict[str, float]:
    """Seconds per unit from the last stored run (empty when there is none)."""
    try:
        return {str(k): float(v) for k, v in json.loads(DURATIONS_FILE.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def unit_weights(units: Mapping[str, Sequence[str]],
                 recorded: Mapping[str, float]) -> dict[str, float]:
    """Expected seconds of each unit: recorded, else ``UNKNOWN_TEST_S`` a test."""
    return {scope: recorded.get(scope, UNKNOWN_TEST_S * len(tests))
            for scope, tests in units.items()}


class ModuleScheduling(LoadScopeScheduling):
    """pytest-xdist's scope scheduling with :func:`scope_of` units, heaviest first."""

    def _split_scope(self, nodeid: str) -> str:
        return scope_of(nodeid)

    def _assign_work_unit(self, node) -> None:  # type: ignore[no-untyped-def]
        weights = unit_weights(self.workqueue, self._recorded)
        heaviest = max(self.workqueue, key=weights.__getitem__)
        self.workqueue.move_to_end(heaviest, last=False)
        super()._assign_work_unit(node)

    @property
    def _recorded(self) -> dict[str, float]:
        if not hasattr(self, "_durations"):
            self._durations = recorded_durations()
        return self._durations


class DurationRecorder:
    """Sums setup, call and teardown seconds per unit over a run; writes ``durations.json``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report) -> None:  # type: ignore[no-untyped-def]
        scope = scope_of(report.nodeid)
        self.seconds[scope] = self.seconds.get(scope, 0.0) + report.duration

    def pytest_sessionfinish(self) -> None:
        rows = {k: round(v, 1) for k, v in sorted(self.seconds.items())}
        DURATIONS_FILE.write_text(json.dumps(rows, indent=1) + "\n")
