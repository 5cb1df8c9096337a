"""Free TCP ports on loopback, optionally inside a range (LABKIT_PORT_RANGE=40000-40100)."""

from __future__ import annotations

import os
import socket

from labkit.errors import LabkitError

PORT_RANGE_ENV = "LABKIT_PORT_RANGE"
# Python that finds a port free on the machine it runs on (``port``): what a launch asks of a
# remote host over ssh, or of a Slurm job's first node, before its agents start.
REMOTE_FREE_PORT = "import socket; s = socket.socket(); s.bind(('', 0)); port = s.getsockname()[1]"


def _port_range() -> tuple[int, int] | None:
    spec = os.environ.get(PORT_RANGE_ENV, "").strip()
    if not spec:
        return None
    try:
        low, high = (int(part) for part in spec.split("-", 1))
    except ValueError:
        raise LabkitError(
            f"{PORT_RANGE_ENV}={spec!r} is not a range like 40000-40100"
        ) from None
    if not 0 < low <= high < 65536:
        raise LabkitError(f"{PORT_RANGE_ENV}={spec!r}: ports must satisfy 0 < low <= high < 65536")
    return low, high


def _bindable(port: int, host: str) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on now. Another process may still take it before you bind:
    callers that start servers retry on a clash."""
    port_range = _port_range()
    if port_range is None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, 0))
            except OSError as exc:
                raise LabkitError(f"no free TCP port on {host}: {exc}") from exc
            return sock.getsockname()[1]
    low, high = port_range
    for port in range(low, high + 1):
        if _bindable(port, host):
            return port
    raise LabkitError(
        f"no free TCP port on {host} in {PORT_RANGE_ENV}={low}-{high}: "
        "stop what holds them or widen the range"
    )
