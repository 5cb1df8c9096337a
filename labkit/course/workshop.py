"""Workshop mode: exercises in the course notebooks, student copies, and a checker.

How a notebook author marks an exercise (two code cells, the check after the solution)::

    solution cell   tags: ["solution", "exercise:<name>"]
    check cell      tags: ["check", "exercise:<name>"]     (asserts on what the solution made)

``<name>`` is short and unique in the notebook (letters, digits, ``_ . -``; e.g. ``ring_sum``).
In JupyterLab: property inspector (gear icon) > Common Tools > Cell Tags, add both tags. A script
that builds notebooks uses :func:`solution_cell` and :func:`check_cell` (or :func:`mark`). A
notebook may have several exercises.

The solution cell is written as the instructor's answer. Its student copy
(:func:`make_student_copy`) keeps the cell's leading comment lines (write the instructions
there) and every line ending in ``# keep`` (a function signature the check calls, a given
import), and replaces the rest by ``raise ExerciseNotDone("<name>")``::

    # Exercise: sum the chunks the way a ring all-reduce would.       (kept: leading comments)
    def ring_sum(chunks):  # keep                                     (kept)
        return sum(chunks)                                            (-> raise ExerciseNotDone)

:func:`check_notebook` (``labkit course check``) runs a learner's copy headless with papermill,
like ``labkit course run`` does, but an exercise that fails does not stop the run: the solution
and check cells get nbclient's ``raises-exception`` tag in a throwaway copy, so their code runs
exactly as written (same line numbers in tracebacks) and their errors are read back from the
executed notebook. Any other cell that raises still stops the run, and the report names it.
"""

from __future__ import annotations

import ast
import copy
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from labkit.errors import ParameterError

if TYPE_CHECKING:
    from nbformat import NotebookNode

# Imported by every student stub in the learner's kernel, so this module stays light: nbformat,
# papermill and labkit.course.runner (seconds to import) are imported where they are used.

SOLUTION = "solution"
CHECK = "check"
EXERCISE_PREFIX = "exercise:"
KEEP = re.compile(r"#\s*keep\s*$")
"""A solution line ending in ``# keep`` survives into the student copy as it is."""

_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_IMPORT = "from labkit.course.workshop import ExerciseNotDone"
_RAISES = "raises-exception"  # nbclient: an error in this cell is recorded, the run goes on
_ERROR_MARKER = "papermill-error-cell-tag"  # papermill.execute.ERROR_MARKER_TAG
_INDEX = "labkit_cell"  # metadata key: the cell's position in the learner's notebook
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class ExerciseNotDone(NotImplementedError):
    """Raised by a student copy's solution stub until the learner writes the solution."""

    def __init__(self, exercise: str) -> None:
        self.exercise = exercise
        super().__init__(
            f"exercise {exercise!r} is not done yet: write your solution in this cell, "
            "then run the check cell below"
        )


@dataclass(frozen=True)
class Exercise:
    """One exercise of a notebook: its name and its two cells (0-based positions)."""

    name: str
    solution: int
    check: int


@dataclass
class ExerciseResult:
    """How one exercise went. ``status``: "passed", "failed", "not done" or "not run"."""

    name: str
    passed: bool
    error: str | None = None
    status: str = "passed"

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class CheckReport:
    """The outcome of :func:`check_notebook`.

    ``stopped`` says where the run stopped early (a cell outside the exercises raised, a cell
    timed out, the kernel died); exercises after that point are "not run". ``output`` is the
    executed notebook when the caller asked to keep it.
    """

    notebook: str
    exercises: list[ExerciseResult] = field(default_factory=list)
    stopped: str | None = None
    output: str | None = None

    @property
    def ok(self) -> bool:
        """True when every exercise passed and the notebook ran to its end."""
        return self.stopped is None and all(e.passed for e in self.exercises)

    def to_dict(self) -> dict:
        return {
            "notebook": self.notebook,
            "ok": self.ok,
            "stopped": self.stopped,
            "output": self.output,
            "exercises": [e.to_dict() for e in self.exercises],
        }


# --- marking exercises (for notebook authors and builder scripts) --------------------------


def mark(cell: NotebookNode, role: str, name: str) -> NotebookNode:
    """Tag ``cell`` as the ``role`` ("solution" or "check") of exercise ``name``; returns it."""
    if role not in (SOLUTION, CHECK):
        raise ParameterError(f"an exercise cell is a {SOLUTION!r} or a {CHECK!r}, not {role!r}")
    if not _NAME.fullmatch(name):
        raise ParameterError(
            f"exercise name {name!r}: use letters, digits, '_', '.', '-' (e.g. ring_sum)"
        )
    tags = [
        t for t in cell.metadata.get("tags", [])
        if t not in (SOLUTION, CHECK) and not t.startswith(EXERCISE_PREFIX)
    ]
    cell.metadata["tags"] = [*tags, role, EXERCISE_PREFIX + name]
    return cell


def solution_cell(source: str, name: str) -> NotebookNode:
    """A new code cell holding the instructor's solution of exercise ``name``."""
    import nbformat

    return mark(nbformat.v4.new_code_cell(source), SOLUTION, name)


def check_cell(source: str, name: str) -> NotebookNode:
    """A new code cell holding the asserts that check exercise ``name``."""
    import nbformat

    return mark(nbformat.v4.new_code_cell(source), CHECK, name)


def _role(cell: NotebookNode, where: str) -> tuple[str, str] | None:
    """(role, name) when ``cell`` is an exercise cell, None otherwise; ParameterError if half-marked."""
    tags = cell.get("metadata", {}).get("tags", [])
    roles = [t for t in tags if t in (SOLUTION, CHECK)]
    names = [t[len(EXERCISE_PREFIX):] for t in tags if t.startswith(EXERCISE_PREFIX)]
    if not roles and not names:
        return None
    if len(roles) != 1:
        if not roles:
            raise ParameterError(
                f"{where} is tagged {EXERCISE_PREFIX}{names[0]} but neither {SOLUTION!r} nor "
                f"{CHECK!r}: add one of those tags"
            )
        raise ParameterError(f"{where} is tagged both {SOLUTION!r} and {CHECK!r}: keep one")
    role = roles[0]
    if len(names) != 1:
        what = "no" if not names else "more than one"
        raise ParameterError(
            f"{where} is tagged {role!r} with {what} exercise name: give it exactly one tag "
            f"like {EXERCISE_PREFIX}ring_sum"
        )
    name = names[0]
    if not _NAME.fullmatch(name):
        raise ParameterError(
            f"{where}: exercise name {name!r}: use letters, digits, '_', '.', '-' (e.g. ring_sum)"
        )
    if cell.get("cell_type") != "code":
        raise ParameterError(f"{where} (exercise {name!r}) must be a code cell")
    if "parameters" in tags:
        raise ParameterError(f"{where} (exercise {name!r}) must not be the parameters cell")
    return role, name


def find_exercises(nb: NotebookNode, notebook: str = "notebook") -> list[Exercise]:
    """The exercises of ``nb`` in notebook order, validated.

    Every solution needs exactly one check of the same name after it, and every check a
    solution; ``notebook`` names the notebook in the ParameterError otherwise.
    """
    cells: dict[str, dict[str, list[int]]] = {}
    for i, cell in enumerate(nb.cells):
        marked = _role(cell, f"{notebook}: cell {i + 1}")
        if marked:
            role, name = marked
            cells.setdefault(name, {SOLUTION: [], CHECK: []})[role].append(i)
    exercises = []
    for name, found in cells.items():
        for role, other in ((SOLUTION, CHECK), (CHECK, SOLUTION)):
            at = ", ".join(f"cell {i + 1}" for i in found[role])
            if len(found[role]) > 1:
                raise ParameterError(
                    f"{notebook}: exercise {name!r} has {len(found[role])} {role} cells "
                    f"({at}); it needs exactly one (rename the other exercise)"
                )
            if not found[role]:
                raise ParameterError(
                    f"{notebook}: exercise {name!r} has a {other} cell "
                    f"(cell {found[other][0] + 1}) but no {role} cell: tag one "
                    f"{role!r} and {EXERCISE_PREFIX}{name}"
                )
        solution, check = found[SOLUTION][0], found[CHECK][0]
        if check < solution:
            raise ParameterError(
                f"{notebook}: exercise {name!r}: its check (cell {check + 1}) comes before its "
                f"solution (cell {solution + 1}); the check must come after"
            )
        exercises.append(Exercise(name, solution, check))
    return sorted(exercises, key=lambda e: e.solution)


# --- student copies --------------------------------------------------------------------------


def stub_source(source: str, name: str) -> str:
    """The student version of a solution cell's ``source`` (see the module docstring)."""
    lines = source.splitlines()
    head = 0
    while head < len(lines) and (not lines[head].strip() or lines[head].lstrip().startswith("#")):
        head += 1
    out = lines[:head]
    while out and not out[-1].strip():
        out.pop()
    out.append(_IMPORT)
    raise_line = f'raise ExerciseNotDone("{name}")'
    raised = False
    dropping = False
    blanks: list[str] = []
    for line in lines[head:]:
        if not line.strip():
            blanks.append(line)
            continue
        if line.strip() == _IMPORT:  # already a student copy: the import is there once
            blanks = []
            continue
        if KEEP.search(line):
            out.extend(blanks)
            out.append(line)
            dropping = False
        elif not dropping:  # a run of solution lines becomes one raise, at its indentation
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}{raise_line}")
            raised = dropping = True
        blanks = []
    if not raised:
        out.append(raise_line)
    return "\n".join(out)


def _compiles(source: str) -> str | None:
    """None when ``source`` is valid IPython cell code (magics, top-level await), else why not."""
    from IPython.core.inputtransformer2 import TransformerManager

    try:
        code = TransformerManager().transform_cell(source)
        compile(code, "<cell>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    except SyntaxError as exc:
        return f"{exc.msg} (line {exc.lineno})"
    return None


def make_student_copy(nb: NotebookNode, notebook: str = "notebook") -> NotebookNode:
    """A copy of ``nb`` with every solution stubbed out and all outputs cleared.

    Raises ParameterError when the exercises are mis-tagged, or when a stub would not be valid
    Python (mark the lines it needs, such as a ``def`` line, with ``# keep``).
    """
    student = copy.deepcopy(nb)
    for exercise in find_exercises(student, notebook):
        cell = student.cells[exercise.solution]
        cell.source = stub_source(cell.source, exercise.name)
        problem = _compiles(cell.source)
        if problem:
            raise ParameterError(
                f"{notebook}: exercise {exercise.name!r}: the student stub of its solution "
                f"(cell {exercise.solution + 1}) is not valid Python: {problem}; end the lines "
                "it needs (a def line, a with line) with `# keep`"
            )
    for cell in student.cells:
        if cell.get("cell_type") == "code":
            cell.outputs = []
            cell.execution_count = None
        for key in ("papermill", "execution"):
            cell.get("metadata", {}).pop(key, None)
    student.metadata.pop("papermill", None)
    return student


def write_student_copies(
    notebooks_dir: str | Path = "notebooks",
    out: str | Path = "student",
    only: list[str] | None = None,
    force: bool = False,
) -> list[tuple[Path, int]]:
    """Write the student copy of each selected notebook into ``out`` (same file names).

    Returns (written path, number of exercises) per notebook. ``smoke.yml`` is copied along so
    ``labkit course check --smoke`` works there. Refuses ``out`` = the notebooks folder, and
    existing copies (a learner's work) unless ``force``. Everything is checked before writing.
    """
    import nbformat

    from labkit.course import runner as course

    notebooks_dir = Path(notebooks_dir).resolve()
    out = Path(out).resolve()
    if out == notebooks_dir:
        raise ParameterError(
            f"refusing to write student copies into {notebooks_dir} itself: that would replace "
            "the solutions; pass another --out folder"
        )
    notebooks = course.find_notebooks(notebooks_dir)
    if not notebooks:
        raise ParameterError(f"no NN_name.ipynb notebooks in {notebooks_dir}")
    copies = []
    for path in course.select(notebooks, only):
        nb = nbformat.read(path, as_version=4)
        student = make_student_copy(nb, path.stem)
        copies.append((out / path.name, student, len(find_exercises(student, path.stem))))
    existing = [p.name for p, _, _ in copies if p.exists()]
    if existing and not force:
        raise ParameterError(
            f"{out} already has {', '.join(existing)}: a learner may have worked in them; "
            "pass --force to overwrite"
        )
    out.mkdir(parents=True, exist_ok=True)
    for path, student, _ in copies:
        nbformat.write(student, path)
    smoke = notebooks_dir / course.SMOKE_FILE
    if smoke.is_file():
        shutil.copyfile(smoke, out / course.SMOKE_FILE)
    return [(path, count) for path, _, count in copies]


# --- checking a learner's notebook -----------------------------------------------------------


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
