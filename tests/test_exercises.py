"""The course's exercises (workshop mode), without a kernel: each course notebook has at least one,
tagged right, with a student stub that compiles; every exercise is self-contained, so its solution
and check cells pass when exec'd on their own, and its stub then the check fail as not done."""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat
import psutil
import pytest

from labkit.course import workshop, workshop_student

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
COURSE = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def run_cells(path: Path, name: str, *sources: str) -> dict:
    """Exec ``sources`` one after the other in one fresh namespace, as a kernel would."""
    namespace: dict = {"__name__": "__main__"}
    for role, source in zip(("solution", "check"), sources, strict=True):
        exec(compile(source, f"<{path.stem} {name} {role}>", "exec"), namespace)
    return namespace


def test_every_course_notebook_is_covered():
    assert [p.name[:2] for p in COURSE] == [f"{i:02d}" for i in range(len(COURSE))]


@pytest.mark.parametrize("path", COURSE, ids=lambda p: p.stem)
def test_notebook_exercises(path: Path, capsys):
    nb = nbformat.read(path, as_version=4)
    exercises = workshop.find_exercises(nb, path.stem)  # validates the tags
    assert exercises, f"{path.name} has no exercise"
    student = workshop_student.make_student_copy(nb, path.stem)  # ParameterError if a stub does not compile
    for exercise in exercises:
        name = exercise.name
        intro = nb.cells[exercise.solution - 1]
        assert intro.cell_type == "markdown" and intro.source.startswith(f"**Exercise ({name}).**"), (
            f"{path.name}: exercise {name!r} needs a markdown cell '**Exercise ({name}).** ...' "
            "right before its solution")
        solution, check = nb.cells[exercise.solution], nb.cells[exercise.check]
        assert not solution.outputs and not check.outputs, f"{path.name}: {name} has outputs"
        assert solution.source.startswith("#"), f"{path.name}: {name}: state the task in comments"
        stub = student.cells[exercise.solution].source
        assert stub.splitlines()[0] == solution.source.splitlines()[0]
        assert student.cells[exercise.check].source == check.source

        # self-contained: the instructor's solution and the check pass with nothing else run,
        # and start nothing (a server started here would outlive the check)
        before = {child.pid for child in psutil.Process().children(recursive=True)}
        run_cells(path, name, solution.source, check.source)
        started = [f"{c.pid}: {' '.join(c.cmdline())}" for c in psutil.Process().children(recursive=True)
                   if c.pid not in before]
        assert not started, f"{path.name}: exercise {name!r} left processes running: {started}"

        # the learner's copy as handed out: not done, naming this exercise
        with pytest.raises(workshop.ExerciseNotDone) as not_done:
            run_cells(path, name, stub, check.source)
        assert not_done.value.exercise == name
    capsys.readouterr()  # what the checks print


def _parse(source: str) -> ast.Module:
    """A cell as Python, IPython magics and shell lines left out."""
    return ast.parse("\n".join("" if line.lstrip().startswith(("%", "!")) else line
                               for line in source.splitlines()))


def _module_bindings(source: str) -> set[str]:
    """Names a cell binds in the notebook's namespace (not inside its functions)."""
    found: set[str] = set()
    scopes = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.ListComp,
              ast.SetComp, ast.DictComp, ast.GeneratorExp)

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                found.add(child.name)
            if isinstance(child, scopes):
                continue
            if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
                found.add(child.id)
            visit(child)

    visit(_parse(source))
    return found


def _names(source: str, stored_only: bool) -> set[str]:
    """Names a cell binds anywhere (``stored_only``) or mentions at all."""
    found = set()
    for node in ast.walk(_parse(source)):
        if isinstance(node, ast.Name) and (not stored_only or isinstance(node.ctx, ast.Store)):
            found.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            found.add(node.name)
        elif isinstance(node, ast.arg):  # a function's parameters are bound in it
            found.add(node.arg)
    return found


@pytest.mark.parametrize("path", COURSE, ids=lambda p: p.stem)
def test_exercises_do_not_touch_the_lesson_names(path: Path):
    """An exercise that rebinds a name another cell reads without binding it (a parameter, a
    result) would break the cells after it in the instructor's copy, and differently in the
    student's. (Loop variables that each cell binds for itself are fine.)"""
    nb = nbformat.read(path, as_version=4)
    exercise_cells = {i for e in workshop.find_exercises(nb, path.stem) for i in (e.solution, e.check)}
    bound = set().union(*(_module_bindings(nb.cells[i].source) for i in exercise_cells))
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and i not in exercise_cells:
            free = _names(cell.source, stored_only=False) - _names(cell.source, stored_only=True)
            shared = bound & free  # read there without being bound there first
            assert not shared, f"{path.name}: exercise cells bind {sorted(shared)}, used by cell {i}"
