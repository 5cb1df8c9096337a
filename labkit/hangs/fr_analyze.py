"""What PyTorch's flight recorder and its analyzer say about a hang, beside labkit's recorder.

:func:`analyze` runs torch's analyzer in a process of its own (``fr_analyze_child``: the
operator's ``torchfrtrace``, then its matching on torch's JSON dumps) and returns a
:class:`TorchVerdict`: the ranks it names (those missing from a collective, or whose collective
does not match), the collective and its sequence number, or why it named none.
:func:`measure_gaps` says, from torch's JSON dumps and labkit's, what torch's recorder did not
record (on gloo: no start or end times, every entry left ``scheduled``, no group name).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from labkit.hangs.torch_fr import read_who

CHILD = "labkit.hangs.fr_analyze_child"
FIRST_FINDING = re.compile(r"^(Not all ranks joining collective|Collective sequence number|"
                           r"We cannot decide|No errors found)")
FINDING_DETAIL = ("collective:", "missing ranks:", "expected ranks:", "error msg:")


@dataclass
class TorchVerdict:
    """What torch's analyzer named. ``ranks``: the ranks it blames (``missing``: did not join
    the collective; a mismatch type: their call differs); ``cli_error``: what ``torchfrtrace``
    itself stopped with; ``repaired``: the JSON run had to fill in the group."""

    ran: bool
    ranks: list[int] = field(default_factory=list)
    kind: str = ""
    collective: str = ""
    seq: int | None = None
    cli_ok: bool = False
    cli_error: str = ""
    cli_command: str = ""
    cli_report: str = ""
    cli_says: str = ""
    repaired: bool = False
    error: str = ""
    dumps: int = 0

    @property
    def summary(self) -> str:
        if not self.ran:
            return f"not run: {self.error}"
        if self.ranks:
            return f"ranks {self.ranks} {self.kind} in {self.collective} seq {self.seq}"
        return self.error or "no collective flagged"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "summary": self.summary}


def analyze(folder: str | Path, world_size: int, limit_s: float) -> TorchVerdict:
    """Run torch's analyzer on ``folder`` (a hang's dump folder) within ``limit_s`` seconds."""
    try:
        done = subprocess.run([sys.executable, "-m", CHILD, str(folder), str(world_size)],
                              capture_output=True, text=True, timeout=limit_s, check=False)
    except subprocess.TimeoutExpired:
        return TorchVerdict(False, error=f"the analyzer ran past its {limit_s:.0f} s limit")
    try:
        found = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = (done.stderr or "").strip().splitlines()[-1:] or ["no output"]
        return TorchVerdict(False, error=f"the analyzer failed: {tail[0][:300]}")
    return verdict_from(found)


def verdict_from(found: dict[str, Any]) -> TorchVerdict:
    """The verdict from the child's JSON: the first collective that is not matched on every
    rank, preferring the JSON run (the pickle run stops early on gloo)."""
    cli, db = found["cli"], found["db"]
    verdict = TorchVerdict(True, cli_ok=cli["ok"], cli_error=cli["error"],
                           cli_command=" ".join(cli["argv"]), cli_report=cli["text"],
                           cli_says=cli["error"] or first_finding(cli["text"]),
                           repaired=db.get("repaired", False), dumps=found.get("dumps", 0))
    for row in db.get("collectives", []):
        if row["missing_ranks"]:
            ranks, kind = row["missing_ranks"], "missing"
        elif not row["pass_check"] and row["mismatches"]:
            ranks = sorted(int(r) for r in row["mismatches"])
            kind = "; ".join(sorted(set(row["mismatches"].values())))
        else:
            continue
        verdict.ranks, verdict.kind = ranks, kind
        verdict.collective, verdict.seq = row["name"], row["seq"]
        return verdict
    verdict.error = db.get("error") or "every collective in the dumps matched on every rank"
    return verdict


def first_finding(report: str) -> str:
    """The first thing torchfrtrace's report flags, in one line."""
    lines = report.splitlines()
    for index, line in enumerate(lines):
        if FIRST_FINDING.match(line):
            detail = [d.strip() for d in lines[index + 1:index + 12]
                      if d.strip().startswith(FINDING_DETAIL)]
            return "; ".join([line.strip(), *detail])
    return "nothing flagged" if report.strip() else "no report"


def measure_gaps(folder: str | Path, labkit_dumps: dict[int, dict]) -> dict[str, Any]:
    """From the dumps, what torch's recorder kept and what it did not, next to labkit's."""
    who = read_who(folder)
    entries = {rank: w["trace"].get("entries", []) for rank, w in who.items()}
    all_entries = [e for es in entries.values() for e in es]
    states: dict[str, int] = {}
    for e in all_entries:
        states[e.get("state", "?")] = states.get(e.get("state", "?"), 0) + 1
    named = sorted({tuple(e["process_group"]) for e in all_entries})
    configured = sorted({name for w in who.values()
                         for name, pg in w["trace"].get("pg_config", {}).items()
                         if pg.get("ranks") not in ("", "[]")})
    completed_by_labkit = sum(1 for d in labkit_dumps.values() for e in d["events"]
                              if e["kind"] == "collective" and e["state"] == "completed")
    return {
        "ranks_with_dumps": sorted(who),
        "entries": len(all_entries),
        "states": states,
        "with_start_time": sum(1 for e in all_entries if e.get("time_discovered_started_ns")),
        "with_end_time": sum(1 for e in all_entries if e.get("time_discovered_completed_ns")),
        "with_duration": sum(1 for e in all_entries if e.get("duration_ms") is not None),
        "retired": sum(1 for e in all_entries if e.get("retired")),
        "completed_by_labkit": completed_by_labkit,
        "groups_in_entries": [list(n) for n in named],
        "groups_in_pg_config": configured,
        "writers": {rank: w["writer"] for rank, w in who.items()},
    }


def describe_gaps(gaps: dict[str, Any]) -> list[str]:
    """The measured gaps in a few sentences."""
    n = gaps["entries"]
    if not n:
        return ["torch's recorder left no entries"]
    lines = [f"{n} entries from ranks {gaps['ranks_with_dumps']}: states "
             + ", ".join(f"{k} {v}" for k, v in sorted(gaps["states"].items()))
             + f"; labkit's recorder saw {gaps['completed_by_labkit']} collectives complete"]
    if gaps["with_start_time"] < n or gaps["with_end_time"] < n:
        lines.append(f"start time in {gaps['with_start_time']} of {n}, end time in "
                     f"{gaps['with_end_time']}, duration in {gaps['with_duration']}: no way to "
                     "tell from torch's dump how long a collective has been waiting")
    named = {g[0] for g in gaps["groups_in_entries"]}
    if named - set(gaps["groups_in_pg_config"]):
        lines.append(f"the entries name group(s) {sorted(named)}, pg_config lists ranks only "
                     f"for {gaps['groups_in_pg_config']}: torch's analyzer cannot place them")
    return lines
