"""A job's progress log: JSON lines a rank appends, which the launcher reads whole or tails.

Ranks write one short line per record (a single ``write`` in append mode, so lines from
several writers do not interleave); a process killed mid-write can leave half a line, which
readers skip. :class:`LogTail` reads only what was appended since its last call, so a scheduler
polling every 50 ms does not re-read the whole file each time.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

Record = dict[str, Any]


def append_record(path: str | os.PathLike[str], record: Record) -> None:
    """Append ``record`` as one JSON line."""
    with open(path, "a") as out:
        out.write(json.dumps(record) + "\n")


def _parse(lines: list[str]) -> list[Record]:
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except ValueError:
            continue  # a line cut short by a kill
    return records


def read_records(path: str | os.PathLike[str]) -> list[Record]:
    """Every complete record of the log (none when it does not exist yet)."""
    try:
        return _parse(Path(path).read_text().splitlines())
    except FileNotFoundError:
        return []


class LogTail:
    """The records appended to ``path`` since the last :meth:`new_records` call."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.offset = 0

    def new_records(self) -> list[Record]:
        try:
            with open(self.path, "rb") as file:
                file.seek(self.offset)
                chunk = file.read()
        except FileNotFoundError:
            return []
        complete = chunk[:chunk.rfind(b"\n") + 1]  # a line being written waits for next time
        self.offset += len(complete)
        return _parse(complete.decode(errors="replace").splitlines())


__all__ = ["LogTail", "Record", "append_record", "read_records"]
