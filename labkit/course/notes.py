"""What a lesson loses on this machine, in words: ``lesson_note("13")`` at the top of a notebook
says which optional programs are missing, what the lesson skips or does instead, and the command
that installs them; ``format_programs`` is the same for the whole course (``labkit doctor``).
"""

from __future__ import annotations

from collections.abc import Sequence

from labkit.course.programs import (
    ProgramStatus,
    System,
    check_programs,
    install_command,
    lesson_id,
    this_system,
    unique_in_order,
)


def lesson_notice(lesson: str | int, statuses: Sequence[ProgramStatus] | None = None,
                  system: System | None = None) -> str | None:
    """One line: what ``lesson`` skips or does instead on this machine, why, and the fix;
    "all programs found" when it uses some and has them all; None when it uses none.
    ``statuses`` and ``system`` default to this machine's."""
    lesson = lesson_id(lesson)
    statuses = check_programs(versions=False) if statuses is None else statuses
    used = [s for s in statuses if lesson in s.program.lesson_ids]
    if not used:
        return None
    missing = [s for s in used if not s.usable]
    if not missing:
        names = ", ".join(s.program.name for s in used)
        return f"lesson {lesson}: all programs found ({names})"
    system = this_system() if system is None else system
    parts = []
    for state in ("not found", "needs root"):
        group = [s for s in missing if s.state == state]
        if group:
            names = ", ".join(s.program.name for s in group)
            lost = "; ".join(unique_in_order(s.program.lost_in(lesson) for s in group))
            parts.append(f"{names} {state}: {lost}")
    fixes = []
    not_found = [s.program.packages for s in missing if not s.found]
    if not_found:
        fixes.append(f"install: {install_command(not_found, system)}")
    if any(s.blocked for s in missing):
        fixes.append("run JupyterLab (or make run) as root for the rest")
    return f"lesson {lesson} on this machine: {'; '.join(parts)} ({'; '.join(fixes)})"


def lesson_note(lesson: str | int) -> None:
    """Print what ``lesson`` skips on this machine and why, with the install command (one line;
    nothing when the lesson uses none of the optional programs). For a notebook's first cell."""
    notice = lesson_notice(lesson)
    if notice:
        print(notice)


def format_programs(statuses: Sequence[ProgramStatus], short: bool = False,
                    system: System | None = None) -> str:
    """The optional programs as a table: found or not, which lessons use them, and, for the
    missing ones, what is lost and the install command. ``short``: found / missing / install."""
    system = this_system() if system is None else system
    missing = [s for s in statuses if not s.found]
    lines = ["optional system programs (the lessons run without them, with less):"]
    if short:
        lines += _short_lines(statuses)
    else:
        lines += _long_lines(statuses, system)
    lesson_missing = [s.program.packages for s in missing if not s.program.cluster]
    if lesson_missing:
        lines.append(f"  install them: {install_command(lesson_missing, system)}"
                     "  (or: make system-deps)")
    if any(s.program.cluster for s in missing):
        lines.append("  for real-cluster work: make system-deps ARGS=--cluster")
    return "\n".join(lines)


def _short_lines(statuses: Sequence[ProgramStatus]) -> list[str]:
    def used_by(s: ProgramStatus) -> str:
        p = s.program
        return ", ".join(p.lesson_ids) or ("cluster" if p.cluster else "tests")

    groups = {"found": [], "needs root": [], "not found": []}
    for s in statuses:
        label = s.program.name + (f" {s.here}" if s.found and s.here != "found" else "")
        groups[s.state].append(label if s.state == "found" else f"{label} ({used_by(s)})")
    return [f"  {state + ':':<12}{', '.join(names)}" for state, names in groups.items() if names]


def _long_lines(statuses: Sequence[ProgramStatus], system: System) -> list[str]:
    rows = [("program", "here", "used by", "without it")]
    for s in statuses:
        p = s.program
        here = s.here if s.usable else s.state
        used_by = ", ".join(p.lesson_ids) or ("cluster" if p.cluster else "tests")
        lost = [] if s.usable else [f"{lesson}: {text}" for lesson, text in p.lessons]
        lost += [p.elsewhere] if p.elsewhere and not s.usable else []
        if not s.found:
            lost.append(f"install: {install_command([p.packages], system)}")
        elif s.blocked:
            lost.append(s.blocked)
        rows.append((p.name, here, used_by, "\n".join(lost)))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    indent = "  " + " " * (sum(widths) + 6)
    lines = []
    for row in rows:
        first, *more = row[3].splitlines() or [""]
        cells = [cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True)]
        lines.append(("  " + "  ".join([*cells, first])).rstrip())
        lines += [indent + line for line in more]
    return lines
