"""Cutting one simulated node off the network and healing it: the node's port on the lab's switch
(a :mod:`labkit.runtime.netlab` namespace) set down and up, as when a cable or a top-of-rack port
fails. Needs what netlab needs (Linux, root, iproute2); without it :class:`NetLabError` says why.
"""

from __future__ import annotations

import subprocess

from labkit.errors import LabkitError
from labkit.runtime.netlab import NetLab, NetLabError, available


class PartitionError(LabkitError):
    """A partition experiment could not run (a member did not start, the job never got going)."""


# --- cutting and healing ------------------------------------------------------------------
def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise NetLabError(f"`ip {' '.join(args)}` failed: {proc.stderr.strip() or proc.returncode}")


def require_lab() -> None:
    ok, why = available()
    if not ok:
        raise NetLabError(why)


def cut(lab: NetLab, node: int) -> None:
    """Unplug ``node``: set its veth end on the lab's switch (bridge) down. The node's own
    interface stays configured but loses its carrier; nothing reaches or leaves it."""
    lab.address(node)  # checks the node number
    _ip("-n", lab.switch, "link", "set", lab.interfaces[node].peer, "down")


def heal(lab: NetLab, node: int) -> None:
    """Plug ``node`` back in (the switch-side port up again); undoes :func:`cut`. The first
    packets after it can still be lost while neighbour (ARP) entries that failed during the
    cut are resolved again: allow a second or so before a new connection gets through."""
    lab.address(node)
    _ip("-n", lab.switch, "link", "set", lab.interfaces[node].peer, "up")


def heal_quietly(lab: NetLab, node: int) -> None:
    """Heal in a ``finally``: a failure here must not hide the experiment's own error."""
    try:
        heal(lab, node)
    except NetLabError:
        pass  # the lab is being closed anyway
