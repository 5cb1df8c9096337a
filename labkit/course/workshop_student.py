"""Student copies of the course: each exercise's solution cell keeps its leading comments (the
instructions) and every ``# keep`` line, and raises ``ExerciseNotDone`` otherwise
(``labkit course student --out DIR``).
"""

from __future__ import annotations

import ast
import copy
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from labkit.errors import ParameterError

if TYPE_CHECKING:
    from nbformat import NotebookNode
from labkit.course.workshop import KEEP, STUB_IMPORT, find_exercises


def stub_source(source: str, name: str) -> str:
    """The student version of a solution cell's ``source`` (see the module docstring)."""
    lines = source.splitlines()
    head = 0
    while head < len(lines) and (not lines[head].strip() or lines[head].lstrip().startswith("#")):
        head += 1
    out = lines[:head]
    while out and not out[-1].strip():
        out.pop()
    out.append(STUB_IMPORT)
    raise_line = f'raise ExerciseNotDone("{name}")'
    raised = False
    dropping = False
    blanks: list[str] = []
    for line in lines[head:]:
        if not line.strip():
            blanks.append(line)
            continue
        if line.strip() == STUB_IMPORT:  # already a student copy: the import is there once
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
