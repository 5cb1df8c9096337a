"""Find and end every process of a launch, even ones whose parent died.

torchrun starts each worker in a session of its own, so killing the agent's process group
misses the workers, and a worker whose agent was SIGKILLed is re-parented away from the tree.
The launcher therefore marks every process it starts with an environment variable
(LABKIT_LAUNCH_ID), which children inherit, and finds them by that mark on Linux (/proc);
elsewhere it walks the parent/child tree with ``ps``. The course runner marks each notebook's
kernel the same way, under a name of its own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

MARK_ENV = "LABKIT_LAUNCH_ID"


def _marked_linux(mark: str, name: str) -> set[int]:
    needle = f"{name}={mark}".encode()
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone already, or not ours to read
            continue
        if needle in environ.split(b"\0"):
            found.add(int(entry.name))
    found.discard(os.getpid())
    return found


def parent_pid(pid: int) -> int:
    """The parent of ``pid``: from /proc on Linux, from ``ps`` elsewhere."""
    if not Path("/proc/self/stat").exists():
        return _process_table()[pid]
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[1])  # comm may hold spaces and ')'


def children(pid: int) -> list[int]:
    """The direct children of ``pid`` (Linux /proc; empty elsewhere)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if parent_pid(int(entry.name)) == pid:
                    found.append(int(entry.name))
            except (OSError, ValueError, IndexError):
                continue
    return found


def _process_table() -> dict[int, int]:
    """pid -> parent pid of every live process, from ``ps`` (zombies left out)."""
    out = subprocess.run(["ps", "-A", "-o", "pid=,ppid=,stat="], capture_output=True,
                         text=True).stdout
    table = {}
    for line in out.splitlines():
        pid, ppid, stat = line.split(None, 2)
        if not stat.startswith("Z"):
            table[int(pid)] = int(ppid)
    return table


def _descendants_ps(roots: set[int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, ppid in _process_table().items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        for child in children.get(pid, []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def launch_processes(mark: str, roots: set[int] = frozenset(), name: str = MARK_ENV) -> set[int]:
    """Live processes whose environment has ``name=mark`` (Linux), or else the given roots and
    their descendants; never this process itself."""
    if Path("/proc/self/environ").exists():
        return _marked_linux(mark, name)  # zombies have an empty environ, so they don't count
    found = {pid for pid in roots if _alive(pid)} | _descendants_ps(set(roots))
    return found - {os.getpid()}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal_all(pids: set[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def end_launch(mark: str, roots: set[int] = frozenset(), grace_s: float = 5.0,
               name: str = MARK_ENV) -> int:
    """SIGTERM every process of the launch (``launch_processes``), SIGKILL what is left after
    ``grace_s``.

    Returns how many processes it had to signal. Safe to call when all are gone already.
    """
    pids = launch_processes(mark, roots, name)
    if not pids:
        return 0
    _signal_all(pids, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not launch_processes(mark, roots, name):
            return len(pids)
        time.sleep(0.1)
    for _ in range(20):  # SIGKILL cannot be ignored; loop for ones forked meanwhile
        left = launch_processes(mark, roots, name)
        if not left:
            break
        _signal_all(left, signal.SIGKILL)
        time.sleep(0.05)
    return len(pids)
