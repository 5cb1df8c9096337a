"""Workshop mode on tiny throwaway notebooks: exercise tags, student stubs, the checker, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from labkit import cli
from labkit.course import workshop, workshop_check, workshop_student
from labkit.errors import ParameterError

KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}

TOTAL = """\
# Exercise: add up the chunks, the way a ring all-reduce would.
# Hint: one pass over xs.
def total(xs):  # keep
    s = 0
    for x in xs:
        s += x
    return s"""

MEAN = """\
# Exercise: the mean of data, using total().
mean = total(data) / len(data)"""


def course_notebook(path: Path, total: str = TOTAL, mean: str = MEAN, middle: str = "") -> Path:
    """A notebook: parameters, a normal cell, exercises "total" and "mean", a last cell."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = KERNELSPEC
    params = nbformat.v4.new_code_cell("n = 4")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [
        nbformat.v4.new_markdown_cell("# 00 · Exercises"),
        params,
        nbformat.v4.new_code_cell("data = list(range(n))"),
        workshop.solution_cell(total, "total"),
        workshop.check_cell("assert total(data) == n * (n - 1) // 2", "total"),
        *([nbformat.v4.new_code_cell(middle)] if middle else []),
        workshop.solution_cell(mean, "mean"),
        workshop.check_cell("assert mean == (n - 1) / 2, f'mean is {mean}, not {(n - 1) / 2}'",
                            "mean"),
        nbformat.v4.new_code_cell("print('the end, n =', n)"),
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def fill_in(student: Path, target: Path, answers: dict[str, str]) -> Path:
    """The learner's copy: the solution cells of ``answers`` replaced by the learner's code."""
    nb = nbformat.read(student, as_version=4)
    for exercise in workshop.find_exercises(nb):
        if exercise.name in answers:
            nb.cells[exercise.solution].source = answers[exercise.name]
    nbformat.write(nb, target)
    return target


def student_copy(instructor: Path, target: Path) -> Path:
    nb = nbformat.read(instructor, as_version=4)
    nbformat.write(workshop_student.make_student_copy(nb, instructor.stem), target)
    return target


def results(report: workshop.CheckReport) -> list[tuple[str, str]]:
    return [(e.name, e.status) for e in report.exercises]


# --- tags and stubs (no kernel) --------------------------------------------------------------


def test_tags_and_find_exercises(tmp_path):
    nb = nbformat.read(course_notebook(tmp_path / "00_ex.ipynb"), as_version=4)
    assert nb.cells[3].metadata["tags"] == ["solution", "exercise:total"]
    assert nb.cells[4].metadata["tags"] == ["check", "exercise:total"]
    assert workshop.find_exercises(nb) == [
        workshop.Exercise("total", 3, 4),
        workshop.Exercise("mean", 5, 6),
    ]
    cell = nbformat.v4.new_code_cell("x = 1")
    cell.metadata["tags"] = ["keep-me", "check", "exercise:old"]
    assert workshop.mark(cell, "solution", "new").metadata["tags"] == [
        "keep-me", "solution", "exercise:new"]
    with pytest.raises(ParameterError, match="exercise name 'two words'"):
        workshop.solution_cell("x = 1", "two words")


def _tagged(*tags: str, source: str = "x = 1", kind: str = "code") -> nbformat.NotebookNode:
    make = nbformat.v4.new_code_cell if kind == "code" else nbformat.v4.new_markdown_cell
    cell = make(source)
    cell.metadata["tags"] = list(tags)
    return cell


@pytest.mark.parametrize(
    ("cells", "message"),
    [
        ([("solution", "exercise:a")],
         "00_ex: exercise 'a' has a solution cell \\(cell 1\\) but no check cell"),
        ([("check", "exercise:a")],
         "00_ex: exercise 'a' has a check cell \\(cell 1\\) but no solution cell"),
        ([("check", "exercise:a"), ("solution", "exercise:a")],
         "00_ex: exercise 'a': its check \\(cell 1\\) comes before its solution \\(cell 2\\)"),
        ([("solution", "exercise:a"), ("check", "exercise:a"), ("check", "exercise:a")],
         "00_ex: exercise 'a' has 2 check cells \\(cell 2, cell 3\\)"),
        ([("solution",)], "00_ex: cell 1 is tagged 'solution' with no exercise name"),
        ([("check", "exercise:a", "exercise:b")], "with more than one exercise name"),
        ([("exercise:a",)], "00_ex: cell 1 is tagged exercise:a but neither 'solution' nor"),
        ([("solution", "check", "exercise:a")], "tagged both 'solution' and 'check'"),
        ([("solution", "exercise:a", "parameters")], "must not be the parameters cell"),
    ],
)
def test_mismatched_tags_are_a_clear_error(cells, message):
    nb = nbformat.v4.new_notebook()
    nb.cells = [_tagged(*tags) for tags in cells]
    with pytest.raises(ParameterError, match=message):
        workshop.find_exercises(nb, "00_ex")
    with pytest.raises(ParameterError, match=message):
        workshop_student.make_student_copy(nb, "00_ex")


def test_markdown_exercise_cell_is_an_error():
    nb = nbformat.v4.new_notebook()
    nb.cells = [_tagged("solution", "exercise:a", kind="markdown"), _tagged("check", "exercise:a")]
    with pytest.raises(ParameterError, match="cell 1 \\(exercise 'a'\\) must be a code cell"):
        workshop.find_exercises(nb, "00_ex")


def test_stub_keeps_instructions_and_keep_lines(tmp_path):
    assert workshop_student.stub_source(TOTAL, "total") == (
        "# Exercise: add up the chunks, the way a ring all-reduce would.\n"
        "# Hint: one pass over xs.\n"
        "from labkit.course.workshop import ExerciseNotDone\n"
        "def total(xs):  # keep\n"
        '    raise ExerciseNotDone("total")'
    )
    assert workshop_student.stub_source(MEAN, "mean").splitlines()[1:] == [
        "from labkit.course.workshop import ExerciseNotDone",
        'raise ExerciseNotDone("mean")',
    ]
    two = "import math  # keep\n\ndef f(x):  # keep\n    return x\n\n\ndef g():  # keep\n    pass"
    assert workshop_student.stub_source(two, "two") == (
        "from labkit.course.workshop import ExerciseNotDone\nimport math  # keep\n\ndef f(x):  # keep\n"
        '    raise ExerciseNotDone("two")\n\n\ndef g():  # keep\n    raise ExerciseNotDone("two")'
    )
    # a student copy of a student copy is the same copy
    instructor = nbformat.read(course_notebook(tmp_path / "00_ex.ipynb"), as_version=4)
    student = workshop_student.make_student_copy(instructor, "00_ex")
    assert workshop_student.make_student_copy(student, "00_ex") == student
    assert instructor.cells[3].source == TOTAL  # the original is untouched


def test_student_copy_strips_outputs_and_refuses_a_broken_stub():
    nb = nbformat.v4.new_notebook()
    sol = workshop.solution_cell("# write f\nif True:\n    f = lambda: 1  # keep", "f")
    sol.outputs = [nbformat.v4.new_output("stream", text="1\n")]
    sol.execution_count = 3
    nb.cells = [sol, workshop.check_cell("assert f() == 1", "f")]
    with pytest.raises(ParameterError, match="00_ex: exercise 'f': the student stub .*# keep"):
        workshop_student.make_student_copy(nb, "00_ex")  # `raise` then an indented line
    sol.source = "# write f\nif True:  # keep\n    f = lambda: 1  # keep"
    student = workshop_student.make_student_copy(nb, "00_ex")
    assert student.cells[0].outputs == [] and student.cells[0].execution_count is None
    assert sol.outputs  # the original keeps its outputs


def test_not_done_message_names_the_exercise():
    exc = workshop.ExerciseNotDone("ring_sum")
    assert exc.exercise == "ring_sum"
    assert str(exc) == ("exercise 'ring_sum' is not done yet: write your solution in this cell, "
                        "then run the check cell below")


# --- the checker (each test runs one short kernel) -------------------------------------------


@pytest.mark.notebook
def test_instructor_copy_passes_every_check(tmp_path):
    nbdir = tmp_path / "notebooks"
    path = course_notebook(nbdir / "00_ex.ipynb")
    (nbdir / "smoke.yml").write_text("00_ex: {n: 6}\n")
    report = workshop_check.check_notebook(path, smoke=True, output=tmp_path / "executed.ipynb")
    assert report.ok, workshop_check.format_report(report)
    assert results(report) == [("total", "passed"), ("mean", "passed")]
    assert report.stopped is None and all(e.error is None for e in report.exercises)
    executed = nbformat.read(tmp_path / "executed.ipynb", as_version=4)
    injected = [c for c in executed.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert "n = 6" in injected[0].source  # smoke size from smoke.yml
    assert "the end, n = 6" in executed.cells[-1].outputs[0]["text"]
    assert workshop_check.format_report(report).splitlines() == [
        "PASS total", "PASS mean", "00_ex.ipynb: 2 exercises, all pass",
        f"executed notebook: {tmp_path / 'executed.ipynb'}",
    ]


@pytest.mark.notebook
def test_student_copy_fails_each_check_as_not_done(tmp_path):
    instructor = course_notebook(tmp_path / "notebooks" / "00_ex.ipynb")
    student = student_copy(instructor, tmp_path / "00_ex.ipynb")
    report = workshop_check.check_notebook(student, output=tmp_path / "executed.ipynb")
    assert not report.ok
    assert results(report) == [("total", "not done"), ("mean", "not done")]
    for e in report.exercises:
        assert e.error.startswith(f"exercise '{e.name}' is not done yet")
    assert report.stopped is None  # the run went on to the end
    lines = workshop_check.format_report(report).splitlines()
    assert lines[0].startswith("FAIL total: exercise 'total' is not done yet")
    assert lines[2] == "00_ex.ipynb: 2 exercises, 0 of 2 pass"
    # the kept notebook shows the learner's errors, without the checker's own marks
    executed = nbformat.read(tmp_path / "executed.ipynb", as_version=4)
    assert [c.metadata.get("tags") for c in executed.cells[3:5]] == [
        ["solution", "exercise:total"], ["check", "exercise:total"]]
    assert executed.cells[4].outputs[0]["ename"] == "ExerciseNotDone"
    assert not any("labkit_cell" in c.metadata for c in executed.cells)
    assert not any("papermill-error-cell-tag" in c.metadata.get("tags", [])
                   for c in executed.cells)


@pytest.mark.notebook
def test_filled_in_solutions_pass(tmp_path):
    instructor = course_notebook(tmp_path / "notebooks" / "00_ex.ipynb")
    student = student_copy(instructor, tmp_path / "student.ipynb")
    answers = {"total": "def total(xs):\n    return sum(xs)", "mean": "mean = sum(data) / n"}
    report = workshop_check.check_notebook(fill_in(student, tmp_path / "00_ex.ipynb", answers),
                                     parameters={"n": 10})
    assert report.ok, workshop_check.format_report(report)
    assert results(report) == [("total", "passed"), ("mean", "passed")]


@pytest.mark.notebook
def test_wrong_and_missing_solutions_fail_with_the_reason(tmp_path):
    instructor = course_notebook(tmp_path / "notebooks" / "00_ex.ipynb")
    student = student_copy(instructor, tmp_path / "student.ipynb")
    answers = {"total": "def total(xs):\n    return 0", "mean": "mean = 7"}
    report = workshop_check.check_notebook(fill_in(student, tmp_path / "00_ex.ipynb", answers))
    assert results(report) == [("total", "failed"), ("mean", "failed")]
    total, mean = report.exercises
    assert total.error == "check failed: assert total(data) == n * (n - 1) // 2 (line 1)"
    assert mean.error == "check failed: mean is 7, not 1.5"
    assert not report.ok and report.stopped is None


@pytest.mark.notebook
def test_a_failing_normal_cell_stops_the_run(tmp_path):
    """A cell outside the exercises that uses an unfinished solution stops the run there."""
    instructor = course_notebook(tmp_path / "notebooks" / "00_ex.ipynb",
                                 middle="print(total([1, 2]))")
    student = student_copy(instructor, tmp_path / "student.ipynb")
    answers = {"mean": "mean = 1.5"}
    report = workshop_check.check_notebook(fill_in(student, tmp_path / "00_ex.ipynb", answers))
    assert results(report) == [("total", "not done"), ("mean", "not run")]
    assert report.stopped.startswith("cell 6 raised ExerciseNotDone: exercise 'total'")
    assert report.exercises[1].error.startswith("not run: the notebook stopped at cell 6")
    assert "stopped: cell 6 raised ExerciseNotDone" in workshop_check.format_report(report)


@pytest.mark.slow
@pytest.mark.notebook
def test_a_check_that_times_out_fails_and_stops_the_run(tmp_path):
    path = course_notebook(tmp_path / "00_ex.ipynb", mean="import time\ntime.sleep(30)")
    report = workshop_check.check_notebook(path, timeout=1)
    assert results(report) == [("total", "passed"), ("mean", "failed")]
    assert report.exercises[1].error.startswith(
        "the solution cell (cell 6) did not finish: cell 6: CellTimeoutError")
    assert report.stopped.startswith("cell 6: CellTimeoutError") and not report.ok


# --- the command line ------------------------------------------------------------------------


def test_cli_student_writes_copies_and_refuses_notebooks(tmp_path, capsys):
    nbdir = tmp_path / "notebooks"
    course_notebook(nbdir / "00_ex.ipynb")
    plain = nbformat.v4.new_notebook()
    plain.cells = [nbformat.v4.new_code_cell("x = 1")]
    nbformat.write(plain, nbdir / "01_plain.ipynb")
    (nbdir / "smoke.yml").write_text("00_ex: {}\n01_plain: {}\n")
    out = tmp_path / "student"

    assert cli.main(["course", "student", "--notebooks", str(nbdir), "--out", str(out)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "00_ex.ipynb: 2 exercises", "01_plain.ipynb: 0 exercises",
        f"wrote 2 student copies to {out}",
    ]
    copy = nbformat.read(out / "00_ex.ipynb", as_version=4)
    assert 'raise ExerciseNotDone("total")' in copy.cells[3].source
    assert (out / "smoke.yml").read_text() == (nbdir / "smoke.yml").read_text()

    # a learner's work is not overwritten without --force; one notebook by id
    (out / "00_ex.ipynb").write_text("my work")
    args = ["course", "student", "--notebooks", str(nbdir), "--out", str(out), "00"]
    assert cli.main(args) == 2
    assert "already has 00_ex.ipynb" in capsys.readouterr().err
    assert (out / "00_ex.ipynb").read_text() == "my work"
    assert cli.main([*args, "--force"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"wrote 1 student copy to {out}"

    before = (nbdir / "00_ex.ipynb").read_text()
    assert cli.main(["course", "student", "--notebooks", str(nbdir), "--out", str(nbdir)]) == 2
    assert "refusing to write student copies into" in capsys.readouterr().err
    assert (nbdir / "00_ex.ipynb").read_text() == before


@pytest.mark.slow
@pytest.mark.notebook
def test_cli_check_exit_codes(tmp_path, capsys):
    nbdir = tmp_path / "notebooks"
    course_notebook(nbdir / "00_ex.ipynb")
    (nbdir / "smoke.yml").write_text("00_ex: {n: 3}\n")
    out = tmp_path / "student"
    assert cli.main(["course", "student", "--notebooks", str(nbdir), "--out", str(out)]) == 0
    capsys.readouterr()

    # the instructor copy, by id in --notebooks
    assert cli.main(["course", "check", "00", "--notebooks", str(nbdir), "--smoke"]) == 0
    assert capsys.readouterr().out.splitlines()[:2] == ["PASS total", "PASS mean"]

    # the student copy, as JSON
    assert cli.main(["course", "check", str(out / "00_ex.ipynb"), "--smoke", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False
    assert [(e["name"], e["passed"], e["status"]) for e in report["exercises"]] == [
        ("total", False, "not done"), ("mean", False, "not done")]

    # no exercises, no such file: an error before anything runs
    plain = nbformat.v4.new_notebook()
    nbformat.write(plain, tmp_path / "plain.ipynb")
    assert cli.main(["course", "check", str(tmp_path / "plain.ipynb")]) == 2
    assert "plain has no exercises" in capsys.readouterr().err
    assert cli.main(["course", "check", str(tmp_path / "nope.ipynb")]) == 2
    assert "no notebook at" in capsys.readouterr().err
