"""Shared test helpers. Keep this small and generic: no autouse fixtures here."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from process_helpers import SESSION_ENV

# The mark every process of this session inherits (see process_helpers.session_processes). Under
# pytest-xdist each worker also gets a temporary folder of its own, so a test that looks for
# files a program left in the temporary folder sees only its own worker's.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if _WORKER:  # a worker inherits the controller's environment: give it a mark of its own
    os.environ[SESSION_ENV] = f"{_WORKER}-{os.getpid()}"
else:
    os.environ.setdefault(SESSION_ENV, f"main-{os.getpid()}")
if _WORKER and "LABKIT_TEST_TMPDIR" not in os.environ:
    _worker_tmp = tempfile.mkdtemp(prefix=f"lk-{_WORKER}-")
    os.chmod(_worker_tmp, 0o1777)  # as /tmp is: munged, for one, refuses a socket folder others can't enter
    os.environ["TMPDIR"] = os.environ["LABKIT_TEST_TMPDIR"] = _worker_tmp
    tempfile.tempdir = None


def find_leftover_processes(value: str | os.PathLike, name: str = "LABKIT_RUN_DIR") -> list[str]:
    """Live processes (not this one) whose environment holds ``name=value``, as "PID: cmdline".

    labkit's launcher gives every agent and rank ``LABKIT_RUN_DIR=<run dir>``, so passing the
    ``run_dir`` a test gave ``launch_local`` finds whatever of that launch still runs. Zombies
    have an empty environ and don't count. Linux only (/proc)."""
    needle = f"{name}={os.fspath(value)}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            if needle not in environ.split(b"\0"):
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        found.append(f"{entry.name}: {cmdline.strip()}")
    return found


@pytest.fixture
def leftover_processes() -> Callable[..., list[str]]:
    """``leftover_processes(run_dir)`` (or ``(value, name=ENV_NAME)``): what still runs."""
    if not Path("/proc/self/environ").exists():
        pytest.skip("needs /proc to find processes by their environment")
    return find_leftover_processes


@pytest.fixture(scope="module", autouse=True)
def shared_servers_end_with_their_module() -> Iterator[None]:
    """labkit's shared Redis and NATS (``labkit.services.shared``) live as long as the process
    that started them, as a notebook's kernel wants; in the suite one module's must not outlive
    it, or the next module on this worker finds an unexpected child process."""
    yield
    from labkit.services import shared

    shared.stop_all()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--store-durations", action="store_true",
                     help="rewrite tests/durations.json (seconds per unit of work) from this run")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("store_durations") and not _WORKER:
        from scheduling import DurationRecorder

        config.pluginmanager.register(DurationRecorder(), "labkit-durations")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):  # type: ignore[no-untyped-def]
    """``make test`` (``--dist loadgroup``): each module's tests on one worker, so a launch they
    share runs once, each notebook on its own, heaviest first (tests/scheduling.py)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from scheduling import ModuleScheduling

    return ModuleScheduling(config, log)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Removes this worker's temporary folder (tests check their own leftovers before)."""
    folder = os.environ.get("LABKIT_TEST_TMPDIR")
    if folder and os.environ.get("PYTEST_XDIST_WORKER"):
        shutil.rmtree(folder, ignore_errors=True)
