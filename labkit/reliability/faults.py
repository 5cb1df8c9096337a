"""Fault injection for real ranks: die, die mid-checkpoint, lose a node, or hang, on cue.

Plans come from a string (a CLI option or ``$LABKIT_FAULTS``), one fault per ``;``::

    kill:rank=1,step=30            SIGKILL rank 1 when it reaches step 30
    kill_in_save:rank=0,step=40    SIGKILL rank 0 while its step-40 checkpoint file is half written
    kill_node:node=1,step=30       node 1 dies: its torchrun agent and all its ranks get SIGKILL
    stall:rank=0,step=5            rank 0 hangs at step 5 (``seconds=`` to end the stall)

By default a fault fires only on the first attempt (``TORCHELASTIC_RESTART_COUNT`` 0), so the
restarted job gets past it; ``attempt=N`` picks another attempt, ``attempt=any`` every one.
Training code calls ``maybe_inject(plans, rank=, node=, step=)`` once per step and gives its
``CheckpointManager`` ``before_replace=save_hook(plans, rank=, node=)``.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from labkit.errors import LaunchError, ParameterError
from labkit.runtime.proctree import children, parent_pid

FAULTS_ENV = "LABKIT_FAULTS"
KINDS = {"kill": "rank", "kill_in_save": "rank", "kill_node": "node", "stall": "rank"}
VALID_FORMS = (
    "kill:rank=R,step=S | kill_in_save:rank=R,step=S | kill_node:node=N,step=S | "
    "stall:rank=R,step=S[,seconds=T]; each may add attempt=A (default 0) or attempt=any; "
    "separate several with ';'"
)


@dataclass(frozen=True)
class FaultPlan:
    """One fault: what (``kind``), who (``rank`` or ``node``), when (``step``, ``attempt``:
    the torchrun restart it fires on, None for every one), and a stall's length (None: until
    the job is ended)."""

    kind: str
    step: int
    rank: int | None = None
    node: int | None = None
    attempt: int | None = 0
    seconds: float | None = None

    @property
    def where(self) -> str:
        return "save" if self.kind == "kill_in_save" else "step"


def _bad(text: str, why: str) -> ParameterError:
    return ParameterError(f"bad fault {text!r}: {why}. Valid forms: {VALID_FORMS}")


def _parse_one(text: str) -> FaultPlan:
    kind, sep, rest = text.partition(":")
    kind = kind.strip()
    if kind not in KINDS:
        raise _bad(text, f"unknown kind {kind!r}")
    fields: dict[str, str] = {}
    for item in rest.split(",") if sep else []:
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key or not value or key in fields:
            raise _bad(text, f"{item.strip()!r} is not a new key=value")
        fields[key] = value
    who = KINDS[kind]
    allowed = {who, "step", "attempt"} | ({"seconds"} if kind == "stall" else set())
    if unknown := set(fields) - allowed:
        raise _bad(text, f"{kind} takes {sorted(allowed)}, not {sorted(unknown)}")
    if who not in fields or "step" not in fields:
        raise _bad(text, f"{kind} needs {who}= and step=")
    try:
        numbers = {k: int(v) for k, v in fields.items() if k in (who, "step")}
        attempt = None if fields.get("attempt") == "any" else int(fields.get("attempt", "0"))
        seconds = float(fields["seconds"]) if "seconds" in fields else None
    except ValueError as exc:
        raise _bad(text, f"not a number ({exc})") from None
    if min(numbers.values()) < 0 or (attempt is not None and attempt < 0) or (
            seconds is not None and seconds < 0):
        raise _bad(text, "numbers must not be negative")
    return FaultPlan(kind, numbers["step"], rank=numbers.get("rank"), node=numbers.get("node"),
                     attempt=attempt, seconds=seconds)


def parse_faults(text: str | None) -> list[FaultPlan]:
    """The plans in ``text`` (empty or None: none); ParameterError lists the valid forms."""
    return [_parse_one(part) for part in (text or "").split(";") if part.strip()]


def faults_from_env() -> list[FaultPlan]:
    """The plans in ``$LABKIT_FAULTS`` (pass it with ``launch_local(env=...)``)."""
    return parse_faults(os.environ.get(FAULTS_ENV))


def _say(message: str) -> None:
    print(f"[fault] {message}", flush=True)


def _is_torchrun(pid: int) -> bool:
    args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    return "torch.distributed.run" in args or any(Path(a).name == "torchrun" for a in args[:2])


def torchrun_agent_pid() -> int:
    """The torchrun agent that started this rank: the parent under labkit's launcher (and
    plain torchrun); else the nearest ancestor whose command line runs torchrun (Linux)."""
    parent = os.getppid()
    if not Path("/proc").is_dir():
        return parent
    pid = parent
    while pid > 1:
        try:
            if _is_torchrun(pid):
                return pid
            pid = parent_pid(pid)
        except (OSError, ValueError, IndexError):
            break
    raise LaunchError(f"no torchrun agent among this process's ancestors (parent {parent})")


def kill_node() -> None:
    """Die the way a node does: SIGKILL the torchrun agent, its other ranks, then this one.

    Killing only the agent is not enough: torchrun starts ranks in sessions of their own and
    without a parent-death signal, so they would run on, orphaned."""
    agent = torchrun_agent_pid()
    siblings = [pid for pid in children(agent) if pid != os.getpid()]
    for pid in (agent, *siblings):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    os.kill(os.getpid(), signal.SIGKILL)


def _attempt() -> int:
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)


def maybe_inject(plans: Sequence[FaultPlan], *, rank: int, node: int, step: int,
                 where: Literal["step", "save"] = "step", attempt: int | None = None) -> None:
    """Carry out each plan meant for this rank (or node: done by its LOCAL_RANK 0), step,
    place (``"step"``: a training step, ``"save"``: mid-checkpoint) and attempt (default:
    ``$TORCHELASTIC_RESTART_COUNT``). Returns only when nothing fired or a stall ended."""
    attempt = _attempt() if attempt is None else attempt
    for plan in plans:
        if plan.where != where or plan.step != step or plan.attempt not in (None, attempt):
            continue
        if plan.kind == "kill_node":
            if plan.node == node and int(os.environ.get("LOCAL_RANK", "0")) == 0:
                _say(f"kill_node: node {node} dies at step {step} (attempt {attempt})")
                kill_node()
            continue
        if plan.rank != rank:
            continue
        if plan.kind == "stall":
            _say(f"stall: rank {rank} hangs at step {step} "
                 f"({'until ended' if plan.seconds is None else f'{plan.seconds:g} s'})")
            deadline = None if plan.seconds is None else time.monotonic() + plan.seconds
            # short sleeps in Python: SIGTERM from torchrun or the launcher still ends it
            while deadline is None or (left := deadline - time.monotonic()) > 0:
                time.sleep(0.05 if deadline is None else min(0.05, left))
            continue
        _say(f"{plan.kind}: SIGKILL rank {rank} at step {step} (attempt {attempt})")
        os.kill(os.getpid(), signal.SIGKILL)


def save_hook(plans: Sequence[FaultPlan], *, rank: int, node: int) -> Callable[[int, Path], None]:
    """A ``CheckpointManager(before_replace=...)`` hook that fires ``kill_in_save`` plans."""

    def hook(step: int, tmp: Path) -> None:
        maybe_inject(plans, rank=rank, node=node, step=step, where="save")

    return hook


def corrupt_checkpoint(path: str | Path, mode: Literal["truncate", "flip"] = "flip", *,
                       rank: int = 0) -> Path:
    """Damage a checkpoint file on disk (a step folder means its ``rank-<rank>.pt``):
    ``truncate`` keeps the first half, ``flip`` inverts one bit in the middle (torch.load may
    still read it; only the checksum notices). Returns the damaged file."""
    target = Path(path)
    if target.is_dir():
        target = target / f"rank-{rank}.pt"
    if not target.is_file():
        raise ParameterError(f"no checkpoint file at {target}")
    size = target.stat().st_size
    if mode == "truncate":
        os.truncate(target, size // 2)
    elif mode == "flip":
        with open(target, "r+b") as handle:
            handle.seek(size // 2)
            byte = handle.read(1)
            handle.seek(size // 2)
            handle.write(bytes([byte[0] ^ 0x01]))
    else:
        raise ParameterError(f"corrupt mode must be 'truncate' or 'flip', got {mode!r}")
    return target
