"""Process helpers shared by tests (Linux /proc)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path


def live_children() -> set[int]:
    """Live child processes of this test process (Linux /proc)."""
    kids = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and fields[0] != "Z":
            kids.add(int(stat.parent.name))
    return kids


# Every process this test session starts inherits this mark (set in conftest.py), so a scan of
# all processes can tell its own from those of another session, such as a second pytest-xdist
# worker running a notebook that starts the same programs.
SESSION_ENV = "LABKIT_TEST_SESSION"


def session_processes(matches: Callable[[str], bool]) -> list[str]:
    """Live processes of this test session (by the mark in their environment) whose command
    line ``matches``, as "PID: cmdline"; zombies have no environment and do not count."""
    mark = f"{SESSION_ENV}={os.environ.get(SESSION_ENV, '')}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(
                errors="replace").strip()
            if not matches(cmdline) or mark not in (entry / "environ").read_bytes().split(b"\0"):
                continue
        except OSError:  # gone meanwhile, or not ours to read
            continue
        found.append(f"{entry.name}: {cmdline}")
    return found


@contextlib.contextmanager
def interrupt_when(ready: Callable[[], bool]) -> Iterator[None]:
    """Within the block, Ctrl-C arrives (SIGINT to this process, raised as KeyboardInterrupt in
    the main thread) as soon as ``ready()`` is true, as a notebook's interrupt reaches its
    kernel. Python's own handler is put in place for the block: a suite started in the
    background (``cmd &``) inherits SIGINT ignored."""
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            if ready():
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.01)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        signal.signal(signal.SIGINT, previous)
