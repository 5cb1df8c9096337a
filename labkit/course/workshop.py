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

This module marks and finds exercises; ``workshop_student`` writes the student copies and
``workshop_check`` checks them.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from labkit.errors import ParameterError

if TYPE_CHECKING:
    from nbformat import NotebookNode

SOLUTION = "solution"

CHECK = "check"

EXERCISE_PREFIX = "exercise:"

KEEP = re.compile(r"#\s*keep\s*$")


"""A solution line ending in ``# keep`` survives into the student copy as it is."""


_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")

STUB_IMPORT = "from labkit.course.workshop import ExerciseNotDone"






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
