"""What each rank of a warm group runs (``%torchrun_start``, :mod:`labkit.runtime.warm`): join the
process group once, then run every cell the notebook sends, in a namespace of this rank's own
that persists between cells, as a kernel's does.

It runs under labkit's worker, so its output is prefixed ``[nodeN rankR]`` and its stderr goes
through the stderr tap. A cell arrives as JSON text over the group's channel
(:mod:`labkit.runtime.warm_channel`) and runs with ``exec``. After it, the rank writes a fence
line to stdout and to stderr (the notebook then knows the cell's output has all arrived) and
reports: ok, the exception and its traceback (and whether it left the process group broken), or
interrupted. SIGINT stops a running cell and is ignored between cells. When the connection
closes (``%torchrun_stop``, a failure elsewhere, the kernel ending in any way) the rank exits
at once, whatever it was doing.
"""

from __future__ import annotations

import builtins
import json
import linecache
import os
import queue
import signal
import socket
import sys
import threading
import time
import traceback
from typing import Any

from labkit.runtime.warm_channel import FENCE_ENV, HUB_ENV, TOKEN_ENV, encode, fence_line

# What gloo and NCCL raise as a plain RuntimeError once a collective failed: the group is unusable.
BROKEN_MARKERS = ("gloo", "NCCL", "pair closure", "Connection closed by peer",
                  "Connection reset by peer", "Timed out waiting")

_running = False  # a cell is executing: SIGINT interrupts it


def _on_sigint(signum: int, frame: object) -> None:
    if _running:
        raise KeyboardInterrupt


def broken_collective(exc: BaseException) -> bool:
    """Whether ``exc`` leaves the process group unusable for the next cell: one of torch's
    ``DistError`` kinds (a backend, network or store error), or what gloo and NCCL raise as a
    plain ``RuntimeError`` (a timed-out collective, a peer's closed connection)."""
    dist_error = getattr(sys.modules.get("torch.distributed"), "DistError", None)
    if dist_error is not None and isinstance(exc, dist_error):
        return True
    return isinstance(exc, RuntimeError) and any(m in str(exc) for m in BROKEN_MARKERS)


def cell_traceback(exc: BaseException) -> str:
    """The traceback from the cell down, without this file's frames."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def run_cell(message: dict[str, Any], namespace: dict[str, Any]) -> dict[str, Any]:
    """Run one cell in ``namespace``; its outcome as the reply the notebook reads."""
    global _running
    number, source = int(message["cell"]), str(message["source"])
    filename = f"<cell {number}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace.update(message.get("vars") or {})
    status, error, trace, broken = "ok", "", "", False
    try:
        code = compile(source, filename, "exec")
        _running = True
        try:
            exec(code, namespace)
        finally:
            _running = False
    except KeyboardInterrupt:
        status = "interrupted"
    except SystemExit as exc:
        if exc.code not in (None, 0):
            status, error, trace = "error", f"SystemExit: {exc.code}", cell_traceback(exc)
    except BaseException as exc:  # noqa: BLE001 (the cell's error is the notebook's to raise)
        status, error, trace = "error", f"{type(exc).__name__}: {exc}", cell_traceback(exc)
        broken = broken_collective(exc)
    return {"op": "done", "cell": number, "status": status, "error": error, "traceback": trace,
            "broken": broken, "time": time.time()}


def _exit_now() -> None:
    """The notebook is gone: leave at once (no interpreter shutdown with gloo threads running)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(0)


def _listen(conn: socket.socket, inbox: queue.Queue) -> None:
    """Hand each message to the main thread; exit the process when the connection closes."""
    try:
        for line in conn.makefile("r", encoding="utf-8"):
            inbox.put(json.loads(line))
    except (OSError, ValueError):
        pass
    _exit_now()


def main() -> None:
    signal.signal(signal.SIGINT, _on_sigint)
    from labkit.runtime import dist

    info = dist.setup()
    host, _, port = os.environ[HUB_ENV].rpartition(":")
    conn = socket.create_connection((host, int(port)))
    conn.sendall(encode({"op": "hello", "token": os.environ[TOKEN_ENV], "rank": info.rank,
                         "node": info.node_rank, "fleet_node": info.node,
                         "local_rank": info.local_rank, "pid": os.getpid(),
                         "backend": info.backend, "world_size": info.world_size}))
    inbox: queue.Queue = queue.Queue()
    threading.Thread(target=_listen, args=(conn, inbox), daemon=True).start()
    out, err, fence = sys.stdout, sys.stderr, os.environ[FENCE_ENV]
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    while True:
        reply = run_cell(inbox.get(), namespace)
        for stream in (sys.stdout, sys.stderr):  # a cell may have swapped them
            try:
                stream.flush()
            except (OSError, ValueError, AttributeError):
                pass
        sys.stdout, sys.stderr = out, err
        for stream in (out, err):
            stream.write(fence_line(fence, reply["cell"]) + "\n")
            stream.flush()
        try:
            conn.sendall(encode(reply))
        except OSError:
            _exit_now()


if __name__ == "__main__":
    main()
