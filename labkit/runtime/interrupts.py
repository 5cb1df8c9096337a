"""SIGTERM handled like Ctrl-C: raised as an exception, so every ``finally`` of a launch runs
(its processes, remote ones included, are ended and its temp folders removed) before the
command exits with 143, as a process ended by SIGTERM would."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Terminated(BaseException):
    """SIGTERM arrived (a BaseException, like KeyboardInterrupt: no ``except Exception`` eats it)."""


def _raise(signum: int, frame: object) -> None:
    raise Terminated(f"signal {signal.Signals(signum).name}")


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """Within the block SIGTERM raises :class:`Terminated` (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
