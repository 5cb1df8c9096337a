"""The course itself: what runs the notebooks and what the notebooks share (a layer under every topic).

- ``runner``: executes the notebooks headless through papermill (``labkit course run``), with a
  cell timeout, the smoke parameters (``notebooks/smoke.yml``) and an HTML index and summary.
- ``pace`` and ``speed``: the course at another pace, and the speed tier (``make test-speed``).
- ``workshop``: exercises in the notebooks, student copies, and a checker.
- ``doctor``: what this machine has (``labkit doctor``), and each lesson's note on it.
- ``results``: where a notebook keeps what a later lesson reads, as JSON.
- ``predictions``: predict, then measure: a lesson's headline number predicted (by the learner, or
  the lesson's own model), measured, their ratio kept in the run's results, and the capstone's
  calibration over them (``from labkit.course.predictions import record, resolve``).

A notebook imports from its own topic and from here; this package's surface is only what every
notebook needs (results and the lesson's note), each imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from labkit.runtime.lazy import lazy_surface

if TYPE_CHECKING:  # what each name is, for readers and type checkers
    from labkit.course.notes import lesson_note
    from labkit.course.results import as_dict, load_result, results_dir, save_result

# A topic that keeps a result (cost, collectives) imports course.results alone: the doctor's
# program table behind lesson_note is imported only when a notebook asks for its note.
_HOME = {"as_dict": "labkit.course.results", "lesson_note": "labkit.course.notes",
         "load_result": "labkit.course.results", "results_dir": "labkit.course.results",
         "save_result": "labkit.course.results"}
__all__ = sorted(_HOME)
__getattr__, __dir__ = lazy_surface(__name__, _HOME)
