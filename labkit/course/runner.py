"""The course runner: executes the notebooks headless through papermill and keeps the results.

The course is ``notebooks/NN_name.ipynb``. Each notebook has one cell tagged ``parameters`` with
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
import asyncio
import contextlib
import functools
import html
import itertools
import json
import logging
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

import nbformat
import papermill
import yaml
from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
from nbconvert import HTMLExporter
from papermill.exceptions import PapermillExecutionError

from labkit.course import notes, programs
from labkit.course.pace import PACE_FILE, load_pace_file, scaled
from labkit.course.results import RESULTS_ENV
from labkit.errors import LabkitError, ParameterError
from labkit.runtime import proctree

CELL_TIMEOUT_S = 3600.0
"""papermill's limit per cell: a backstop far above any cell's work (every launch in a cell has
its own limit), so a machine several times slower than this lab's still finishes."""
SMOKE_FILE = "smoke.yml"
"""The smoke sizes, next to the notebooks: notebook stem -> {parameter: value}."""

_NOTEBOOK_STEM = re.compile(r"^\d\d_")

NOTEBOOK_MARK_ENV = "LABKIT_COURSE_NOTEBOOK"
"""Set to a fresh token for each notebook's kernel; every process it starts inherits it, which is
how the runner finds them all (even ones re-parented after their parent died) to end them."""
INTERRUPT_GRACE_S = 10.0
"""After Ctrl-C / SIGTERM: how long the interrupted cell and papermill's kernel shutdown get
before the runner ends the notebook's processes itself."""
TERM_GRACE_S = 3.0
"""Between SIGTERM and SIGKILL when the runner ends a notebook's processes."""
_STOP_S = 30.0  # at most this long ending processes after an interrupt, then give up waiting
_HURRY_S = 3.0  # the same after a second Ctrl-C

OK, FAILED, INTERRUPTED, NOT_RUN = "ok", "failed", "interrupted", "not run"


@dataclass
class NotebookResult:
    """How one notebook went. ``output`` and ``html`` are relative to the run folder."""

    notebook: str
    status: str  # "ok", "failed", "interrupted" (Ctrl-C / SIGTERM during it) or "not run"
    seconds: float
    output: str | None
    html: str | None
    error: str | None = None
    missing_programs: list[str] = field(default_factory=list)
    """The optional programs it uses that this machine lacked (``labkit.course.programs.PROGRAMS``)."""

    @property
    def ok(self) -> bool:
        return self.status == OK

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
    interrupted_by: int | None = None
    """The signal (SIGINT, SIGTERM) that stopped the run, None when it ran to the end."""
    pace: float | None = None
    """The factor the pace parameters were scaled by (``--pace``), None: as planned."""

    @property
    def ok(self) -> bool:
        """True when every notebook ran to the end."""
        return self.interrupted_by is None and all(r.ok for r in self.results)

    @property
    def exit_code(self) -> int:
        """0 when ok, 1 when a notebook failed, 128 + the signal when interrupted (130, 143)."""
        if self.interrupted_by is not None:
            return 128 + self.interrupted_by
        return 0 if self.ok else 1

    @property
    def signal_name(self) -> str | None:
        return None if self.interrupted_by is None else signal.Signals(self.interrupted_by).name

    def to_dict(self) -> dict:
        return {
            "started": self.started,
            "smoke": self.smoke,
            "pace": self.pace,
            "total_seconds": round(self.total_seconds, 3),
            "ok": self.ok,
            "interrupted": self.signal_name,
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
        run_dir = _new_run_dir(runs, started.strftime("%Y%m%d-%H%M%S"))
        _point_latest(runs, run_dir)
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
    env = _environ(LABKIT_SMOKE="1" if smoke else None, **{RESULTS_ENV: str(run_dir)})
    with _kernel(kernel_name) as kernel, env, _catching_signals() as signals:
        for i, (notebook, params) in enumerate(plan, 1):
            if signals.received is not None:
                course.results.append(NotebookResult(notebook.stem, NOT_RUN, 0.0, None, None))
                continue
            result = _run_notebook(notebook, params, run_dir, kernel, cell_timeout, progress,
                                   signals)
            result.missing_programs = [s.program.name
                                       for s in programs.lacking(notebook.stem, statuses)]
            if not signals.hurry:
                result.html = _export_html(exporter, run_dir, result.output)
            course.results.append(result)
            print(_progress_line(i, len(plan), width, result), flush=True)
        course.interrupted_by = signals.received
    course.total_seconds = time.perf_counter() - clock

    (run_dir / "summary.json").write_text(json.dumps(course.to_dict(), indent=2) + "\n")
    (run_dir / "index.html").write_text(_index_html(course), encoding="utf-8")
    print(format_summary(course, statuses), flush=True)
    return course


def _progress_line(i: int, total: int, width: int, result: NotebookResult) -> str:
    line = f"[{i}/{total}] {result.notebook:<{width}}  {result.status:<6}  "
    line += f"{result.seconds:6.1f} s"
    if result.error:
        line += f"  {_first_line(result.error)}"
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
    lines.append(f"{_verdict(course)}; results in {_shown(course.run_dir / 'index.html')}")
    return "\n".join(lines)


def _verdict(course: CourseResult) -> str:
    seconds = f"{course.total_seconds:.1f} s"
    if course.interrupted_by is not None:
        during = [r.notebook for r in course.results if r.status == INTERRUPTED]
        where = f" during {during[0]}" if during else ""
        return f"interrupted by {course.signal_name}{where} after {seconds}"
    failed = sum(not r.ok for r in course.results)
    return f"{'ok' if course.ok else f'{failed} of {len(course.results)} FAILED'} in {seconds}"


def _run_notebook(
    notebook: Path,
    params: dict,
    run_dir: Path,
    kernel: str,
    cell_timeout: float | None,
    progress: bool,
    signals: _Signals,
) -> NotebookResult:
    """Execute one notebook into the run folder; failures become the result's ``error``.

    papermill runs in a thread so that this (main) thread keeps the signals: on Ctrl-C or
    SIGTERM it interrupts the kernel, then ends whatever of the notebook still runs. Either way,
    processes the notebook left running are ended and its ``TMPDIR`` is removed.
    """
    output = run_dir / notebook.name
    execute = functools.partial(
        papermill.execute_notebook, str(notebook), str(output), parameters=params,
        kernel_name=kernel, execution_timeout=cell_timeout, progress_bar=progress,
        cwd=str(notebook.parent),
    )
    start = time.perf_counter()
    worker = _PapermillThread(execute)
    interrupted = _supervise(notebook.stem, worker, signals)
    if interrupted:
        status, error = INTERRUPTED, f"interrupted by {signal.Signals(signals.received).name}"
    else:
        error = _error_text(worker.error)
        status = FAILED if error else OK
    return NotebookResult(
        notebook=notebook.stem,
        status=status,
        seconds=round(time.perf_counter() - start, 3),
        output=output.name if output.exists() else None,
        html=None,
        error=error,
    )


def _supervise(stem: str, worker: _PapermillThread, signals: _Signals) -> bool:
    """Run the worker with a fresh process mark and ``TMPDIR``; on a signal, stop it. Then end
    what the notebook left running and remove its ``TMPDIR``. True when it was interrupted."""
    mark = secrets.token_hex(8)
    scratch = Path(tempfile.mkdtemp(prefix=f"labkit-nb{stem[:2]}-", dir=tempfile.gettempdir()))
    try:
        # kept while stopping too: a kernel papermill is still starting gets the mark as well
        with _environ(**{NOTEBOOK_MARK_ENV: mark, "TMPDIR": str(scratch)}):
            worker.start()  # the kernel inherits both
            _wait(worker, signals)
            interrupted = worker.is_alive()  # only a signal ends the wait early
            if interrupted:
                with _quiet_logger("papermill"):  # "kernel died" is what we do, not news
                    _stop(stem, worker, mark, signals)
        left = _end_processes(mark, 0.0 if signals.hurry else TERM_GRACE_S)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if left or interrupted:
        _remove_stale_namespaces()
    if left and not interrupted:
        print(f"  {stem} left {left} process{'es' * (left != 1)} running: ended", flush=True)
    return interrupted


def _error_text(error: BaseException | None) -> str | None:
    if error is None:
        return None
    if isinstance(error, PapermillExecutionError):  # a cell raised
        return f"{error.ename}: {error.evalue}"
    # a cell timed out, the kernel died or never started: the run goes on
    return f"{type(error).__name__}: {error}"


class _PapermillThread(threading.Thread):
    """Runs one papermill execution; keeps what it raised in ``error``. A daemon: an
    interrupted run does not wait for it forever."""

    def __init__(self, execute: Callable[[], object]) -> None:
        super().__init__(name="labkit-papermill", daemon=True)
        self._execute = execute
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._execute()
        except BaseException as exc:  # noqa: BLE001 (reported by the main thread)
            self.error = exc
        finally:
            _close_thread_loop()


def _close_thread_loop() -> None:
    """Close the event loop nbclient made for this thread (it would leak a selector)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            loop = asyncio.get_event_loop_policy().get_event_loop()
        except RuntimeError:
            return
    if not loop.is_running() and not loop.is_closed():
        loop.close()


@dataclass
class _Signals:
    """SIGINT / SIGTERM during a run: noted rather than raised, so the runner can stop the
    notebook itself; a second one means hurry (no more grace periods)."""

    received: int | None = None
    hurry: bool = False

    def __call__(self, signum: int, frame: object) -> None:
        if self.received is None:
            self.received = signum
        else:
            self.hurry = True


@contextlib.contextmanager
def _catching_signals() -> Iterator[_Signals]:
    """Note SIGINT and SIGTERM for the duration (main thread only; elsewhere they keep their
    handlers and nothing is noted)."""
    caught = _Signals()
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return
    previous = {sig: signal.signal(sig, caught) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield caught
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def _wait(worker: threading.Thread, signals: _Signals) -> None:
    """Until the worker ends or a signal arrives."""
    while worker.is_alive() and signals.received is None:
        worker.join(0.2)


def _join(worker: threading.Thread, seconds: float, signals: _Signals) -> None:
    """Until the worker ends, ``seconds`` pass, or a second signal asks to hurry."""
    deadline = time.monotonic() + seconds
    while worker.is_alive() and not signals.hurry and time.monotonic() < deadline:
        worker.join(0.1)


def _stop(stem: str, worker: threading.Thread, mark: str, signals: _Signals) -> None:
    """Stop an interrupted notebook: interrupt its kernel (the cell raises KeyboardInterrupt, its
    ``with`` blocks clean up, papermill shuts the kernel down), then end what still runs."""
    name = signal.Signals(signals.received).name
    again = "; Ctrl-C again to kill it at once" if signals.received == signal.SIGINT else ""
    print(f"\n{name}: stopping {stem} and every process it started{again}", file=sys.stderr,
          flush=True)
    if _interrupt_kernels(mark):
        _join(worker, INTERRUPT_GRACE_S, signals)
    began = time.monotonic()
    while True:
        _end_processes(mark, 0.0 if signals.hurry else TERM_GRACE_S)
        limit = _HURRY_S if signals.hurry else _STOP_S
        if not worker.is_alive() or time.monotonic() - began > limit:
            return
        worker.join(0.5)  # papermill was starting a kernel, or notices that it died


def _interrupt_kernels(mark: str) -> int:
    """SIGINT to the process group of each started kernel (this process's marked children), as
    Jupyter's interrupt does: the running cell and its foreground children get it. Returns how
    many kernels it interrupted (none while one is still starting: it is simply ended)."""
    interrupted = 0
    for pid, ppid in _marked_processes(mark).items():
        if ppid != os.getpid() or not _kernel_started(pid):
            continue
        with contextlib.suppress(OSError):
            group = os.getpgid(pid)
            if group == pid and group != os.getpgrp():
                os.killpg(group, signal.SIGINT)
            else:
                os.kill(pid, signal.SIGINT)
            interrupted += 1
    return interrupted


def _kernel_started(pid: int) -> bool:
    """Whether a kernel is past its imports, so SIGINT reaches a cell (ipykernel ignores it
    between cells) instead of printing a traceback: it has threads (zmq, heartbeat) by then.
    Linux (/proc); True elsewhere. A kernel still starting is ended with SIGTERM instead."""
    tasks = Path(f"/proc/{pid}/task")
    try:
        return len(list(tasks.iterdir())) > 1 if tasks.is_dir() else True
    except OSError:
        return True


@contextlib.contextmanager
def _quiet_logger(name: str) -> Iterator[None]:
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def _marked_processes(mark: str) -> dict[int, int]:
    """pid -> parent pid of the live processes of a notebook (its kernel and everything the
    kernel started, found by ``mark``: ``labkit.runtime.proctree``)."""
    found = {}
    for pid in proctree.launch_processes(mark, {os.getpid()}, NOTEBOOK_MARK_ENV):
        with contextlib.suppress(OSError, ValueError, IndexError, KeyError):  # gone meanwhile
            found[pid] = proctree.parent_pid(pid)
    return found


def _end_processes(mark: str, grace_s: float) -> int:
    """SIGTERM every process of the notebook, SIGKILL what is left after ``grace_s``; returns
    how many there were."""
    return proctree.end_launch(mark, {os.getpid()}, grace_s, NOTEBOOK_MARK_ENV)


def _remove_stale_namespaces() -> None:
    """Network namespaces of lab networks whose process was killed (``labkit.runtime.netlab``)."""
    if not (hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("ip")):
        return
    from labkit.runtime import netlab

    with contextlib.suppress(LabkitError, OSError, subprocess.SubprocessError):
        netlab.cleanup_stale()


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


_STATUS_COLORS = {OK: "#1a7f37", FAILED: "#cf222e", INTERRUPTED: "#9a6700", NOT_RUN: "#6e7781"}


def _index_html(course: CourseResult) -> str:
    """A one-table page linking every notebook's HTML and ipynb, with the programs it lacked."""
    esc = html.escape
    rows = []
    for r in course.results:
        links = " ".join(
            f'<a href="{esc(path)}">{label}</a>'
            for label, path in (("html", r.html), ("ipynb", r.output))
            if path
        )
        seconds = "" if r.status == NOT_RUN else f"{r.seconds:.1f}"
        rows.append(
            f"<tr><td>{esc(r.notebook)}</td>"
            f'<td style="color:{_STATUS_COLORS.get(r.status, "inherit")}">{esc(r.status)}</td>'
            f'<td style="text-align:right">{seconds}</td>'
            f"<td>{links}</td><td>{esc(', '.join(r.missing_programs))}</td>"
            f"<td>{esc(_first_line(r.error or ''))}</td></tr>"
        )
    size = "smoke" if course.smoke else "workshop"
    if course.pace is not None:
        size += f", pace x{course.pace:g}"
    verdict = "all ok" if course.ok else "FAILED"
    if course.interrupted_by is not None:
        verdict = _verdict(course)
    degraded = ""
    if any(r.missing_programs for r in course.results):
        degraded = ("<p>\"ran without\": optional programs this machine lacked, so the "
                    "notebook skipped or replaced what needs them (<code>make doctor</code> "
                    "says what each gives; <code>make system-deps</code> installs them).</p>")
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Course run {esc(course.started)}</title>
<style>body{{font-family:sans-serif}} td,th{{padding:4px 10px;border-bottom:1px solid #ddd}}
table{{border-collapse:collapse}}</style></head><body>
<h1>Course run {esc(course.started)}</h1>
<p>{size} size, {course.total_seconds:.1f} s, {esc(verdict)}</p>
{degraded}
<table><tr><th>notebook</th><th>status</th><th>seconds</th><th>output</th><th>ran without</th>
<th>error</th></tr>
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
