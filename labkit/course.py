"""The course runner: executes the notebooks headless through papermill and keeps the results.

The course is ``notebooks/NN_name.ipynb``. Each notebook has one cell tagged ``parameters`` with
workshop-size defaults; ``notebooks/smoke.yml`` holds the small sizes CI runs (``smoke=True``).
Every run gets its own folder ``runs/<timestamp>/`` (``runs/latest`` points at the newest) with
the executed notebooks, their HTML exports, ``index.html`` and ``summary.json``. Everything is
validated before the first notebook starts, so a typo fails in a second, not after an hour.
"""

from __future__ import annotations

import contextlib
import html
import itertools
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

import nbformat
import papermill
import yaml
from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
from nbconvert import HTMLExporter
from papermill.exceptions import PapermillExecutionError

from labkit.errors import ParameterError
from labkit.results import RESULTS_ENV

SMOKE_FILE = "smoke.yml"
"""The smoke sizes, next to the notebooks: notebook stem -> {parameter: value}."""

_NOTEBOOK_STEM = re.compile(r"^\d\d_")


@dataclass
class NotebookResult:
    """How one notebook went. ``output`` and ``html`` are relative to the run folder."""

    notebook: str
    status: str  # "ok" or "failed"
    seconds: float
    output: str | None
    html: str | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class CourseResult:
    """How a whole run went; ``to_dict()`` is what ``summary.json`` holds."""

    run_dir: Path
    results: list[NotebookResult] = field(default_factory=list)
    started: str = ""
    smoke: bool = False
    total_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """True when every notebook ran to the end (the CLI exits 1 otherwise)."""
        return all(r.ok for r in self.results)

    def to_dict(self) -> dict:
        return {
            "started": self.started,
            "smoke": self.smoke,
            "total_seconds": round(self.total_seconds, 3),
            "ok": self.ok,
            "notebooks": [r.to_dict() for r in self.results],
        }


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
    unknown = [p for p in params if p not in declared]
    if unknown:
        raise ParameterError(
            f"{name}: unknown parameter{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(map(str, unknown))}; its parameters cell declares: "
            f"{', '.join(declared) or '(nothing)'}"
        )


def plan_course(
    notebooks_dir: str | Path = "notebooks",
    smoke: bool = False,
    only: list[str] | None = None,
    parameters_override: Mapping[str, Mapping[str, object]] | None = None,
) -> list[tuple[Path, dict]]:
    """Validate a run without executing it: the selected notebooks and the parameters for each.

    Smoke sizes come from ``smoke.yml`` (every notebook needs an entry, and every entry a
    notebook); ``parameters_override`` (keyed by id or stem) goes on top.
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
    for p in selected:
        check_parameters(p, params[p])
    return [(p, params[p]) for p in selected]


def run_course(
    notebooks_dir: str | Path = "notebooks",
    out: str | Path | None = None,
    smoke: bool = False,
    only: list[str] | None = None,
    cell_timeout: float | None = 600,
    parameters_override: Mapping[str, Mapping[str, object]] | None = None,
    progress: bool = True,
    kernel_name: str | None = None,
) -> CourseResult:
    """Execute the selected notebooks in order, each in a fresh kernel, and keep the results.

    Results go to ``runs/<timestamp>/`` at the repo root (``runs/latest`` then points there), or
    to ``out`` when given. A failing notebook is reported and the run goes on with the next one.
    Raises ParameterError, before anything runs, on an unknown notebook, parameter or kernel.
    """
    notebooks_dir = Path(notebooks_dir).resolve()
    plan = plan_course(
        notebooks_dir, smoke=smoke, only=only, parameters_override=parameters_override
    )
    if kernel_name is not None:
        try:
            KernelSpecManager().get_kernel_spec(kernel_name)
        except NoSuchKernel as exc:
            raise ParameterError(f"no Jupyter kernel named {kernel_name!r}") from exc

    started = datetime.now().astimezone()
    if out is None:
        runs = notebooks_dir.parent / "runs"
        run_dir = _new_run_dir(runs, started.strftime("%Y%m%d-%H%M%S"))
        _point_latest(runs, run_dir)
    else:
        run_dir = Path(out).resolve()
        run_dir.mkdir(parents=True, exist_ok=True)

    course = CourseResult(
        run_dir=run_dir, started=started.isoformat(timespec="seconds"), smoke=smoke
    )
    exporter = HTMLExporter()
    width = max(len(p.stem) for p, _ in plan)
    clock = time.perf_counter()
    env = _environ(LABKIT_SMOKE="1" if smoke else None, **{RESULTS_ENV: str(run_dir)})
    with _kernel(kernel_name) as kernel, env:
        for i, (notebook, params) in enumerate(plan, 1):
            result = _run_notebook(notebook, params, run_dir, kernel, cell_timeout, progress)
            result.html = _export_html(exporter, run_dir, result.output)
            course.results.append(result)
            line = f"[{i}/{len(plan)}] {notebook.stem:<{width}}  {result.status:<6}  "
            line += f"{result.seconds:6.1f} s"
            if result.error:
                line += f"  {_first_line(result.error)}"
            print(line, flush=True)
    course.total_seconds = time.perf_counter() - clock

    (run_dir / "summary.json").write_text(json.dumps(course.to_dict(), indent=2) + "\n")
    (run_dir / "index.html").write_text(_index_html(course), encoding="utf-8")
    failed = sum(not r.ok for r in course.results)
    verdict = "ok" if course.ok else f"{failed} of {len(course.results)} FAILED"
    print(f"{verdict} in {course.total_seconds:.1f} s; results in {_shown(run_dir)}", flush=True)
    return course


def _run_notebook(
    notebook: Path,
    params: dict,
    run_dir: Path,
    kernel: str,
    cell_timeout: float | None,
    progress: bool,
) -> NotebookResult:
    """Execute one notebook into the run folder; failures become the result's ``error``."""
    output = run_dir / notebook.name
    error = None
    start = time.perf_counter()
    try:
        papermill.execute_notebook(
            str(notebook),
            str(output),
            parameters=params,
            kernel_name=kernel,
            execution_timeout=cell_timeout,
            progress_bar=progress,
            cwd=str(notebook.parent),
        )
    except PapermillExecutionError as exc:  # a cell raised
        error = f"{exc.ename}: {exc.evalue}"
    except Exception as exc:  # a cell timed out, the kernel died or never started: go on
        error = f"{type(exc).__name__}: {exc}"
    return NotebookResult(
        notebook=notebook.stem,
        status="failed" if error else "ok",
        seconds=round(time.perf_counter() - start, 3),
        output=output.name if output.exists() else None,
        html=None,
        error=error,
    )


def _export_html(exporter: HTMLExporter, run_dir: Path, output: str | None) -> str | None:
    """Write the HTML export of an executed notebook; None (with a note) when that fails."""
    if output is None:
        return None
    target = (run_dir / output).with_suffix(".html")
    try:
        body, _ = exporter.from_filename(str(run_dir / output))
    except Exception as exc:  # a broken export must not lose the rest of a long run
        print(f"  no HTML for {output}: {type(exc).__name__}: {exc}", flush=True)
        return None
    target.write_text(body, encoding="utf-8")
    return target.name


def _index_html(course: CourseResult) -> str:
    """A one-table page linking every notebook's HTML and ipynb."""
    esc = html.escape
    rows = []
    for r in course.results:
        links = " ".join(
            f'<a href="{esc(path)}">{label}</a>'
            for label, path in (("html", r.html), ("ipynb", r.output))
            if path
        )
        color = "#1a7f37" if r.ok else "#cf222e"
        rows.append(
            f"<tr><td>{esc(r.notebook)}</td>"
            f'<td style="color:{color}">{r.status}</td>'
            f'<td style="text-align:right">{r.seconds:.1f}</td>'
            f"<td>{links}</td><td>{esc(_first_line(r.error or ''))}</td></tr>"
        )
    size = "smoke" if course.smoke else "workshop"
    verdict = "all ok" if course.ok else "FAILED"
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Course run {esc(course.started)}</title>
<style>body{{font-family:sans-serif}} td,th{{padding:4px 10px;border-bottom:1px solid #ddd}}
table{{border-collapse:collapse}}</style></head><body>
<h1>Course run {esc(course.started)}</h1>
<p>{size} size, {course.total_seconds:.1f} s, {verdict}</p>
<table><tr><th>notebook</th><th>status</th><th>seconds</th><th>output</th><th>error</th></tr>
{chr(10).join(rows)}
</table></body></html>
"""


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it is inside it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _new_run_dir(runs: Path, stamp: str) -> Path:
    """Create ``runs/<stamp>``, or ``<stamp>-2``, ``-3``... when that exists; keep earlier runs."""
    runs.mkdir(parents=True, exist_ok=True)
    for n in itertools.count(1):
        run_dir = runs / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            run_dir.mkdir()
        except FileExistsError:
            continue
        return run_dir
    raise AssertionError("unreachable")


def _point_latest(runs: Path, run_dir: Path) -> None:
    """Point ``runs/latest`` at ``run_dir``, atomically (a reader never sees it missing)."""
    tmp = runs / f".latest-{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(run_dir.name)  # relative, so it survives moving the repo
    os.replace(tmp, runs / "latest")


@contextlib.contextmanager
def _environ(**changes: str | None) -> Iterator[None]:
    """Set (or, for None, unset) environment variables for the duration; kernels inherit them."""
    saved = {name: os.environ.get(name) for name in changes}

    def apply(values: Mapping[str, str | None]) -> None:
        for name, value in values.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    apply(changes)
    try:
        yield
    finally:
        apply(saved)


@contextlib.contextmanager
def _kernel(kernel_name: str | None) -> Iterator[str]:
    """The kernel to run in: ``kernel_name`` as given, else "python3" on this very interpreter.

    jupyter_client looks "python3" up in a list of kernelspec folders, first match wins. In a
    virtualenv the venv's own spec comes first (its argv "python" is swapped for sys.executable),
    but outside one (conda base, system Python, JUPYTER_PREFER_ENV_PATH=0) a user-level spec such
    as ~/.local/share/jupyter/kernels/python3 from an old ``ipykernel install --user`` wins, and
    the notebooks would run on another Python with other packages. JUPYTER_PATH is searched
    before all of those, so a "python3" spec for sys.executable in a temporary JUPYTER_PATH
    folder pins the kernel to this interpreter and keeps the usual name in the notebooks.
    """
    if kernel_name is not None:
        yield kernel_name
        return
    with tempfile.TemporaryDirectory(prefix="labkit-kernels-") as tmp:
        spec_dir = Path(tmp, "kernels", "python3")
        spec_dir.mkdir(parents=True)
        spec = {
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Python 3 (ipykernel)",
            "language": "python",
        }
        (spec_dir / "kernel.json").write_text(json.dumps(spec, indent=1))
        jupyter_path = os.pathsep.join(p for p in (tmp, os.environ.get("JUPYTER_PATH")) if p)
        with _environ(JUPYTER_PATH=jupyter_path):
            yield "python3"
