"""What a launch leaves on its hosts, found and ended by the mark its processes carry.

Every remote process of a launch (torchrun's agent and its ranks) inherits an environment
variable with the launch's mark, so after any exit (a finished job, a failed host, a timeout,
Ctrl-C, SIGTERM) one short ssh per host ends what still carries the mark (SIGTERM, then SIGKILL
after a grace), counts what is left, and removes the launch's scratch folder (its ``TMPDIR``,
where torchrun writes a log folder per agent that it never removes): the launcher says
processes ended only after this check. The script is plain ``sh`` reading ``/proc``: it needs
nothing of the lab on the host.
"""

from __future__ import annotations

import shlex
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from labkit.cluster.hosts import Host, SshSettings
from labkit.runtime.proctree import MARK_ENV

GRACE_TENTHS = 50  # how long (tenths of a second) processes get between SIGTERM and SIGKILL
CLEANUP_TIMEOUT_S = 60.0  # one host's whole cleanup: connect, end, count
SCRATCH_PREFIX = "labkit-run-"  # a launch's TMPDIR on each host: ${TMPDIR:-/tmp}/labkit-run-<mark>


@dataclass(frozen=True)
class RemoteCleanup:
    """One host after the launch: how many marked processes were running, how many are left
    (``None`` when the host could not be checked, with ``error`` saying why)."""

    host: str
    found: int | None
    left: int | None
    error: str = ""


def scratch_folder(mark: str) -> str:
    """The launch's ``TMPDIR`` on a host, as sh words: under the login's own ``$TMPDIR``."""
    return f'"${{TMPDIR:-/tmp}}/{SCRATCH_PREFIX}{mark}"'


def cleanup_script(mark: str, grace_tenths: int = GRACE_TENTHS) -> str:
    """sh that ends every process whose environment holds the mark and removes the launch's
    scratch folder; prints ``found=N left=M``."""
    needle = shlex.quote(f"{MARK_ENV}={mark}")
    return (
        "marked() { for d in /proc/[0-9]*; do "
        f"grep -qsxzF {needle} \"$d/environ\" && echo \"${{d#/proc/}}\"; done; }}; "
        'pids=$(marked); found=$(echo $pids | wc -w); '
        'if [ -n "$pids" ]; then kill -TERM $pids 2>/dev/null; i=0; '
        f'while [ $i -lt {grace_tenths} ] && [ -n "$(marked)" ]; do sleep 0.1; i=$((i+1)); '
        'done; left=$(marked); [ -n "$left" ] && kill -KILL $left 2>/dev/null; sleep 0.2; fi; '
        f'rm -rf {scratch_folder(mark)}; '
        'echo "found=$found left=$(marked | wc -w)"'
    )


def _cleanup(host: Host, settings: SshSettings, mark: str) -> RemoteCleanup:
    command = [*settings.argv(host), cleanup_script(mark)]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=CLEANUP_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return RemoteCleanup(host.name, None, None, f"no answer in {CLEANUP_TIMEOUT_S:g} s")
    fields = dict(item.split("=", 1) for item in proc.stdout.split() if "=" in item)
    if proc.returncode != 0 or not {"found", "left"} <= fields.keys():
        why = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
        return RemoteCleanup(host.name, None, None, why)
    return RemoteCleanup(host.name, int(fields["found"]), int(fields["left"]))


def end_remote(hosts: list[Host], settings: SshSettings, mark: str) -> list[RemoteCleanup]:
    """End the launch's processes on every host, all hosts at once; one result per host."""
    with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as pool:
        return list(pool.map(lambda h: _cleanup(h, settings, mark), hosts))


def describe(cleanups: list[RemoteCleanup]) -> str:
    """One sentence: what was still running, what is left, which hosts could not be checked."""
    ended = [c for c in cleanups if c.found]
    parts = []
    if ended:
        parts.append("ended " + ", ".join(f"{c.found} on {c.host}" for c in ended))
    unknown = [c for c in cleanups if c.left is None]
    left = [c for c in cleanups if c.left]
    if left:
        parts.append("STILL RUNNING: " + ", ".join(f"{c.left} on {c.host}" for c in left))
    if unknown:
        parts.append("could not check " + "; ".join(f"{c.host} ({c.error})" for c in unknown))
    if not left and not unknown:
        parts.append(f"0 processes left on {', '.join(c.host for c in cleanups)}")
    return "remote processes: " + "; ".join(parts)
