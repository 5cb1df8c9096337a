"""The course's exercises (workshop mode), without a kernel: each course notebook has at least one,
tagged right, with a student stub that compiles; every exercise is self-contained, so its solution
and check cells pass when exec'd on their own, and its stub then the check fail as not done."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from labkit import workshop

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
    student = workshop.make_student_copy(nb, path.stem)  # ParameterError if a stub does not compile
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

        # self-contained: the instructor's solution and the check pass with nothing else run
        run_cells(path, name, solution.source, check.source)

        # the learner's copy as handed out: not done, naming this exercise
        with pytest.raises(workshop.ExerciseNotDone) as not_done:
            run_cells(path, name, stub, check.source)
        assert not_done.value.exercise == name
    capsys.readouterr()  # what the checks print
