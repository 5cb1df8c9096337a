"""Interrupts that end cleanly and say so in one line.

SIGTERM is handled like Ctrl-C: raised as an exception, so every ``finally`` of a launch runs
(its processes, remote ones included, are ended and its temp folders removed) before the
command exits with 143, as a process ended by SIGTERM would.

Ctrl-C (a notebook's interrupt) during a launch or a warm cell raises :class:`Interrupted`: a
``KeyboardInterrupt`` that says what was stopped and counts the processes ended and left,
shown by IPython as that one line instead of a traceback.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Terminated(BaseException):
    """SIGTERM arrived (a BaseException, like KeyboardInterrupt: no ``except Exception`` eats it)."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C stopped ``what``: ``ended`` processes were ended and ``left`` still run (0 after
    a clean stop); ``kept`` says what stays up on purpose (a warm group whose cell stopped)."""

    def __init__(self, what: str, ended: int = 0, left: int = 0, kept: str = "",
                 hint: str = "") -> None:
        self.what, self.ended, self.left, self.kept, self.hint = what, ended, left, kept, hint
        super().__init__(self.line)

    @property
    def line(self) -> str:
        if self.kept:
            return f"Interrupted: stopped {self.what}; {self.kept}."
        ended = f"{self.ended} process{'es' * (self.ended != 1)} ended"
        left = f"{self.left} STILL RUNNING" if self.left else "none left"
        return f"Interrupted: stopped {self.what}: {ended}, {left}." + \
            (f" {self.hint}" if self.hint else "")

    def _render_traceback_(self) -> list[str]:
        """What IPython shows instead of a traceback: the one line."""
        return [self.line]


@contextmanager
def sigint_deferred() -> Iterator[list[int]]:
    """Within the block Ctrl-C is counted (in the list it yields), not raised, so cleanup that
    must finish (ending a job's processes) is not cut short. Main thread only; elsewhere a
    no-op."""
    caught: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield caught
    finally:
        signal.signal(signal.SIGINT, previous)


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
