"""Checking a learner's copy (``labkit course check COPY``): run it headless with papermill, an
exercise that fails does not stop the run, and the report says PASS or FAIL per exercise with
the failing line.
"""

from __future__ import annotations

import copy
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from labkit.errors import ParameterError

if TYPE_CHECKING:
    from nbformat import NotebookNode
from labkit.course.workshop import (
    CHECK,
    EXERCISE_PREFIX,
    SOLUTION,
    CheckReport,
    Exercise,
    ExerciseNotDone,
    ExerciseResult,
    find_exercises,
)

_RAISES = "raises-exception"  # nbclient: an error in this cell is recorded, the run goes on
_ERROR_MARKER = "papermill-error-cell-tag"  # papermill.execute.ERROR_MARKER_TAG
_INDEX = "labkit_cell"  # metadata key: the cell's position in the learner's notebook
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def locate(notebook: str | Path, notebooks_dir: str | Path = "notebooks") -> Path:
    """``notebook`` as a path when it is a file, else an id or stem ("03") in ``notebooks_dir``."""
    from labkit.course import runner as course

    path = Path(notebook)
    if path.is_file() or path.suffix:
        return path
    return course.select(course.find_notebooks(notebooks_dir), [str(notebook)])[0]


def check_notebook(
    path: str | Path,
    parameters: dict | None = None,
    smoke: bool = False,
    timeout: float | None = 600,
    kernel_name: str | None = None,
    output: str | Path | None = None,
    progress: bool = False,
) -> CheckReport:
    """Run a learner's notebook headless and report, exercise by exercise, what passes.

    ``smoke`` takes the notebook's sizes from ``smoke.yml`` next to it; ``parameters`` go on
    top. ``timeout`` is seconds per cell. The executed notebook (tracebacks included) is kept
    at ``output`` when given. Raises ParameterError, before running, when the notebook has no
    exercises, mis-tagged ones, or an unknown parameter.
    """
    import nbformat
    import papermill
    from papermill.exceptions import PapermillExecutionError

    from labkit.course import runner as course
    from labkit.course.execution import environment, lab_kernel

    path = Path(path).resolve()
    if not path.is_file():
        raise ParameterError(f"no notebook at {path}")
    nb = nbformat.read(path, as_version=4)
    exercises = find_exercises(nb, path.stem)
    if not exercises:
        raise ParameterError(
            f"{path.stem} has no exercises: a solution cell is tagged {SOLUTION!r} and "
            f"{EXERCISE_PREFIX}<name>, its check cell {CHECK!r} and {EXERCISE_PREFIX}<name>"
        )
    params: dict = {}
    if smoke:
        sizes = course.load_smoke_parameters(path.parent / course.SMOKE_FILE)
        if path.stem not in sizes:
            raise ParameterError(
                f"{path.parent / course.SMOKE_FILE} has no entry for {path.stem}"
            )
        params.update(sizes[path.stem])
    params.update(parameters or {})
    if params:
        course.check_parameters(path, params)

    roles = {e.solution: (e.name, SOLUTION) for e in exercises}
    roles.update({e.check: (e.name, CHECK) for e in exercises})
    instrumented = copy.deepcopy(nb)
    for i, cell in enumerate(instrumented.cells):
        cell.metadata[_INDEX] = i
        if i in roles and _RAISES not in cell.metadata.get("tags", []):
            cell.metadata["tags"] = [*cell.metadata.get("tags", []), _RAISES]

    crash = None
    with tempfile.TemporaryDirectory(prefix="labkit-check-") as tmp:
        source = Path(tmp, path.name)
        executed_path = Path(output).resolve() if output else Path(tmp, "executed.ipynb")
        executed_path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(instrumented, source)
        env = environment(LABKIT_SMOKE="1" if smoke else None)
        with lab_kernel(kernel_name) as kernel, env:
            try:
                papermill.execute_notebook(
                    str(source), str(executed_path), parameters=params, kernel_name=kernel,
                    execution_timeout=timeout, progress_bar=progress, cwd=str(path.parent),
                )
            except PapermillExecutionError:
                pass  # some cell raised: the executed notebook says which
            except Exception as exc:  # a timeout, a dead kernel: the run stopped there
                crash = f"{type(exc).__name__}: {exc}"
        executed = (
            nbformat.read(executed_path, as_version=4) if executed_path.is_file() else None
        )
        report = _report(path, exercises, executed, crash, str(executed_path) if output else None)
        if executed is not None and output:
            _clean(executed, nb)
            nbformat.write(executed, executed_path)
    return report


def _clean(executed: NotebookNode, original: NotebookNode) -> None:
    """Take the checker's marks (cell positions, ``raises-exception``) out of ``executed``.

    papermill's "an exception was encountered ... and stopped" cells go too: they point at the
    first error, which is usually an exercise, where the run did not stop.
    """
    executed.cells = [c for c in executed.cells if _ERROR_MARKER not in c.metadata.get("tags", [])]
    for cell in executed.cells:
        i = cell.metadata.pop(_INDEX, None)
        if i is None:
            continue
        had = original.cells[i].get("metadata", {}).get("tags", [])
        if _RAISES not in had and _RAISES in cell.metadata.get("tags", []):
            cell.metadata["tags"] = [t for t in cell.metadata["tags"] if t != _RAISES]


def _report(
    path: Path,
    exercises: list[Exercise],
    executed: NotebookNode | None,
    crash: str | None,
    output: str | None,
) -> CheckReport:
    """Read each exercise's outcome from the executed notebook."""
    cells: dict[int, NotebookNode] = {}
    for cell in executed.cells if executed is not None else []:
        if _INDEX in cell.metadata:
            cells[cell.metadata[_INDEX]] = cell
    exercise_cells = {e.solution for e in exercises} | {e.check for e in exercises}

    stopped = None
    crashed_at = None  # the cell that was running when the run broke off
    if crash:
        started = [i for i, c in cells.items() if _meta(c).get("start_time")]
        crashed_at = max(started) if started else None
        at = f"cell {crashed_at + 1}: " if started else ""
        stopped = f"{at}{crash}"
    else:
        for i in sorted(cells):
            if i not in exercise_cells and _meta(cells[i]).get("exception"):
                error = _error(cells[i])
                what = f"{error['ename']}: {error['evalue']}" if error else "it raised"
                stopped = f"cell {i + 1} raised {what}"
                break
    report = CheckReport(notebook=str(path), stopped=stopped, output=output)
    for exercise in exercises:
        report.exercises.append(
            _outcome(exercise, cells, stopped or "an earlier cell", crashed_at)
        )
    return report


def _outcome(
    exercise: Exercise, cells: dict[int, NotebookNode], stopped: str, crashed_at: int | None
) -> ExerciseResult:
    """One exercise's result from its executed solution and check cells."""
    name = exercise.name
    not_done = (
        f"exercise {name!r} is not done yet: replace the `raise ExerciseNotDone` in its "
        "solution cell by your solution"
    )
    for role, index in ((SOLUTION, exercise.solution), (CHECK, exercise.check)):
        cell = cells.get(index)
        if cell is None or not _meta(cell).get("start_time"):
            return ExerciseResult(name, False, f"not run: the notebook stopped at {stopped}",
                                  "not run")
        where = f"{role} cell (cell {index + 1})"
        if index == crashed_at:  # timed out, or the kernel died in it
            return ExerciseResult(name, False, f"the {where} did not finish: {stopped}", "failed")
        error = _error(cell)
        if error is None:
            continue
        if error["ename"] == ExerciseNotDone.__name__:
            return ExerciseResult(name, False, not_done, "not done")
        if role == CHECK and error["ename"] == "AssertionError":
            reason = error["evalue"] or _failing_line(error) or "an assert failed"
            return ExerciseResult(name, False, f"check failed: {reason}", "failed")
        return ExerciseResult(
            name, False, f"the {where} raised {error['ename']}: {error['evalue']}", "failed"
        )
    return ExerciseResult(name, True)


def _meta(cell: NotebookNode) -> dict:
    return cell.get("metadata", {}).get("papermill", {})


def _error(cell: NotebookNode) -> dict | None:
    """The cell's error output (ename, evalue, traceback), if it raised."""
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            if out.get("ename") == "SystemExit" and out.get("evalue") in ("", "0"):
                continue
            return out
    return None


def _failing_line(error: dict) -> str | None:
    """The code line a bare ``assert`` failed on, from IPython's traceback ("----> 3 assert ...")."""
    for frame in reversed(error.get("traceback", [])):
        for line in reversed(_ANSI.sub("", frame).splitlines()):
            match = re.match(r"\s*-+>\s*(\d+)\s(.*)$", line)
            if match:
                return f"{match.group(2).strip()} (line {match.group(1)})"
    return None


def format_report(report: CheckReport) -> str:
    """The report as text: one PASS/FAIL line per exercise, then a verdict."""
    lines = [
        f"PASS {e.name}" if e.passed else f"FAIL {e.name}: {e.error}" for e in report.exercises
    ]
    if report.stopped:
        lines.append(f"stopped: {report.stopped}")
    passed = sum(e.passed for e in report.exercises)
    total = len(report.exercises)
    verdict = "all pass" if report.ok else f"{passed} of {total} pass"
    lines.append(f"{Path(report.notebook).name}: {total} exercise{'s' * (total != 1)}, {verdict}")
    if report.output:
        lines.append(f"executed notebook: {report.output}")
    return "\n".join(lines)
