"""A flight recorder for collectives that works on any backend, gloo included.

PyTorch's NCCL flight recorder keeps the last collectives of each rank and dumps them when the
watchdog times out. This is the same idea in plain Python, so it works where the course runs
(gloo on CPUs): every call of ``torch.distributed.all_reduce`` & co. is wrapped and recorded
in a ring buffer with its sequence number, op, shapes, dtype, start/end time and state
(started, completed, failed). Each rank writes the buffer as JSON to ``<run dir>/hangs/`` when
a collective fails (the timeout error), when its own watchdog sees a collective in flight past
the timeout, when it is told to stop (SIGTERM: torchrun stops the other ranks when one fails),
and when it finishes. Comparing the ranks' sequences names the culprit (``labkit.hangs.diagnose``).

Python stacks go to ``stacks-rank<R>.txt`` next to it, by :mod:`faulthandler`: on SIGTERM (a
C-level handler, so it works even while the rank is blocked inside a C++ collective), on
``kill -USR1 <pid>``, on a failure and on a watchdog trigger.

On demand, while the rank is alive and blocked: ``kill -USR1 <pid>`` writes the stacks (C level)
and wakes a thread of the recorder (``signal.set_wakeup_fd``: Python's C handler writes the signal
number to a socket), which dumps the buffer, and PyTorch's flight recorder through
``labkit.hangs.torch_fr`` when one is attached; SIGTERM does the same, then exits. A Python
signal handler alone would wait for the blocked main thread to return to Python.

One writer (the rank's main thread) changes the buffer; dumps only read it, so a dump from the
signal handler or the watchdog thread needs no lock (a lock could deadlock a signal handler).
"""

from __future__ import annotations

import atexit
import faulthandler
import functools
import itertools
import json
import os
import signal
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from labkit.hangs.torch_fr import TorchFlightRecorder

DUMP_FOLDER = "hangs"  # inside the launch's run dir
WATCHDOG_SLACK_S = 1.0  # the backend's own timeout error should come first
ON_DEMAND = "on demand"  # how a dump asked for with SIGUSR1 starts its reason
IN_FLIGHT = ("started", "waiting")  # the states of a call that has not returned
Listener = Callable[["Event", str], None]  # (event, "begin" | "end"): what a live exporter sees
RECORDED_OPS = (
    "all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "gather",
    "scatter", "reduce_scatter", "reduce_scatter_tensor", "all_to_all", "all_to_all_single",
    "barrier", "monitored_barrier", "send", "recv",
)


def dump_folder(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / DUMP_FOLDER


def dump_path(folder: Path, rank: int) -> Path:
    return folder / f"rank{rank}.json"


def stacks_path(folder: Path, rank: int) -> Path:
    return folder / f"stacks-rank{rank}.txt"


@dataclass
class Event:
    """One recorded call: a collective (``seq`` counts this rank's collectives from 1) or a
    lock wait (``seq`` counts its lock acquisitions; ``info`` holds lock, holder, held)."""

    kind: str  # "collective" or "lock"
    seq: int
    op: str
    shapes: list[list[int]]
    dtype: str
    state: str  # started, completed, failed, async; locks: waiting, held, released, failed
    started_at: float  # time.time(): comparable across the ranks of one host
    ended_at: float | None = None
    error: str = ""
    info: dict[str, Any] = field(default_factory=dict)


def describe(args: tuple, kwargs: dict) -> tuple[list[list[int]], str]:
    """Shapes (at most 4) and the first dtype of the tensors in a call's arguments."""
    tensors = []
    for arg in (*args, *kwargs.values()):
        items = arg if isinstance(arg, (list, tuple)) else [arg]
        tensors += [t for t in items if hasattr(t, "shape") and hasattr(t, "dtype")]
    shapes = [list(t.shape) for t in tensors[:4]]
    return shapes, str(tensors[0].dtype).removeprefix("torch.") if tensors else ""


class Recorder:
    """This rank's ring buffer of the last ``capacity`` events, dumped as JSON on trouble."""

    def __init__(self, rank: int, world_size: int, folder: str | os.PathLike,
                 timeout_s: float, capacity: int = 64) -> None:
        self.rank, self.world_size, self.timeout_s = rank, world_size, timeout_s
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.events: deque[Event] = deque(maxlen=capacity)
        self.held_locks: list[str] = []
        self.triggers: list[tuple[float, str]] = []  # why and when it dumped
        self._seq = {"collective": 0, "lock": 0}
        self._tmp_ids = itertools.count()
        self._stacks = open(stacks_path(self.folder, rank), "a")  # faulthandler writes to it
        self._stop = threading.Event()
        self.listeners: list[Listener] = []
        self.torch_fr: TorchFlightRecorder | None = None  # PyTorch's recorder, dumped with ours

    # --- recording ------------------------------------------------------------------------
    def begin(self, kind: str, op: str, shapes: list[list[int]] | None = None, dtype: str = "",
              state: str = "started", **info: Any) -> Event:
        self._seq[kind] += 1
        event = Event(kind, self._seq[kind], op, shapes or [], dtype, state, time.time(),
                      info=info)
        self.events.append(event)
        self._notify(event, "begin")
        return event

    def end(self, event: Event, state: str = "completed") -> None:
        event.state, event.ended_at = state, time.time()
        self._notify(event, "end")

    def _notify(self, event: Event, phase: str) -> None:
        for listener in self.listeners:
            try:
                listener(event, phase)
            except Exception:  # noqa: BLE001 (an exporter's trouble never reaches the job)
                pass

    def fail(self, event: Event, exc: BaseException) -> None:
        """Record the error (a timeout, a mismatch, a lost peer), then dump stacks and buffer."""
        event.state, event.ended_at = "failed", time.time()
        event.error = f"{type(exc).__name__}: {exc}"[:3000]
        self._notify(event, "end")
        reason = f"{event.op} seq {event.seq} failed: {type(exc).__name__}"
        self.dump_stacks(reason)
        self.dump(reason)

    def call(self, op: str, fn: Callable, args: tuple, kwargs: dict) -> Any:
        """Run one collective and record it."""
        shapes, dtype = describe(args, kwargs)
        event = self.begin("collective", op, shapes, dtype)
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            self.fail(event, exc)
            raise
        self.end(event, "async" if kwargs.get("async_op") else "completed")
        return result

    # --- dumping --------------------------------------------------------------------------
    def snapshot(self, reason: str) -> dict[str, Any]:
        return {
            "rank": self.rank, "world_size": self.world_size, "pid": os.getpid(),
            "timeout_s": self.timeout_s, "reason": reason, "dumped_at": time.time(),
            "triggers": list(self.triggers), "held_locks": list(self.held_locks),
            "events": [asdict(e) for e in list(self.events)],
        }

    def dump(self, reason: str) -> Path:
        """Write the buffer to ``rank<R>.json`` atomically (a reader never sees half a file),
        PyTorch's flight recorder first when one is attached."""
        if self.torch_fr is not None:
            self.torch_fr.dump(reason)
        self.triggers.append((time.time(), reason))
        target = dump_path(self.folder, self.rank)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.{next(self._tmp_ids)}.tmp")
        tmp.write_text(json.dumps(self.snapshot(reason), indent=1))
        os.replace(tmp, target)
        return target

    def dump_stacks(self, reason: str) -> None:
        self._stacks.write(f"\n=== rank {self.rank}: {reason} at {time.time():.3f}\n")
        self._stacks.flush()
        faulthandler.dump_traceback(self._stacks, all_threads=True)

    # --- wiring ---------------------------------------------------------------------------
    def install(self) -> Recorder:
        """Record every collective called through ``torch.distributed``; dump stacks on SIGTERM
        and SIGUSR1; dump the buffer on SIGTERM; start the watchdog."""
        import torch.distributed as dist

        for name in RECORDED_OPS:
            fn = getattr(dist, name, None)
            if fn is not None and not hasattr(fn, "__labkit_recorded__"):
                setattr(dist, name, self._wrap(name, fn))
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGUSR1, _ignore)  # the wake-up thread does the work
        self._wake_on_signals()
        # C-level dumps first (they work while the main thread is blocked in C++), then chain
        # to the Python handlers above (they write the signal number to the wake-up socket).
        for signum in (signal.SIGTERM, signal.SIGUSR1):
            faulthandler.register(signum, self._stacks, all_threads=True, chain=True)
        faulthandler.enable(self._stacks, all_threads=True)  # a crash leaves its stack too
        atexit.register(self._detach_signals)
        threading.Thread(target=self._watch, name="labkit-hang-watchdog", daemon=True).start()
        return self

    def _wake_on_signals(self) -> None:
        """Python's C signal handler writes each signal's number to this socket at once, so a
        thread acts on SIGUSR1/SIGTERM while the main thread is blocked in C++."""
        reader, writer = socket.socketpair()
        writer.setblocking(False)
        try:
            signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        except ValueError:  # not the main thread: the Python handlers alone, later
            reader.close()
            writer.close()
            return
        self._wake = (reader, writer)  # kept open for the life of the process
        threading.Thread(target=self._serve_signals, args=(reader,), daemon=True,
                         name="labkit-hang-signals").start()

    def _serve_signals(self, reader: socket.socket) -> None:
        while data := reader.recv(64):
            for signum in data:
                if signum == signal.SIGUSR1:
                    self.dump(f"{ON_DEMAND} (SIGUSR1)")
                elif signum == signal.SIGTERM:
                    self._on_signal(signum, None)

    def _wrap(self, name: str, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def recorded(*args: Any, **kwargs: Any) -> Any:
            return self.call(name, fn, args, kwargs)

        recorded.__labkit_recorded__ = True  # type: ignore[attr-defined]
        return recorded

    def _detach_signals(self) -> None:
        """At exit, give SIGTERM back before the interpreter finalizes its signal handling:
        faulthandler chaining into a finalized Python handler crashes (SIGSEGV)."""
        for signum in (signal.SIGTERM, signal.SIGUSR1):
            faulthandler.unregister(signum)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # a late request finds nobody to dump

    def _on_signal(self, signum: int, frame: object) -> None:
        self.dump(f"signal {signal.Signals(signum).name}")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(128 + signum)

    def _watch(self) -> None:
        """Dump once per collective that stays in flight past the timeout (plus slack)."""
        fired: set[int] = set()
        while not self._stop.wait(0.25):
            now = time.time()
            for event in list(self.events):
                late = now - event.started_at > self.timeout_s + WATCHDOG_SLACK_S
                if event.kind == "collective" and event.state == "started" and late \
                        and event.seq not in fired:
                    fired.add(event.seq)
                    reason = f"watchdog: {event.op} seq {event.seq} in flight " \
                             f"{now - event.started_at:.1f} s"
                    self.dump_stacks(reason)
                    self.dump(reason)

    def close(self, reason: str = "finished") -> None:
        self._stop.set()
        self.dump(reason)



def _ignore(signum: int, frame: object) -> None:
    """SIGUSR1's Python handler: nothing (the wake-up thread dumped already)."""
