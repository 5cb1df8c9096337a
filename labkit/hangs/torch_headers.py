"""What this torch's own C++ headers say about hang handling, read at run time: which variables
each ``TORCH_NCCL_*`` setting is read from, the error-handling modes and their default, the
default collective timeouts, and the flight recorder's default size.

``nccl_env`` states the same facts for torch 2.13 as text; ``read_torch_headers()`` lets a lesson
(and a test) check them against the torch that is installed, which may be newer. A torch without
the c10d headers gives ``{}``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

NCCL_VARIABLES = ("TORCH_NCCL_BLOCKING_WAIT", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
                  "TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_NCCL_DESYNC_DEBUG",
                  "TORCH_NCCL_ENABLE_MONITORING")


def c10d_headers() -> Path:
    """Where torch keeps its c10d headers (``include/torch/csrc/distributed/c10d``)."""
    import torch

    return Path(torch.__file__).parent / "include/torch/csrc/distributed/c10d"


def _minutes(text: str, constant: str) -> float | None:
    # e.g. `constexpr auto kProcessGroupNCCLDefaultTimeout = std::chrono::milliseconds(10 * 60 * 1000);`
    m = re.search(constant + r"\s*=\s*std::chrono::milliseconds\(([\d\s*]+)\)", text)
    if not m:
        return None
    ms = 1
    for factor in m[1].split("*"):
        ms *= int(factor)
    return ms / 60_000


def read_torch_headers(headers: Path | None = None) -> dict[str, Any]:
    """``{variable: [names it is read from]}`` for each of ``NCCL_VARIABLES``, plus
    ``error_modes`` ([(name, value)]), ``default_mode`` ((value, name) or None),
    ``nccl_timeout_min``, ``other_timeout_min`` and ``fr_buffer``; ``{}`` without headers."""
    folder = headers or c10d_headers()
    nccl_header = folder / "ProcessGroupNCCL.hpp"
    if not nccl_header.exists():
        return {}
    text = nccl_header.read_text(errors="replace")
    facts: dict[str, Any] = {}
    for var in NCCL_VARIABLES:
        m = re.search(r"std::vector<std::string> " + var + r" = \{([^}]*)\}", text)
        facts[var] = re.findall(r'"(\w+)"', m[1]) if m else []
    modes = re.search(r"enum ErrorHandlingMode \{([^}]*)\}", text)
    facts["error_modes"] = re.findall(r"(\w+) = (\d)", modes[1]) if modes else []
    default_mode = re.search(r"the default value \((\d) - (\w+)\)", text)
    facts["default_mode"] = default_mode.groups() if default_mode else None
    facts["nccl_timeout_min"] = _minutes(text, "kProcessGroupNCCLDefaultTimeout")
    other = folder / "ProcessGroup.hpp"
    facts["other_timeout_min"] = (_minutes(other.read_text(errors="replace"),
                                           "kProcessGroupDefaultTimeout")
                                  if other.exists() else None)
    recorder = folder / "FlightRecorder.hpp"
    m = re.search(r'\{"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"\}, (\d+)',
                  recorder.read_text(errors="replace")) if recorder.exists() else None
    facts["fr_buffer"] = int(m[1]) if m else None
    return facts
