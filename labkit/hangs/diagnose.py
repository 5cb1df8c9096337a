"""Name the culprit of a hang from the ranks' flight-recorder dumps, errors and stacks.

The rule (the flight-recorder idea): walk the collective sequence numbers from 1 and stop at the
first one the ranks disagree on or that did not complete everywhere.

* a rank left no dump at all: it died (SIGKILL runs no handler): **missing**;
* the ranks issued different ops or shapes at that seq: the odd one out (**different_op**,
  **different_shape**);
* only a minority issued it: they are **ahead** (an extra collective);
* a minority did not issue it: they are **behind** (stuck before the collective).

With two ranks "ahead" and "behind" look the same (one issued, one did not): the result is
**ambiguous** unless monitored_barrier named the rank. Lock waits that were in progress when
the hang was detected form a wait-for graph; a cycle is a deadlock, and the culprit is the rank
that took its locks against the global (alphabetical) order: **lock_order**.

Times: ``hang_started_at`` is the first start, on any rank, of the collective (or the last lock
wait) that never completed everywhere (for a dead rank whose peers never blocked: their last
finished call); ``detected_at`` the first failure on any rank (a timeout, a mismatch, a lost
peer, a lock timeout), a recorder watchdog dump, or else the first SIGTERM (from torchrun, or a
live watch ending the job).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# (text in the error, what detected it): the first match wins
DETECTORS = (
    ("ProcessGroupWrapper", "TORCH_DISTRIBUTED_DEBUG=DETAIL monitored barrier"),
    ("Detected mismatch between collectives", "TORCH_DISTRIBUTED_DEBUG=DETAIL fingerprint check"),
    ("failed to pass monitoredBarrier", "monitored_barrier"),
    ("successfully reached monitoredBarrier", "monitored_barrier (waiting for rank 0)"),
    ("FileLockTimeoutError", "lock wait timeout"),
    ("Timed out waiting", "gloo collective timeout"),
    ("by peer", "peer connection lost"),
)
FINGERPRINT = re.compile(r"Rank (\d+) is running collective: CollectiveFingerPrint\("
                         r"SequenceNumber=(\d+), OpType=(\w+), TensorShape=\[([^\]]*)\]")
MONITORED = re.compile(r"Ranks? ([\d, ]+) failed to pass monitoredBarrier in (\d+) ms")
NAMED = re.compile(r"monitored_barrier on rank \d+: ranks (\d+) did not arrive")
# the launcher's frames, and the recorders' own (a stack taken while a rank dumps)
HIDDEN_FRAMES = ("worker.py", "runpy", "hangs/recorder.py", "hangs/torch_fr.py", "json/")
FRAME = re.compile(r'File "([^"]+)", line (\d+) in (\S+)')


@dataclass
class Diagnosis:
    """Who hung the job, in which collective (or lock), and why we think so."""

    culprit_rank: int | None
    kind: str
    op: str = ""
    seq: int | None = None
    hang_started_at: float | None = None
    detected_at: float | None = None
    detected_by: str = ""
    evidence: list[str] = field(default_factory=list)

    @property
    def detected_within_s(self) -> float | None:
        if self.hang_started_at is None or self.detected_at is None:
            return None
        return max(0.0, self.detected_at - self.hang_started_at)


def load_dumps(folder: Path) -> dict[int, dict[str, Any]]:
    """rank -> its last recorder dump (ranks that left none are absent)."""
    dumps = {}
    for path in sorted(Path(folder).glob("rank*.json")):
        try:
            dump = json.loads(path.read_text())
        except ValueError:
            continue
        dumps[int(dump["rank"])] = dump
    return dumps


def main_thread_stack(text: str, max_frames: int = 10) -> str:
    """The main thread's frames from the last faulthandler dump in ``text``, innermost first,
    without the launcher's and the recorder's own frames."""
    blocks, current = [], []
    for line in text.splitlines():
        if line.startswith(("Thread 0x", "Current thread 0x", "Stack (most recent")):
            current = [line]
            blocks.append(current)
        elif line.startswith("  File ") and current:
            current.append(line)
    main = [b for b in blocks if any("worker.py" in f or "runpy" in f for f in b)]
    if not main:
        return ""
    frames = [f for f in main[-1][1:] if not any(s in f for s in HIDDEN_FRAMES)]
    return "\n".join(frames[:max_frames])


def stack_summary(stack: str, depth: int = 2) -> str:
    """``func (file:line) <- caller (file:line)`` from a stack as main_thread_stack gives it."""
    frames = [FRAME.search(line) for line in stack.splitlines() if "contextlib.py" not in line]
    return " <- ".join(f"{m[3]} ({Path(m[1]).name}:{m[2]})" for m in frames[:depth] if m)


def detector(error: str) -> str:
    return next((name for text, name in DETECTORS if text in error), error.split("\n")[0][:80])


def _events(dump: dict, kind: str) -> list[dict]:
    return [e for e in dump["events"] if e["kind"] == kind]


def _show(event: dict) -> str:
    parts = [f"seq {event['seq']}", event["op"], ",".join(map(str, event["shapes"])),
             event["dtype"], f"({event['state']})"]
    return " ".join(p for p in parts if p)


def _ranks(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _first_detection(dumps: dict[int, dict]) -> tuple[float | None, str, list[str]]:
    """Earliest failure (or watchdog dump) on any rank, what detected it, and tool evidence."""
    found: list[tuple[float, int, str]] = []
    for rank, dump in dumps.items():
        found += [(e["ended_at"], rank, e["error"]) for e in dump["events"]
                  if e["state"] == "failed" and e["ended_at"]]
        found += [(t, rank, reason) for t, reason in dump["triggers"]
                  if reason.startswith("watchdog")]
    if not found:
        stops = [(t, r, why) for r, d in dumps.items() for t, why in d["triggers"]
                 if why.startswith("signal")]
        if not stops:
            return None, "not detected", []
        t, rank, why = min(stops)
        return t, "SIGTERM stopped the ranks (torchrun, or a watch)", [f"rank {rank}: {why}"]
    found.sort()
    first_at, first_rank, first = found[0]
    evidence = [f"first to notice: rank {first_rank}: {first.splitlines()[0][:240]}"]
    for _, rank, error in found:
        if m := MONITORED.search(error):
            evidence.append(f"monitored_barrier on rank {rank}: ranks {m[1]} did not arrive "
                            f"within {m[2]} ms")
            break
    for _, rank, error in found:
        if prints := FINGERPRINT.findall(error):
            evidence.append(f"DETAIL on rank {rank}: " + "; ".join(
                f"rank {r} runs {op} [{shape}] (torch seq {s})" for r, s, op, shape in prints))
            break
    how = "recorder watchdog" if first.startswith("watchdog") else detector(first)
    return first_at, f"{how} on rank {first_rank}", evidence


def _lock_cycle(dumps: dict[int, dict], detected_at: float) -> Diagnosis | None:
    """A wait-for cycle among lock waits in progress at ``detected_at``."""
    waits: dict[int, dict] = {}
    for rank, dump in dumps.items():
        for e in _events(dump, "lock"):
            ended = e["ended_at"] if e["ended_at"] is not None else float("inf")
            if "holder" in e["info"] and e["started_at"] <= detected_at <= ended + 1e-3:
                waits[rank] = e
    for start in waits:
        path, rank = [], start
        while rank in waits and rank not in path:
            path.append(rank)
            rank = waits[rank]["info"]["holder"]
        if rank != start:
            continue
        info = {r: waits[r]["info"] for r in path}
        cycle = "; ".join(f"rank {r} holds {', '.join(i['held']) or 'nothing'} and waits for "
                          f"{i['lock']} (held by rank {i['holder']})" for r, i in info.items())
        found = Diagnosis(None, "lock_cycle", hang_started_at=max(
            waits[r]["started_at"] for r in path), evidence=[f"wait-for cycle: {cycle}"])
        broke = [r for r, i in info.items() if any(h > i["lock"] for h in i["held"])]
        if broke:  # with one global order no cycle can form: someone broke it
            r, i = broke[0], info[broke[0]]
            found.culprit_rank, found.kind = r, "lock_order"
            found.op, found.seq = f"flock {i['lock']}", waits[r]["seq"]
            found.evidence.append(f"rank {r} took {i['held'][-1]} before {i['lock']}: against "
                                  "the lock order (alphabetical); take locks in one global "
                                  "order to fix it")
        return found
    return None


def _compare_sequences(dumps: dict[int, dict], world_size: int) -> Diagnosis:
    present = sorted(dumps)
    missing = [r for r in range(world_size) if r not in dumps]
    seqs = {r: {e["seq"]: e for e in _events(d, "collective")} for r, d in dumps.items()}
    last = {r: max(s) if s else 0 for r, s in seqs.items()}
    summary = "last collective per rank: " + "; ".join(
        f"{r}: {_show(seqs[r][last[r]]) if last[r] else 'none'}" for r in present)
    for seq in range(1, max(last.values(), default=0) + 1):
        issued = {r: s[seq] for r, s in seqs.items() if seq in s}
        absent = [r for r in present if r not in issued]
        started = min((e["started_at"] for e in issued.values()), default=None)
        groups: dict[tuple, list[int]] = defaultdict(list)
        for r, e in issued.items():
            groups[(e["op"], json.dumps(e["shapes"]), e["dtype"])].append(r)
        if len(groups) > 1:
            ranked = sorted(groups.values(), key=len, reverse=True)
            if len(ranked[0]) == len(ranked[1]):
                return Diagnosis(None, "ambiguous", seq=seq, hang_started_at=started, evidence=[
                    f"seq {seq}: as many ranks run one collective as another", summary])
            odd = sorted(r for g in ranked[1:] for r in g)
            kind = ("different_op" if len({issued[r]["op"] for r in issued}) > 1
                    else "different_shape")
            return Diagnosis(odd[0], kind, issued[odd[0]]["op"], seq, started, evidence=[
                f"seq {seq}: {_ranks(ranked[0])} run {_show(issued[ranked[0][0]])}, "
                + "; ".join(f"rank {r} runs {_show(issued[r])}" for r in odd), summary])
        if not absent and all(e["state"] in ("completed", "async") for e in issued.values()):
            continue
        op = next(iter(issued.values()))["op"] if issued else ""
        if missing:
            return Diagnosis(missing[0], "missing", op, seq, started, evidence=[
                f"{_ranks(missing)} left no recorder dump (a killed rank runs no handler); "
                f"{_ranks(present)} stopped at seq {seq} {op}", summary])
        if not absent:
            return Diagnosis(None, "stalled", op, seq, started, evidence=[
                f"every rank issued seq {seq} {op} the same way, yet it did not complete",
                summary])
        if len(issued) == len(absent):
            return Diagnosis(None, "ambiguous", op, seq, started, evidence=[
                f"{_ranks(sorted(issued))} issued seq {seq} {op}, {_ranks(absent)} did not: "
                "with as many on each side, ahead and behind look the same", summary])
        if len(issued) < len(absent):
            ahead = sorted(issued)
            return Diagnosis(ahead[0], "ahead", op, seq, started, evidence=[
                f"{_ranks(ahead)} issued seq {seq} {op} that {_ranks(absent)} never issued: "
                f"{_ranks(ahead)} is ahead (an extra collective)", summary])
        return Diagnosis(absent[0], "behind", op, seq, started, evidence=[
            f"{_ranks(sorted(issued))} wait in seq {seq} {op}; {_ranks(absent)} never issued "
            f"it: {_ranks(absent)} is behind (stuck before the collective)", summary])
    if missing:  # the others were stopped before they blocked: the job stalled after their
        ends = [e["ended_at"] for d in dumps.values() for e in d["events"] if e["ended_at"]]
        return Diagnosis(missing[0], "missing", hang_started_at=max(ends, default=None),
                         evidence=[f"{_ranks(missing)} left no recorder dump (a killed rank "
                                   "runs no handler)", summary])
    return Diagnosis(None, "none", evidence=["no rank diverged and every collective completed",
                                             summary])


def diagnose(dumps: dict[int, dict], world_size: int,
             stacks: dict[int, str] | None = None, at: float | None = None) -> Diagnosis:
    """The culprit from the dumps (``load_dumps``) and main-thread stacks (optional). ``at``:
    the moment to look for a lock cycle when nothing failed yet (a live watch's alarm)."""
    detected_at, detected_by, tool_evidence = _first_detection(dumps)
    moment = detected_at if detected_at is not None else at
    result = (_lock_cycle(dumps, moment) if moment is not None else None) \
        or _compare_sequences(dumps, world_size)
    named = [int(m[1]) for line in tool_evidence if (m := NAMED.match(line))]
    if result.culprit_rank is None and named:  # monitored_barrier named the rank
        result.culprit_rank, result.kind = named[0], "behind"
    result.detected_at, result.detected_by = detected_at, detected_by
    result.evidence += tool_evidence
    for rank, stack in sorted((stacks or {}).items()):
        if stack:
            result.evidence.append(f"rank {rank} stack: {stack_summary(stack)}")
    return result
