"""The course runner: executes the notebooks headless through papermill and keeps the results.

The course is ``notebooks/<NN>_<name>.ipynb``. Each notebook has one cell tagged ``parameters`` with
workshop-size defaults; ``notebooks/smoke.yml`` holds the small sizes CI runs (``smoke=True``).
Every run gets its own folder ``runs/<timestamp>/`` (``runs/latest`` points at the newest) with
the executed notebooks, their HTML exports, ``index.html`` and ``summary.json``. Everything is
validated before the first notebook starts, so a typo fails in a second, not after an hour.

Each notebook records the optional system programs it lacked on this machine (the table in
``labkit.course.programs``), so a run says what ran degraded. Ctrl-C or SIGTERM stops the run cleanly: the running
notebook's cell is interrupted, its kernel and every process the kernel started (torchrun agents,
ranks, servers: found by a mark in their environment) are ended, its temporary files go (each
notebook gets a ``TMPDIR`` of its own), and the run folder says which notebook was interrupted.
"""

from __future__ import annotations

import ast
import json
import re
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

import nbformat
import papermill
import yaml
from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
from nbconvert import HTMLExporter

from labkit.course import notes, programs
from labkit.course.execution import catching_signals, environment, lab_kernel, run_notebook
from labkit.course.pace import PACE_FILE, load_pace_file, scaled
from labkit.course.results import RESULTS_ENV
from labkit.course.run_folder import (
    NOT_RUN,
    CourseResult,
    NotebookResult,
    course_verdict,
    export_html,
    first_line,
    index_html,
    new_run_dir,
    point_latest,
    shown,
)
from labkit.errors import ParameterError

CELL_TIMEOUT_S = 3600.0


"""papermill's limit per cell: a backstop far above any cell's work (every launch in a cell has
its own limit), so a machine several times slower than this lab's still finishes."""


SMOKE_FILE = "smoke.yml"


"""The smoke sizes, next to the notebooks: notebook stem -> {parameter: value}."""


_NOTEBOOK_STEM = re.compile(r"^\d\d_")


"""Set to a fresh token for each notebook's kernel; every process it starts inherits it, which is
how the runner finds them all (even ones re-parented after their parent died) to end them."""


def find_notebooks(notebooks_dir: str | Path) -> list[Path]:
    """The course notebooks (``NN_name.ipynb``) in ``notebooks_dir``, in course order."""
    notebooks_dir = Path(notebooks_dir)
    if not notebooks_dir.is_dir():
        raise ParameterError(f"no notebooks folder at {notebooks_dir}")
    return sorted(p for p in notebooks_dir.glob("*.ipynb") if _NOTEBOOK_STEM.match(p.stem))


def _resolve(notebooks: list[Path], key: str) -> Path:
    """The notebook ``key`` names: its two-digit id ("03"), its stem, or its file name."""
    key = Path(str(key).strip()).name.removesuffix(".ipynb")
    if key.isdigit():
        matches = [p for p in notebooks if p.stem[:2] == key.zfill(2)]
    else:
        matches = [p for p in notebooks if p.stem == key]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise ParameterError(
            f"notebook id {key!r} is ambiguous: {', '.join(p.stem for p in matches)}; "
            "use the full name"
        )
    known = ", ".join(p.stem[:2] for p in notebooks) or "(none)"
    raise ParameterError(
        f"unknown notebook {key!r}; known ids: {known} (or a full name such as "
        f"{notebooks[0].stem if notebooks else '00_welcome_and_doctor'})"
    )


def select(notebooks: list[Path], only: list[str] | None) -> list[Path]:
    """The notebooks ``only`` names (ids like "03" or stems), in course order; all when None."""
    if only is None:
        return list(notebooks)
    chosen = {_resolve(notebooks, key) for key in only}
    return [p for p in notebooks if p in chosen]


def load_smoke_parameters(path: str | Path) -> dict[str, dict]:
    """Read ``smoke.yml``: notebook stem -> {parameter: value} (an empty entry means ``{}``)."""
    path = Path(path)
    if not path.is_file():
        raise ParameterError(f"no smoke sizes at {path}: create it (notebook stem -> parameters)")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ParameterError(f"{path} is not valid YAML: {exc}") from exc
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise ParameterError(f"{path} must map notebook names to parameters")
    smoke: dict[str, dict] = {}
    for stem, params in data.items():
        params = {} if params is None else params
        if not isinstance(params, dict):
            raise ParameterError(
                f"{path}: the entry for {stem!r} must be a mapping of parameters, like `n: 3`"
            )
        smoke[str(stem)] = params
    return smoke


def check_parameters(notebook_path: str | Path, params: Mapping[str, object]) -> None:
    """Raise ParameterError unless the notebook's ``parameters`` cell declares every name.

    papermill would only log a warning and run the workshop size anyway; an unknown name here is
    almost always a typo or a renamed parameter, so it is an error.
    """
    notebook_path = Path(notebook_path)
    name = notebook_path.stem
    nb = nbformat.read(notebook_path, as_version=4)
    tagged = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(tagged) != 1:
        raise ParameterError(
            f"{name}: needs exactly one cell tagged 'parameters', found {len(tagged)}"
        )
    try:
        declared = papermill.inspect_notebook(str(notebook_path))
    except ValueError as exc:  # papermill needs the kernelspec the notebook was saved with
        raise ParameterError(f"{name}: {exc} (open and save it in Jupyter)") from exc
    assigned = _assigned_names(tagged[0].source)
    if unparsed := [n for n in assigned if n not in declared]:
        raise ParameterError(
            f"{name}: papermill cannot read the parameter line(s) of {', '.join(unparsed)} "
            "(one `name = value  # comment` per line, no '=' in the comment)")
    unknown = [p for p in params if p not in declared]
    if unknown:
        raise ParameterError(
            f"{name}: unknown parameter{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(map(str, unknown))}; its parameters cell declares: "
            f"{', '.join(declared) or '(nothing)'}"
        )


def _assigned_names(source: str) -> list[str]:
    """The names a parameters cell assigns, in order."""
    try:
        body = ast.parse(source).body
    except SyntaxError as exc:
        raise ParameterError(f"the parameters cell is not valid Python: {exc}") from exc
    return [t.id for node in body if isinstance(node, ast.Assign)
            for t in node.targets if isinstance(t, ast.Name)]


def plan_course(
    notebooks_dir: str | Path = "notebooks",
    smoke: bool = False,
    only: list[str] | None = None,
    parameters_override: Mapping[str, Mapping[str, object]] | None = None,
    pace: float | None = None,
) -> list[tuple[Path, dict]]:
    """Validate a run without executing it: the selected notebooks and the parameters for each.

    Smoke sizes come from ``smoke.yml`` (every notebook needs an entry, and every entry a
    notebook); ``parameters_override`` (keyed by id or stem) goes on top; ``pace`` then scales
    each notebook's pace parameters (``pace.yml``, see ``labkit.course.pace``).
    """
    notebooks_dir = Path(notebooks_dir)
    notebooks = find_notebooks(notebooks_dir)
    if not notebooks:
        raise ParameterError(f"no NN_name.ipynb notebooks in {notebooks_dir}")
    selected = select(notebooks, only)
    params: dict[Path, dict] = {p: {} for p in selected}
    if smoke:
        smoke_file = notebooks_dir / SMOKE_FILE
        sizes = load_smoke_parameters(smoke_file)
        stems = {p.stem for p in notebooks}
        stray = sorted(set(sizes) - stems)
        if stray:
            raise ParameterError(
                f"{smoke_file}: {', '.join(stray)} names no notebook; "
                f"the notebooks are: {', '.join(sorted(stems))}"
            )
        missing = sorted(stems - set(sizes))
        if missing:
            raise ParameterError(
                f"{smoke_file}: no entry for {', '.join(missing)} (add `name: {{}}` if the "
                "workshop size is already small)"
            )
        for p in selected:
            params[p].update(sizes[p.stem])
    for key, values in (parameters_override or {}).items():
        p = _resolve(notebooks, key)
        if p not in params:
            raise ParameterError(f"parameters given for {p.stem}, which is not selected to run")
        if not isinstance(values, Mapping):
            raise ParameterError(f"parameters for {p.stem} must be a mapping, not {values!r}")
        params[p].update(values)
    if pace is not None:
        kinds = load_pace_file(notebooks_dir / PACE_FILE)
        for p in selected:
            params[p].update(scaled(p, params[p], kinds.get(p.stem, {}).get("pace", []), pace))
    for p in selected:
        check_parameters(p, params[p])
    return [(p, params[p]) for p in selected]


def run_course(
    notebooks_dir: str | Path = "notebooks",
    out: str | Path | None = None,
    smoke: bool = False,
    only: list[str] | None = None,
    cell_timeout: float | None = CELL_TIMEOUT_S,
    parameters_override: Mapping[str, Mapping[str, object]] | None = None,
    progress: bool = True,
    kernel_name: str | None = None,
    pace: float | None = None,
) -> CourseResult:
    """Execute the selected notebooks in order, each in a fresh kernel, and keep the results.

    Results go to ``runs/<timestamp>/`` at the repo root (``runs/latest`` then points there), or
    to ``out`` when given. A failing notebook is reported and the run goes on with the next one.
    Ctrl-C or SIGTERM (from the main thread) interrupts the running notebook, ends its processes
    and stops the run: the rest are "not run", ``interrupted_by`` says which signal.
    Raises ParameterError, before anything runs, on an unknown notebook, parameter or kernel.
    """
    notebooks_dir = Path(notebooks_dir).resolve()
    plan = plan_course(
        notebooks_dir, smoke=smoke, only=only, parameters_override=parameters_override, pace=pace
    )
    if kernel_name is not None:
        try:
            KernelSpecManager().get_kernel_spec(kernel_name)
        except NoSuchKernel as exc:
            raise ParameterError(f"no Jupyter kernel named {kernel_name!r}") from exc

    started = datetime.now().astimezone()
    if out is None:
        runs = notebooks_dir.parent / "runs"
        run_dir = new_run_dir(runs, started.strftime("%Y%m%d-%H%M%S"))
        point_latest(runs, run_dir)
    else:
        run_dir = Path(out).resolve()
        run_dir.mkdir(parents=True, exist_ok=True)

    course = CourseResult(
        run_dir=run_dir, started=started.isoformat(timespec="seconds"), smoke=smoke, pace=pace
    )
    statuses = programs.check_programs(versions=False)
    exporter = HTMLExporter()
    width = max(len(p.stem) for p, _ in plan)
    clock = time.perf_counter()
    env = environment(LABKIT_SMOKE="1" if smoke else None, **{RESULTS_ENV: str(run_dir)})
    with lab_kernel(kernel_name) as kernel, env, catching_signals() as signals:
        for i, (notebook, params) in enumerate(plan, 1):
            if signals.received is not None:
                course.results.append(NotebookResult(notebook.stem, NOT_RUN, 0.0, None, None))
                continue
            result = run_notebook(notebook, params, run_dir, kernel, cell_timeout, progress,
                                   signals)
            result.missing_programs = [s.program.name
                                       for s in programs.lacking(notebook.stem, statuses)]
            if not signals.hurry:
                result.html = export_html(exporter, run_dir, result.output)
            course.results.append(result)
            print(_progress_line(i, len(plan), width, result), flush=True)
        course.interrupted_by = signals.received
    course.total_seconds = time.perf_counter() - clock

    (run_dir / "summary.json").write_text(json.dumps(course.to_dict(), indent=2) + "\n")
    (run_dir / "index.html").write_text(index_html(course), encoding="utf-8")
    print(format_summary(course, statuses), flush=True)
    return course


def _progress_line(i: int, total: int, width: int, result: NotebookResult) -> str:
    line = f"[{i}/{total}] {result.notebook:<{width}}  {result.status:<6}  "
    line += f"{result.seconds:6.1f} s"
    if result.error:
        line += f"  {first_line(result.error)}"
    return line


def format_summary(course: CourseResult,
                   statuses: list[programs.ProgramStatus] | None = None) -> str:
    """The end of a run: a table (notebook, status, seconds, the programs it ran without),
    what ran degraded and how to install it, then one line with the verdict and index.html."""
    rows = [("notebook", "status", "seconds", "ran without")]
    rows += [(r.notebook, r.status, "-" if r.status == NOT_RUN else f"{r.seconds:.1f}",
              ", ".join(r.missing_programs)) for r in course.results]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = [f"{a:<{widths[0]}}  {b:<{widths[1]}}  {c:>{widths[2]}}  {d}".rstrip()
             for a, b, c, d in rows]
    degraded = [r for r in course.results if r.missing_programs and r.status != NOT_RUN]
    if degraded:
        statuses = programs.check_programs(versions=False) if statuses is None else statuses
        lines.append("ran degraded, for lack of optional programs (`make system-deps` installs "
                     "them):")
        lines += [f"  {notes.lesson_notice(r.notebook, statuses)}" for r in degraded]
    lines.append(f"{course_verdict(course)}; results in {shown(course.run_dir / 'index.html')}")
    return "\n".join(lines)
