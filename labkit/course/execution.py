"""Running one notebook so that nothing outlives it: papermill in a worker thread, Ctrl-C and
SIGTERM turned into an interrupt of the running cell, then the kernel and every process it
started (found by a mark in their environment) ended within a bound, and a kernel of the lab's
own for the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
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
from dataclasses import dataclass
from pathlib import Path

import papermill
from papermill.exceptions import PapermillExecutionError

from labkit.course.run_folder import FAILED, INTERRUPTED, OK, NotebookResult
from labkit.errors import LabkitError
from labkit.runtime import proctree

NOTEBOOK_MARK_ENV = "LABKIT_COURSE_NOTEBOOK"

INTERRUPT_GRACE_S = 10.0


"""After Ctrl-C / SIGTERM: how long the interrupted cell and papermill's kernel shutdown get
before the runner ends the notebook's processes itself."""


TERM_GRACE_S = 3.0


"""Between SIGTERM and SIGKILL when the runner ends a notebook's processes."""


_STOP_S = 30.0  # at most this long ending processes after an interrupt, then give up waiting

_HURRY_S = 3.0  # the same after a second Ctrl-C


def run_notebook(
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
        with environment(**{NOTEBOOK_MARK_ENV: mark, "TMPDIR": str(scratch)}):
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
def catching_signals() -> Iterator[_Signals]:
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


@contextlib.contextmanager
def environment(**changes: str | None) -> Iterator[None]:
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


LAB_JUPYTER_PATH = Path(__file__).parent / "jupyter"
"""The lab's own Jupyter data folder: its "python3" kernelspec starts IPython with labkit's
magics loaded (``--ext=labkit.runtime.magic``), so every kernel the lab starts (``make lab``,
``labkit course run``, a kernel restarted in JupyterLab) has ``%%torchrun`` without
``%load_ext labkit``; a notebook's own ``%load_ext labkit`` stays silent."""


@contextlib.contextmanager
def lab_kernel(kernel_name: str | None) -> Iterator[str]:
    """The kernel to run in: ``kernel_name`` as given, else the lab's "python3" on this very
    interpreter, with labkit's extension loaded at start.

    jupyter_client looks "python3" up in a list of kernelspec folders, first match wins. In a
    virtualenv the venv's own spec comes first, but outside one (conda base, system Python,
    JUPYTER_PREFER_ENV_PATH=0) a user-level spec such as ~/.local/share/jupyter/kernels/python3
    from an old ``ipykernel install --user`` wins, and the notebooks would run on another Python
    with other packages. JUPYTER_PATH is searched before all of those, so the lab's folder
    (``LAB_JUPYTER_PATH``) goes first on it; its spec's argv "python" is what jupyter_client
    swaps for sys.executable, which pins the kernel to this interpreter and keeps the usual name
    in the notebooks.
    """
    if kernel_name is not None:
        yield kernel_name
        return
    jupyter_path = os.pathsep.join(
        p for p in (str(LAB_JUPYTER_PATH), os.environ.get("JUPYTER_PATH")) if p)
    with environment(JUPYTER_PATH=jupyter_path):
        yield "python3"
