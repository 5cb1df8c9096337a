"""A real IPython shell for tests of the ``%%torchrun`` magics."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config


@contextlib.contextmanager
def labkit_shell() -> Iterator[InteractiveShell]:
    """An IPython shell with ``%load_ext labkit`` done; process-wide hooks put back after."""
    saved = sys.modules.get("__main__"), sys.displayhook, sys.excepthook
    config = Config()
    config.HistoryManager.enabled = False  # no history database in $HOME
    ip = InteractiveShell.instance(config=config)
    try:
        ip.run_line_magic("load_ext", "labkit")
        yield ip
    finally:
        InteractiveShell.clear_instance()
        main, sys.displayhook, sys.excepthook = saved
        if main is not None:
            sys.modules["__main__"] = main


def shown_lines(text: str) -> list[str]:
    """The non-blank lines of what a cell printed."""
    return [line for line in text.splitlines() if line.strip()]
