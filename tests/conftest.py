"""Shared test helpers. Keep this small and generic: no autouse fixtures here."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest


def find_leftover_processes(value: str | os.PathLike, name: str = "LABKIT_RUN_DIR") -> list[str]:
    """Live processes (not this one) whose environment holds ``name=value``, as "PID: cmdline".

    labkit's launcher gives every agent and rank ``LABKIT_RUN_DIR=<run dir>``, so passing the
    ``run_dir`` a test gave ``launch_local`` finds whatever of that launch still runs. Zombies
    have an empty environ and don't count. Linux only (/proc)."""
    needle = f"{name}={os.fspath(value)}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            if needle not in environ.split(b"\0"):
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        found.append(f"{entry.name}: {cmdline.strip()}")
    return found


@pytest.fixture
def leftover_processes() -> Callable[..., list[str]]:
    """``leftover_processes(run_dir)`` (or ``(value, name=ENV_NAME)``): what still runs."""
    if not Path("/proc/self/environ").exists():
        pytest.skip("needs /proc to find processes by their environment")
    return find_leftover_processes
