"""What a course run leaves: a result per notebook and for the course (``summary.json``), its
folder ``runs/<timestamp>/`` (``runs/latest`` points at the newest), the HTML export of each
executed notebook, and ``index.html``.
"""

from __future__ import annotations

import html
import itertools
import os
import signal
from dataclasses import asdict, dataclass, field
from pathlib import Path

from nbconvert import HTMLExporter

OK, FAILED, INTERRUPTED, NOT_RUN = "ok", "failed", "interrupted", "not run"


@dataclass
class NotebookResult:
    """How one notebook went. ``output`` and ``html`` are relative to the run folder."""

    notebook: str
    status: str  # "ok", "failed", "interrupted" (Ctrl-C / SIGTERM during it) or "not run"
    seconds: float
    output: str | None
    html: str | None
    error: str | None = None
    missing_programs: list[str] = field(default_factory=list)
    """The optional programs it uses that this machine lacked (``labkit.course.programs.PROGRAMS``)."""

    @property
    def ok(self) -> bool:
        return self.status == OK

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class CourseResult:
    """How a whole run went; ``to_dict()`` is what ``summary.json`` holds."""

    run_dir: Path
    results: list[NotebookResult] = field(default_factory=list)
    started: str = ""
    smoke: bool = False
    total_seconds: float = 0.0
    interrupted_by: int | None = None
    """The signal (SIGINT, SIGTERM) that stopped the run, None when it ran to the end."""
    pace: float | None = None
    """The factor the pace parameters were scaled by (``--pace``), None: as planned."""

    @property
    def ok(self) -> bool:
        """True when every notebook ran to the end."""
        return self.interrupted_by is None and all(r.ok for r in self.results)

    @property
    def exit_code(self) -> int:
        """0 when ok, 1 when a notebook failed, 128 + the signal when interrupted (130, 143)."""
        if self.interrupted_by is not None:
            return 128 + self.interrupted_by
        return 0 if self.ok else 1

    @property
    def signal_name(self) -> str | None:
        return None if self.interrupted_by is None else signal.Signals(self.interrupted_by).name

    def to_dict(self) -> dict:
        return {
            "started": self.started,
            "smoke": self.smoke,
            "pace": self.pace,
            "total_seconds": round(self.total_seconds, 3),
            "ok": self.ok,
            "interrupted": self.signal_name,
            "notebooks": [r.to_dict() for r in self.results],
        }


def course_verdict(course: CourseResult) -> str:
    seconds = f"{course.total_seconds:.1f} s"
    if course.interrupted_by is not None:
        during = [r.notebook for r in course.results if r.status == INTERRUPTED]
        where = f" during {during[0]}" if during else ""
        return f"interrupted by {course.signal_name}{where} after {seconds}"
    failed = sum(not r.ok for r in course.results)
    return f"{'ok' if course.ok else f'{failed} of {len(course.results)} FAILED'} in {seconds}"


def export_html(exporter: HTMLExporter, run_dir: Path, output: str | None) -> str | None:
    """Write the HTML export of an executed notebook; None (with a note) when that fails."""
    if output is None:
        return None
    target = (run_dir / output).with_suffix(".html")
    try:
        body, _ = exporter.from_filename(str(run_dir / output))
    except Exception as exc:  # a broken export must not lose the rest of a long run
        print(f"  no HTML for {output}: {type(exc).__name__}: {exc}", flush=True)
        return None
    target.write_text(body, encoding="utf-8")
    return target.name


_STATUS_COLORS = {OK: "#1a7f37", FAILED: "#cf222e", INTERRUPTED: "#9a6700", NOT_RUN: "#6e7781"}


def index_html(course: CourseResult) -> str:
    """A one-table page linking every notebook's HTML and ipynb, with the programs it lacked."""
    esc = html.escape
    rows = []
    for r in course.results:
        links = " ".join(
            f'<a href="{esc(path)}">{label}</a>'
            for label, path in (("html", r.html), ("ipynb", r.output))
            if path
        )
        seconds = "" if r.status == NOT_RUN else f"{r.seconds:.1f}"
        rows.append(
            f"<tr><td>{esc(r.notebook)}</td>"
            f'<td style="color:{_STATUS_COLORS.get(r.status, "inherit")}">{esc(r.status)}</td>'
            f'<td style="text-align:right">{seconds}</td>'
            f"<td>{links}</td><td>{esc(', '.join(r.missing_programs))}</td>"
            f"<td>{esc(first_line(r.error or ''))}</td></tr>"
        )
    size = "smoke" if course.smoke else "workshop"
    if course.pace is not None:
        size += f", pace x{course.pace:g}"
    verdict = "all ok" if course.ok else "FAILED"
    if course.interrupted_by is not None:
        verdict = course_verdict(course)
    degraded = ""
    if any(r.missing_programs for r in course.results):
        degraded = ("<p>\"ran without\": optional programs this machine lacked, so the "
                    "notebook skipped or replaced what needs them (<code>make doctor</code> "
                    "says what each gives; <code>make system-deps</code> installs them).</p>")
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Course run {esc(course.started)}</title>
<style>body{{font-family:sans-serif}} td,th{{padding:4px 10px;border-bottom:1px solid #ddd}}
table{{border-collapse:collapse}}</style></head><body>
<h1>Course run {esc(course.started)}</h1>
<p>{size} size, {course.total_seconds:.1f} s, {esc(verdict)}</p>
{degraded}
<table><tr><th>notebook</th><th>status</th><th>seconds</th><th>output</th><th>ran without</th>
<th>error</th></tr>
{chr(10).join(rows)}
</table></body></html>
"""


def first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def shown(path: Path) -> str:
    """``path`` relative to the working directory when it is inside it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def new_run_dir(runs: Path, stamp: str) -> Path:
    """Create ``runs/<stamp>``, or ``<stamp>-2``, ``-3``... when that exists; keep earlier runs."""
    runs.mkdir(parents=True, exist_ok=True)
    for n in itertools.count(1):
        run_dir = runs / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            run_dir.mkdir()
        except FileExistsError:
            continue
        return run_dir
    raise AssertionError("unreachable")


def point_latest(runs: Path, run_dir: Path) -> None:
    """Point ``runs/latest`` at ``run_dir``, atomically (a reader never sees it missing)."""
    tmp = runs / f".latest-{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(run_dir.name)  # relative, so it survives moving the repo
    os.replace(tmp, runs / "latest")
