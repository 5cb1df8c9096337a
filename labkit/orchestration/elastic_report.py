"""What an elastic run did, read back from its progress log: world size and progress over time,
the holds, and what each change cost (steps lost, seconds the job stood still).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from labkit.runtime.fleet import FleetEvent
from labkit.runtime.runlog import read_records

PROGRESS_FILE = "progress.jsonl"


def read_progress(path: str | Path) -> list[dict[str, Any]]:
    """Every record of a progress log (a line cut short by a kill is skipped)."""
    return read_records(path)


# --- what a run did --------------------------------------------------------------------------
@dataclass
class Segment:
    """One attempt of the group: its world size, where it resumed and what that cost."""

    attempt: int
    world: int
    from_step: int
    to_step: int
    lost_steps: int
    start_s: float
    end_s: float


@dataclass
class Hold:
    """A stretch in which the group stood still on purpose (seconds since the first group's
    start). ``reason`` ``"horizon"``: at the step of ``next`` (or the end of the job), until
    the scheduler carried it out, or while ``waiting_for``, a change in flight, had not formed
    its group yet; ``"short"``: the group formed with ``world`` of ``expected_world`` ranks (a
    running node missed the round) and waited to be re-formed with it. ``ended``: ``"notice"``
    (its ranks were told to leave: a re-form) or ``"released"`` (the scheduler let it go on)."""

    step: int
    world: int
    expected_world: int
    attempt: int
    reason: str
    waiting_for: str | None
    next: str | None
    ended: str
    start_s: float
    end_s: float

    @property
    def seconds(self) -> float:
        return self.end_s - self.start_s


@dataclass
class ChangeOutcome:
    """What became of one planned change. ``applied``: the scheduler carried it out ``at_s``
    seconds after the launch, the job at step ``at_step``; ``formed``: a new group formed after
    it. ``why_not``: why it was not applied, or formed no group, in words."""

    change: str
    applied: bool = False
    at_s: float | None = None
    at_step: int | None = None
    formed: bool = False
    why_not: str | None = None
    at_wall: float | None = field(default=None, repr=False)  # time.time() when applied


@dataclass
class ChangeRow:
    """One applied change against the groups around it, on the launch's clock (seconds since it
    began): the step the job had reached when the scheduler acted, the old group's last step,
    where the new group resumed, the steps lost, and the *stall*, from the old group's last step
    to the new group's start (nobody trained). ``held_s`` of the stall the old group stood at
    its horizon (for a join: while the node booted); ``short_rounds``: rounds that closed
    without a running node and were re-formed with it, inside the stall."""

    change: str
    at_s: float
    acted_at_step: int
    world: str | None = None
    stopped_at_step: int | None = None
    resumed_from: int | None = None
    lost_steps: int | None = None
    stall_s: float | None = None
    resumed_after_s: float | None = None
    held_s: float = 0.0
    short_rounds: int = 0


@dataclass
class ElasticRun:
    """What an elastic job did, from its progress log and the launcher's fleet events."""

    ok: bool
    min_nodes: int
    max_nodes: int
    changes: list[str]
    events: list[FleetEvent]
    segments: list[Segment]
    records: list[dict[str, Any]] = field(repr=False)
    final: dict[str, Any] | None
    seconds: float
    ended_after_finish: list[int] = field(default_factory=list)  # agents stuck in exit barrier
    started_at: float = 0.0  # wall clock (time.time()) when the launch began: events count from it
    output: list[str] = field(default_factory=list, repr=False)  # the agents' and ranks' lines
    outcomes: list[ChangeOutcome] = field(default_factory=list)  # one per planned change
    holds: list[Hold] = field(default_factory=list)
    timeout_s: float = 0.0  # the launch's limit

    @property
    def worlds(self) -> list[int]:
        """World size of each segment, in order (e.g. [2, 3, 2])."""
        return [s.world for s in self.segments]

    @property
    def lost_steps(self) -> int:
        return sum(s.lost_steps for s in self.segments)

    @property
    def offset_s(self) -> float:
        """From the launch to the first group's start (start-up); segments and holds count
        from there, events and change rows from the launch."""
        return _first_time(self.records) - self.started_at if self.records else 0.0

    @property
    def unapplied(self) -> list[ChangeOutcome]:
        """Planned changes that were not carried out or formed no group, with the reason."""
        return [o for o in self.outcomes if not (o.applied and o.formed)]

    def timeline(self) -> list[tuple[float, int, int]]:
        """(seconds since the first start, step, world size) of every finished step."""
        t0 = _first_time(self.records)
        return [(r["t"] - t0, r["step"], r["world"]) for r in self.records
                if "event" not in r and "step" in r]

    def change_rows(self) -> list[ChangeRow]:
        """One row per change the scheduler carried out (see :class:`ChangeRow`)."""
        offset, rows = self.offset_s, []
        for outcome in self.outcomes:
            if not outcome.applied or outcome.at_s is None or outcome.at_step is None:
                continue
            row = ChangeRow(outcome.change, outcome.at_s, outcome.at_step)
            after = next((i for i, s in enumerate(self.segments)
                          if s.start_s + offset > outcome.at_s), None)
            if after:
                old, new = self.segments[after - 1], self.segments[after]
                inside = [h for h in self.holds if old.end_s <= h.start_s < new.start_s]
                row.world = f"{old.world}->{new.world}"
                row.stopped_at_step, row.resumed_from = old.to_step, new.from_step
                row.lost_steps, row.stall_s = new.lost_steps, new.start_s - old.end_s
                row.resumed_after_s = new.start_s + offset - outcome.at_s
                row.held_s = sum(h.seconds for h in inside if h.reason == "horizon")
                row.short_rounds = sum(h.reason == "short" for h in inside)
            rows.append(row)
        return rows

    def to_dict(self, *, records: bool = False) -> dict[str, Any]:
        """The run as JSON-able data; ``records=True`` adds the progress log and the launch's
        start, so :meth:`from_dict` gives back a run whose timeline and change rows are whole."""
        extra = {"records": self.records, "started_at": self.started_at} if records else {}
        return {**extra, "ok": self.ok, "min_nodes": self.min_nodes, "max_nodes": self.max_nodes,
                "changes": self.changes, "worlds": self.worlds, "lost_steps": self.lost_steps,
                "seconds": round(self.seconds, 2), "timeout_s": round(self.timeout_s, 1),
                "final": self.final, "ended_after_finish": self.ended_after_finish,
                "events": [asdict(e) for e in self.events],
                "segments": [asdict(s) for s in self.segments],
                "outcomes": [{k: v for k, v in asdict(o).items() if k != "at_wall"}
                             for o in self.outcomes],
                "holds": [asdict(h) for h in self.holds]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ElasticRun:
        """A run saved with ``to_dict(records=True)`` (a notebook's, say), read back."""
        try:
            return cls(ok=data["ok"], min_nodes=data["min_nodes"], max_nodes=data["max_nodes"],
                       changes=data["changes"], final=data["final"], seconds=data["seconds"],
                       events=[FleetEvent(**e) for e in data["events"]],
                       segments=[Segment(**x) for x in data["segments"]],
                       records=data["records"], started_at=data["started_at"],
                       ended_after_finish=data["ended_after_finish"],
                       outcomes=[ChangeOutcome(**o) for o in data["outcomes"]],
                       holds=[Hold(**h) for h in data["holds"]], timeout_s=data["timeout_s"])
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a saved elastic run with its records: {exc!r}") from None


def _first_time(records: list[dict[str, Any]]) -> float:
    return min((r["t"] for r in records if "t" in r), default=0.0)


def segments_of(records: list[dict[str, Any]]) -> list[Segment]:
    """Cut the progress log at each (re)start of the group. A short round (see
    :class:`Horizon`) is no segment: it trained nothing and was re-formed at once."""
    t0 = _first_time(records)
    segments: list[Segment] = []
    for record in records:
        if record.get("event") == "start" and not record.get("short"):
            segments.append(Segment(record["attempt"], record["world"], record["from_step"],
                                    record["from_step"], record["lost_steps"],
                                    record["t"] - t0, record["t"] - t0))
        elif "event" not in record and segments:
            segments[-1].to_step = max(segments[-1].to_step, record["step"])
            segments[-1].end_s = record["t"] - t0
    return segments


def holds_of(records: list[dict[str, Any]]) -> list[Hold]:
    """Every hold rank 0 logged, in seconds since the first group's start."""
    t0 = _first_time(records)
    return [Hold(r["step"], r["world"], r.get("expected_world", r["world"]), r["attempt"],
                 r["reason"], r.get("waiting_for"), r.get("next"), r["ended"],
                 r["t"] - t0, r["until"] - t0)
            for r in records if r.get("event") == "hold"]
