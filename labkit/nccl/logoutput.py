"""Log output that prints settings as ``NAME: value``: read as a note, not as a YAML env map.

PyTorch's ProcessGroupNCCL logs its options at start-up, one ``KEY: value`` per line in older
releases ("ProcessGroupNCCL initialized with following options:\nNCCL_ASYNC_ERROR_HANDLING:
...\nTIMEOUT(ms): ...\nUSE_HIGH_PRIORITY_STREAM: ...\nNCCL_DEBUG: ..."), comma-separated on one
line in recent ones ("TIMEOUT(ms): ..., USE_HIGH_PRIORITY_STREAM: ..., SPLIT_FROM: ...,
SPLIT_COLOR: ..., PG Name: ..."; "NCCL version: ..."). A run of such lines next to a key no
environment variable has is log output.
"""

from __future__ import annotations

import re

# A "key: value" line of log output, not of an env map: a key with a unit in brackets, which no
# environment variable name has (TIMEOUT(ms)), or a key PyTorch's ProcessGroupNCCL logs among
# its options that no process reads from the environment. ProcessGroupNCCL.cpp logs them as
# "KEY: value", one per line in older releases ("ProcessGroupNCCL initialized with following
# options:\nNCCL_ASYNC_ERROR_HANDLING: ...\nTIMEOUT(ms): ...\nUSE_HIGH_PRIORITY_STREAM: ...
# \nNCCL_DEBUG: ..."), comma-separated on one line in recent ones ("TIMEOUT(ms): ...,
# USE_HIGH_PRIORITY_STREAM: ..., SPLIT_FROM: ..., SPLIT_COLOR: ..., PG Name: ..."; "NCCL
# version: ..."). torch 2.13's headers read TORCH_NCCL_HIGH_PRIORITY, not USE_HIGH_PRIORITY_STREAM.
_LOG_LINE = re.compile(r"(?:^\s*|,\s*)(?:[A-Za-z_][\w.-]*[(\[][^()\[\]\s]*[)\]]|"
                       r"USE_HIGH_PRIORITY_STREAM|SPLIT_FROM|SPLIT_COLOR|PG Name|NCCL version)"
                       r"\s*:\s+\S")
LOG_NOTE = ("read as log output, not settings: 'NAME: value' lines next to {key!r}, which is "
            "not a variable (PyTorch's ProcessGroupNCCL logs its options this way at start-up)")



def is_log_line(line: str) -> bool:
    """Whether ``line`` holds a key of log output (``TIMEOUT(ms): ...``, ``PG Name: ...``)."""
    return _LOG_LINE.search(line) is not None


def log_run(lines: list[str], i: int, indent: int) -> tuple[int, int, str | None]:
    """The run of lines around ``i`` (up to a blank line or a fence) and the first key in it, at
    ``indent``, that no env map has (``_LOG_LINE``): None when the run reads as settings."""
    first = last = i
    while first > 0 and _in_run(lines[first - 1]):
        first -= 1
    while last + 1 < len(lines) and _in_run(lines[last + 1]):
        last += 1
    for line in lines[first:last + 1]:
        match = _LOG_LINE.search(line) if len(line) - len(line.lstrip()) == indent else None
        if match:
            return first, last, match.group().split(":")[0].strip(" \t,")
    return first, last, None


def _in_run(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith(("```", "~~~"))
