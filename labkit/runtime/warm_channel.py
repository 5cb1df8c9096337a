"""The channel between a notebook and its warm group's ranks: one TCP connection per rank to a
hub in the kernel, carrying JSON lines (a cell's source and variables one way, each rank's
outcome the other; never pickle).

Why a channel of its own rather than the job's c10d TCPStore: each side learns at once when the
other is gone. A rank that dies closes its connection, so the kernel names it within
milliseconds, before torchrun's agent has noticed; a kernel that ends, however it ends (a
shutdown, a crash, SIGKILL), closes every connection, and each rank exits on the spot, so no
rank outlives its notebook. The hub listens on loopback only (simulated nodes share this host)
and drops a connection that does not open with the group's token.
"""

from __future__ import annotations

import hmac
import json
import queue
import socket
import threading
from dataclasses import dataclass
from typing import Any

HUB_ENV = "LABKIT_WARM_HUB"  # host:port of the kernel's hub, for the ranks
TOKEN_ENV = "LABKIT_WARM_TOKEN"  # the group's secret: the first line of each connection
FENCE_ENV = "LABKIT_WARM_FENCE"  # the marker a rank prints after a cell's output, then the cell


def encode(message: dict[str, Any]) -> bytes:
    """One message as a JSON line."""
    return (json.dumps(message) + "\n").encode()


def fence_line(fence: str, cell: int) -> str:
    """What a rank writes to stdout and to stderr once a cell's output is all written."""
    return f"{fence} {cell}"


@dataclass(frozen=True)
class Joined:
    """A rank connected and said who it is (its hello: rank, node, pid, ...)."""

    rank: int
    hello: dict[str, Any]


@dataclass(frozen=True)
class Reply:
    """A message from a rank (a cell's outcome)."""

    rank: int
    data: dict[str, Any]


@dataclass(frozen=True)
class Lost:
    """A rank's connection closed: the process ended, or is ending."""

    rank: int


class Hub:
    """Listens on loopback; every rank connects, opens with the token, then exchanges JSON lines.
    What ranks send arrives on ``events`` as :class:`Joined`, :class:`Reply` and :class:`Lost`
    (the queue the agents' output lines go to as well, so one loop follows both)."""

    def __init__(self, events: queue.Queue, token: str, host: str = "127.0.0.1") -> None:
        self.events, self._token = events, token
        self._server = socket.create_server((host, 0))
        self.address = f"{host}:{self._server.getsockname()[1]}"
        self.lost: set[int] = set()  # ranks whose connection closed (read by other threads)
        self._peers: dict[int, socket.socket] = {}
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, name="labkit-warm-hub", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:  # closed
                return
            with self._lock:
                if self._closed:
                    conn.close()
                    return
                self._open.add(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        rank = None
        try:
            lines = conn.makefile("r", encoding="utf-8", errors="replace")
            hello = json.loads(lines.readline() or "{}")
            if not hmac.compare_digest(str(hello.pop("token", "")), self._token):
                return
            rank = int(hello["rank"])
            with self._lock:
                self._peers[rank] = conn
            self.events.put(Joined(rank, hello))
            for line in lines:
                self.events.put(Reply(rank, json.loads(line)))
        except (OSError, ValueError, KeyError, TypeError):
            pass
        finally:
            with self._lock:
                self._open.discard(conn)
                if rank is not None:
                    self.lost.add(rank)
            if rank is not None:
                self.events.put(Lost(rank))
            conn.close()

    def send(self, rank: int, message: dict[str, Any]) -> bool:
        """Send one message to ``rank``; False when its connection is gone (a :class:`Lost`
        event follows)."""
        with self._lock:
            conn = self._peers.get(rank)
        if conn is None:
            return False
        try:
            conn.sendall(encode(message))
        except OSError:
            return False
        return True

    def close(self) -> None:
        """Close every connection (each rank exits at once) and stop listening."""
        with self._lock:
            self._closed = True
            conns = list(self._open)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()
        self._server.close()
