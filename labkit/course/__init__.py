"""The course itself: what runs the notebooks and what the notebooks share (a layer under every topic).

- ``runner``: executes the notebooks headless through papermill (``labkit course run``), with a
  cell timeout, the smoke parameters (``notebooks/smoke.yml``) and an HTML index and summary.
- ``pace`` and ``speed``: the course at another pace, and the speed tier (``make test-speed``).
- ``workshop``: exercises in the notebooks, student copies, and a checker.
- ``doctor``: what this machine has (``labkit doctor``), and each lesson's note on it.
- ``results``: where a notebook keeps what a later lesson reads, as JSON.

A notebook imports from its own topic and from here; this package's surface is only what every
notebook needs (results and the lesson's note), so importing it stays cheap.
"""

from __future__ import annotations

from labkit.course.notes import lesson_note
from labkit.course.results import as_dict, load_result, results_dir, save_result

__all__ = ["as_dict", "lesson_note", "load_result", "results_dir", "save_result"]
