"""The entry point labkit's launcher gives torchrun: ``python -m labkit.worker SCRIPT ARGS...``.

It runs SCRIPT as ``__main__`` exactly as torchrun would, and adds two things a notebook needs:
every line the rank prints is prefixed with ``[nodeN rankR]`` (N is torchrun's GROUP_RANK), and
an exception is recorded as JSON in the launch folder so the notebook can raise it with that
rank's traceback.
"""

from __future__ import annotations

import io
import json
import os
import runpy
import sys
import time
import traceback
from pathlib import Path

from labkit.publish import RUN_DIR_ENV


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


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m labkit.worker SCRIPT [ARGS...]", file=sys.stderr)
        return 2
    prefix = rank_prefix()
    sys.stdout = PrefixedLines(sys.__stdout__, prefix)
    sys.stderr = PrefixedLines(sys.__stderr__, prefix)
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
