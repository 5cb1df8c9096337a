"""Process helpers shared by tests (Linux /proc)."""

from __future__ import annotations

import os
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
