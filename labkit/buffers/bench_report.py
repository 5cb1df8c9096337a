"""The buffer benchmark's results as tables, and the notes that explain a run where agents started
late or a window saw nothing.
"""

from __future__ import annotations

from typing import Any

from labkit.buffers.bench_tracking import DRAIN_QUIET_S, LEAD_ROUND_TRIPS

TOGETHER = 0.9  # a phase with every agent pushing less of the time than this gets a note

COLUMNS = ("agents", "impl", "push_per_s", "pull_per_s", "e2e_per_s", "server_cpu_push",
           "server_cpu_e2e", "lost", "duplicates", "malformed")


def _cell(column: str, value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.2f}" if column.startswith("server_cpu") else f"{value:.0f}"
    return str(value)


def table(rows: list[dict[str, Any]], columns: tuple[str, ...] = COLUMNS) -> str:
    """Result rows as an aligned text table; a rate that could not be measured shows "n/a"
    (:func:`notes` says why), a skipped implementation shows its reason."""
    def line(cells: list[str]) -> str:
        return "  ".join(f"{cell:>15}" for cell in cells)

    lines = [line(list(columns))]
    for row in rows:
        cells = [_cell(c, row.get(c)) for c in columns]
        if row.get("skipped"):
            lines.append(f"{line(cells[:2])}  skipped: {row['skipped']}")
        else:
            lines.append(line(cells))
    return "\n".join(lines)


def notes(row: dict[str, Any], seconds: float) -> list[str]:
    """Sentences for a row whose numbers need context: agents that started late or pushed
    apart, a window in which a rate could not be measured, experiences that never came back."""
    if row.get("skipped"):
        return []
    who = f"{row['impl']} ({row['agents']} agents)" if "agents" in row else row["impl"]
    late = (f"the last agent started {row.get('late_start_s') or 0:g} s after its window "
            f"opened (the command went out {row.get('lead_s') or 0:g} s early, "
            f"{LEAD_ROUND_TRIPS:g} measured round trips)")
    apart = (f"{late}, and the agents' final batches, finished rather than cut, ended "
             f"{row.get('end_spread_s') or 0:g} s apart")
    out = []
    together = row.get("push_overlap") or 0.0
    if row["push_per_s"] is None:
        out.append(f"{who}: no agent pushed in the {seconds:g} s push window: {late}. A busy "
                   "machine wakes its processes late; raise the window.")
    elif together < TOGETHER:
        out.append(f"{who}: the agents pushed together for {100 * together:.0f}% of the push "
                   f"phase: {apart}. push/s adds up each agent's own rate; while fewer agents "
                   "pushed, each had more of the machine, so the sum over-states what they "
                   "sustain together. A longer window makes these edges a smaller share.")
    e2e_share = row.get("e2e_overlap") or 0.0
    if row["e2e_per_s"] is None:
        out.append(f"{who}: at no moment of the {seconds:g} s end-to-end window was every "
                   f"agent pushing, so there is no end-to-end rate: {late}.")
    elif e2e_share < TOGETHER:
        out.append(f"{who}: end to end is counted over the {e2e_share * seconds:.2f} s "
                   f"({100 * e2e_share:.0f}% of the window) in which every agent pushed.")
    if row["pull_per_s"] is None:
        out.append(f"{who}: nothing came back to the learner, so there is no pull rate.")
    if row.get("lost"):
        out.append(f"{who}: {row['lost']} pushed experience(s) never came back, though the "
                   f"learner pulled until its pulls had been empty for {DRAIN_QUIET_S:g} s.")
    return out


def explained_table(rows: list[dict[str, Any]], seconds: float) -> str:
    """:func:`table`, then the :func:`notes` of every row that needs one."""
    return "\n".join([table(rows), *(note for row in rows for note in notes(row, seconds))])


def sweep_summary(points: list[dict[str, Any]], impl: str) -> str:
    """Where ``impl``'s push rate peaked in a sweep, and the most of a core Redis used."""
    rows = [p for p in points if p["impl"] == impl and p.get("push_per_s") is not None]
    if not rows:
        return f"{impl}: no agent count gave a push rate (see the notes above)"
    best = max(rows, key=lambda p: p["push_per_s"])
    cpu = [p for p in rows if p.get("server_cpu_push") is not None]
    busiest = max(cpu, key=lambda p: p["server_cpu_push"]) if cpu else None
    server = ("the server's CPU was not available" if busiest is None else
              f"Redis used at most {busiest['server_cpu_push']:.2f} of a core "
              f"(at {busiest['agents']} agents)")
    return (f"{impl}: push rate peaked at {best['push_per_s']:.0f}/s with {best['agents']} "
            f"agent(s); {server}")
