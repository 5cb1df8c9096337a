"""Exclusive file locks (``fcntl.flock``) with a timeout that names the holder, recorded in the
flight recorder: two agents that each hold one lock and wait for the other's deadlock, and the
lock events in their dumps show the wait-for cycle (``labkit.hangs.diagnose``)."""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from labkit.errors import LabkitError

if TYPE_CHECKING:
    from labkit.hangs.recorder import Recorder


class FileLockTimeoutError(LabkitError, TimeoutError):
    """A file lock was not free within its timeout (a deadlock, or a holder that hangs)."""


@contextmanager
def file_lock(path: Path, timeout_s: float, recorder: Recorder) -> Iterator[None]:
    """Hold an exclusive ``fcntl.flock`` on ``path``; give up after ``timeout_s`` naming the
    holder (each holder writes its rank into the file). Waits are recorded as lock events."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    event = None
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if event is None:
                    event = recorder.begin("lock", "flock", state="waiting", lock=path.name,
                                           held=list(recorder.held_locks))
                holder = os.pread(fd, 16, 0).decode().strip()
                if holder.isdigit():
                    event.info["holder"] = int(holder)
                if time.monotonic() > deadline:
                    exc = FileLockTimeoutError(f"rank {recorder.rank} waited {timeout_s:g} s for "
                                           f"{path.name}, held by rank {holder or '?'}")
                    recorder.fail(event, exc)  # dumps while the locks it holds are still held
                    raise exc from None
                time.sleep(0.05)
        event = event or recorder.begin("lock", "flock", lock=path.name,
                                        held=list(recorder.held_locks))
        recorder.end(event, "held")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{recorder.rank}\n".encode(), 0)
        recorder.held_locks.append(path.name)
        yield
    finally:
        if event is not None and event.state == "held":
            recorder.held_locks.remove(path.name)
            recorder.end(event, "released")
        os.close(fd)  # closing the descriptor releases the lock
