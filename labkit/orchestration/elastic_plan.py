"""The scheduler's plan and how far the running group may train.

A plan is node changes at given steps (``join:2@10,preempt:2@60,kill:1@85,freeze:1@90``).
The *horizon* (:class:`Horizon`, a file the scheduler writes and rank 0 reads before every step)
keeps the group from passing the step of a change the scheduler has not carried out yet, so the
same plan gives the same world sizes on any machine.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from labkit.errors import ParameterError

HORIZON_FILE = "horizon.json"

Action = Literal["join", "preempt", "kill", "freeze"]

_CHANGE = re.compile(r"^(join|preempt|kill|freeze):(\d+)@(\d+)$")


@dataclass(frozen=True)
class NodeChange:
    """``action`` node ``node`` once the job has reached step ``at_step``."""

    action: Action
    node: int
    at_step: int

    def __str__(self) -> str:
        return f"{self.action}:{self.node}@{self.at_step}"


def parse_changes(text: str) -> list[NodeChange]:
    """``"join:2@20,preempt:2@45"`` as NodeChanges, in order. Each waits for the one before to
    take effect (a group formed after it), then for its step. A joining node boots for seconds
    while the old group trains on, up to the next change's step, where it holds until the node
    is in (see :class:`Horizon`): space the steps out to let the old group train meanwhile."""
    changes = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        match = _CHANGE.match(part)
        if not match:
            raise ParameterError(f"a change is ACTION:NODE@STEP with ACTION join, preempt, kill "
                                 f"or freeze, e.g. join:2@20; got {part!r}")
        changes.append(NodeChange(match[1], int(match[2]), int(match[3])))  # type: ignore[arg-type]
    return changes


def check_plan(min_nodes: int, max_nodes: int, start_nodes: int,
               changes: Sequence[NodeChange]) -> None:
    """Refuse a plan the launcher cannot carry out, before anything starts."""
    if not 1 <= min_nodes <= start_nodes <= max_nodes:
        raise ParameterError(f"need 1 <= min_nodes ({min_nodes}) <= start_nodes ({start_nodes})"
                             f" <= max_nodes ({max_nodes})")
    present, gone = set(range(start_nodes)), set()
    for change in changes:
        if not 0 <= change.node < max_nodes:
            raise ParameterError(f"{change}: node {change.node} is outside 0..{max_nodes - 1}")
        if change.action == "join":
            if change.node in present or change.node in gone:
                raise ParameterError(f"{change}: node {change.node} has already been started")
            present.add(change.node)
            continue
        if change.node == 0:
            raise ParameterError(f"{change}: node 0 hosts the c10d rendezvous store, and the job "
                                 "ends with it. On a cluster, put the store where no preemption "
                                 "reaches it (a stable host, or etcd).")
        if change.node not in present:
            raise ParameterError(f"{change}: node {change.node} is not running then")
        if len(present) - 1 < min_nodes:
            raise ParameterError(f"{change}: {len(present) - 1} node(s) would be left, below "
                                 f"the minimum of {min_nodes}")
        present.discard(change.node)
        gone.add(change.node)
    steps = [c.at_step for c in changes]
    if steps != sorted(steps):
        raise ParameterError(f"changes must come in step order, got {list(map(str, changes))}")


# --- the horizon: how far the running group may train ----------------------------------------
@dataclass(frozen=True)
class Horizon:
    """What the scheduler lets the running group do (``horizon.json`` beside the checkpoints).

    ``step``: the group holds before it passes this step (None: no limit). It is the step of
    the next change, which the scheduler carries out once the group stands there, or, while the
    last change is in flight (no group has formed since it), the end of the job; while a node is
    on its way out (preempt, kill, freeze) it stays at the step that change was made. ``world`` and
    ``since``: a group that formed after ``since`` (wall clock) with fewer than ``world`` ranks
    is *short*: a running node missed its rendezvous round. It holds until its agents re-form it
    with that node, which torchrun does as soon as the node waits for the next round.
    ``waiting_for``: the change in flight; ``next``: the change ``step`` belongs to."""

    step: int | None = None
    world: int = 0
    since: float = 0.0
    waiting_for: str | None = None
    next: str | None = None

    def hold_reason(self, step: int, world: int, formed_at: float) -> str | None:
        """Why a group of ``world`` ranks that formed at ``formed_at`` (wall clock) may not
        train past ``step`` now: ``"short"``, ``"horizon"``, or None (it may go on)."""
        if world < self.world and formed_at >= self.since:
            return "short"
        if self.step is not None and step >= self.step:
            return "horizon"
        return None


def write_horizon(folder: str | Path, horizon: Horizon) -> None:
    """Replace the horizon file atomically: a reader sees the old one or the new one."""
    path = Path(folder) / HORIZON_FILE
    tmp = path.with_name(f".{HORIZON_FILE}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(asdict(horizon)))
    os.replace(tmp, path)


def read_horizon(folder: str | Path) -> Horizon:
    """The scheduler's current horizon; without a file (no scheduler): no limit."""
    try:
        return Horizon(**json.loads((Path(folder) / HORIZON_FILE).read_text()))
    except (FileNotFoundError, ValueError, TypeError):
        return Horizon()
