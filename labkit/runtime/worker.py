"""The entry point labkit's launcher gives torchrun: ``python -m labkit.runtime.worker SCRIPT ARGS...``.

It runs SCRIPT as ``__main__`` exactly as torchrun would, and adds what a notebook needs:
every line the rank prints is prefixed with ``[nodeN rankR]`` (N is torchrun's GROUP_RANK), and
an exception is recorded as JSON in the launch folder so the notebook can raise it with that
rank's traceback.

A rank can also die without a Python exception: a C++ abort (``terminate called after throwing
...``), a segfault, SIGKILL. Such a process cannot record anything itself, and what C/C++ code
writes goes straight to file descriptor 2, past ``sys.stderr``. So under labkit's launcher
(``$LABKIT_STDERR_TAILS`` set) descriptor 2 is a pipe to a small *stderr tap*, a process forked
before the script starts: it prefixes every stderr line, C/C++ and Python alike, in the order
they were written, and when the rank has ended (however it ended) it leaves the rank's last
stderr lines in that folder. torchrun reports how the process ended; the launcher puts the two
together (:mod:`labkit.runtime.launch`). A fatal signal also makes :mod:`faulthandler` print the Python
stack of the thread it hit there.
"""

from __future__ import annotations

import collections
import faulthandler
import io
import json
import os
import runpy
import select
import signal
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

from labkit.runtime.publish import RUN_DIR_ENV

STDERR_TAILS_ENV = "LABKIT_STDERR_TAILS"  # folder where each rank's stderr tap leaves its tail
TAIL_LINES = 40  # enough for a C++ abort message and faulthandler's Python stack after it
LONGEST_LINE = 1 << 16  # bytes: longer output without a newline is passed on as a line
FATAL_REPORT = b"Fatal Python error: "  # faulthandler's first words on SIGSEGV, SIGABRT, ...


def rank_prefix() -> str:
    return f"[node{os.environ.get('GROUP_RANK', '?')} rank{os.environ.get('RANK', '?')}] "


class PrefixedLines(io.TextIOBase):
    """A text stream that writes each complete line to ``target`` with a prefix."""

    def __init__(self, target, prefix: str) -> None:  # noqa: ANN001 (any text stream)
        self._target = target
        self._prefix = prefix
        self._partial = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        if lines:
            self._target.write("".join(f"{self._prefix}{line}\n" for line in lines))
            self._target.flush()
        return len(text)

    def flush(self) -> None:
        if self._partial:
            self._target.write(f"{self._prefix}{self._partial}\n")
            self._partial = ""
        self._target.flush()

    def fileno(self) -> int:
        return self._target.fileno()

    def isatty(self) -> bool:
        return False


def write_all(fd: int, data: bytes) -> None:
    """``os.write`` until every byte is written."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


@dataclass(frozen=True)
class StderrTail:
    """What a rank's stderr tap saw: whose stderr, when the rank ended, and its last lines, C/C++
    and Python alike."""

    rank: int
    node: int
    local_rank: int
    restart: int
    pid: int  # the rank process
    ended: float  # time.time(): the first line of a fatal-signal report, else its stderr closing
    lines: tuple[str, ...]

    @classmethod
    def read_all(cls, folder: Path) -> dict[int, StderrTail]:
        """Every tail left in ``folder``, by the rank's pid."""
        tails = {}
        for path in folder.glob("pid*.json"):
            try:
                data = json.loads(path.read_text())
                tail = cls(**{**data, "lines": tuple(data["lines"])})
            except (OSError, ValueError, TypeError, KeyError):
                continue  # a tap killed mid-write: nothing to report from it
            tails[tail.pid] = tail
        return tails


class _Tap:
    """The tap process's loop: each line from the rank's descriptor 2 (``stderr``) is shown
    with the prefix on ``out`` and kept; once the rank has ended, the last ``TAIL_LINES`` go to
    ``folder``.

    When the rank ended matters: its peers' errors about the lost connection come after it. A
    fatal signal makes faulthandler write its report before the process dies, so the report's
    arrival is the earliest sign; otherwise it is ``lifeline`` closing, a pipe only the rank
    holds (children it starts may inherit descriptor 2 and outlive it)."""

    def __init__(self, stderr: int, lifeline: int, out: int, prefix: str, folder: Path,
                 who: dict[str, int]) -> None:
        self.stderr, self.lifeline, self.out, self.prefix = stderr, lifeline, out, prefix.encode()
        self.folder, self.who = folder, who
        self.partial = {stderr: b"", lifeline: b""}  # the open descriptors, with a partial line
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.closed: dict[int, float] = {}  # descriptor: when its last writer closed it
        self.fatal_at: float | None = None  # when a fatal-signal report began to arrive

    def run(self) -> None:
        while self.partial:
            ready, _, _ = select.select(list(self.partial), [], [])
            now = time.time()  # before any work: the tap may be slow to run under load
            for fd in ready:
                self._read(fd, now)
        self._save()

    def _read(self, fd: int, now: float) -> None:
        data = os.read(fd, LONGEST_LINE)
        if data:
            *lines, rest = (self.partial[fd] + data).split(b"\n")
            if len(rest) >= LONGEST_LINE:
                lines, rest = [*lines, rest], b""
            self.partial[fd] = rest
            if self.fatal_at is None and FATAL_REPORT in data:
                self.fatal_at = now
        else:  # every writer closed it
            self.closed[fd] = now
            rest = self.partial.pop(fd)
            lines = [rest] if rest else []
        if fd != self.stderr or not lines:
            return
        self.tail.extend(line.decode(errors="replace") for line in lines)
        if self.out >= 0:
            try:
                write_all(self.out, b"".join(self.prefix + line + b"\n" for line in lines))
            except OSError:  # nobody reads the rank's output any more; keep the record
                self.out = -1

    def _save(self) -> None:
        ended = self.fatal_at or self.closed.get(self.lifeline) or self.closed.get(self.stderr)
        tail = StderrTail(**self.who, ended=ended or time.time(), lines=tuple(self.tail))
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"pid{tail.pid}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(tail)))
        tmp.replace(path)


def _env_int(name: str) -> int:
    value = os.environ.get(name, "")
    return int(value) if value.lstrip("-").isdigit() else -1


_lifeline: int | None = None  # the write end of the tap's lifeline: open while the rank lives


def start_stderr_tap(folder: Path, prefix: str) -> None:
    """Fork the stderr tap and make descriptor 2 (and so ``sys.stderr``) its pipe."""
    global _lifeline
    who = {"rank": _env_int("RANK"), "node": _env_int("GROUP_RANK"),
           "local_rank": _env_int("LOCAL_RANK"),
           "restart": max(0, _env_int("TORCHELASTIC_RESTART_COUNT")), "pid": os.getpid()}
    sys.stderr.flush()
    stderr_read, stderr_write = os.pipe()
    lifeline_read, _lifeline = os.pipe()  # not inherited by programs the rank runs
    if os.fork() == 0:  # the tap: no threads yet in this process, so forking is safe
        code = 0
        try:
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(sig, signal.SIG_IGN)  # it ends when the rank has ended
            out = os.dup(2)
            for fd in (stderr_write, _lifeline, 0, 1, 2):
                os.close(fd)
            _Tap(stderr_read, lifeline_read, out, prefix, folder, who).run()
        except BaseException:  # noqa: BLE001 (nothing may escape into the rank's code)
            code = 1
        os._exit(code)
    os.close(stderr_read)
    os.close(lifeline_read)
    os.dup2(stderr_write, 2)
    os.close(stderr_write)


def user_traceback(exc: BaseException) -> str:
    """The traceback from the user's script down, without this wrapper's and runpy's frames."""
    tb = exc.__traceback__
    while tb is not None and (
        tb.tb_frame.f_code.co_filename in (__file__, "<frozen runpy>")
        or tb.tb_frame.f_code.co_filename.endswith("runpy.py")
    ):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb or exc.__traceback__))


def record_failure(exc: BaseException) -> None:
    """Write this rank's traceback where the launcher looks for failures."""
    run_dir = os.environ.get(RUN_DIR_ENV)
    if not run_dir:
        return
    rank = os.environ.get("RANK", "0")
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    failure = {
        "rank": int(rank),
        "node": int(os.environ.get("GROUP_RANK", "0")),
        "restart": int(restart),
        "time": time.time(),
        "error": f"{type(exc).__name__}: {exc}",
        "traceback": user_traceback(exc),
    }
    folder = Path(run_dir) / "failures"
    folder.mkdir(exist_ok=True)
    (folder / f"rank{rank}-restart{restart}.json").write_text(json.dumps(failure))


def prefix_output(prefix: str) -> None:
    """Prefix every line of this rank's output; stderr through the stderr tap when
    ``$LABKIT_STDERR_TAILS`` names its folder. A fatal signal (SIGSEGV, SIGABRT, ...) prints the
    Python stack of the thread it hit to stderr too."""
    sys.stdout = PrefixedLines(sys.__stdout__, prefix)
    tails = os.environ.get(STDERR_TAILS_ENV)
    if tails:
        start_stderr_tap(Path(tails), prefix)
        sys.stderr = sys.__stderr__  # descriptor 2, line-buffered: the tap adds the prefix
    else:
        sys.stderr = PrefixedLines(sys.__stderr__, prefix)
    # This thread's stack only: walking the others can crash while Python shuts down.
    faulthandler.enable(sys.__stderr__, all_threads=False)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m labkit.runtime.worker SCRIPT [ARGS...]", file=sys.stderr)
        return 2
    prefix_output(rank_prefix())
    sys.argv = list(argv)
    script = argv[0]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        if code not in (None, 0):
            record_failure(exc)
            if not isinstance(code, int):
                print(code, file=sys.stderr)  # what plain Python prints for sys.exit("...")
        return code if isinstance(code, int) else (0 if code is None else 1)
    except BaseException as exc:
        record_failure(exc)
        sys.stderr.write(user_traceback(exc))
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
