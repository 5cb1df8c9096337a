"""This process's resident memory, read from ``/proc/self/status`` (Linux): current and peak RSS,
read after glibc's allocator has handed freed memory back (``malloc_trim``), so a number is what
the process holds, not what the allocator kept for later.
"""

from __future__ import annotations

import ctypes
import ctypes.util


def vm_kib() -> tuple[int, int]:
    """(VmRSS, VmHWM) of this process in KiB: current and peak resident memory."""
    found: dict[str, int] = {}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                found[key] = int(value.split()[0])
    return found["VmRSS"], found["VmHWM"]


def release_freed() -> None:
    """Hands freed heap pages back to the kernel (glibc ``malloc_trim``), so resident memory
    counts live tensors, not temporaries the allocator kept for reuse; a no-op off glibc."""
    name = ctypes.util.find_library("c")
    try:
        ctypes.CDLL(name).malloc_trim(0)
    except (OSError, AttributeError, TypeError):
        pass


def reset_peak() -> None:
    """Resets VmHWM to the current RSS (Linux >= 4.0); harmless where unsupported."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        pass
