"""The speed tier (``make test-speed``): the course as a much slower and a much faster machine
would run it.

1. The time-sensitive notebooks at smoke size with their pace parameters (``pace.yml``) at 0.1x
   and at 10x: the same work with a tenth and with ten times the time.
2. The whole course at smoke size on one core that a busy loop also wants: a slow machine for
   real, limits and all.

Each run is a ``labkit course run`` of its own (its summary in ``<out>/<condition>/``); the
tier passes when every notebook of every run ran to the end. ``speed.json`` holds the table.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from labkit.course.pace import PACE_FILE, load_pace_file
from labkit.errors import ParameterError

TIME_SENSITIVE = ("04", "05", "10", "12", "13", "15")
"""Run at every pace even without pace parameters: their outcomes hang on timing."""
PACES = (0.1, 10.0)


@dataclass
class Condition:
    """One run of the tier: its name, the ``labkit course run`` options, and how it went."""

    name: str
    options: list[str]
    one_core: bool = False
    seconds: float = 0.0
    exit_code: int | None = None
    notebooks: dict[str, str] = field(default_factory=dict)  # stem -> status


def pace_notebooks(notebooks_dir: Path) -> list[str]:
    """The ids run at each pace: the time-sensitive ones and every one with pace parameters."""
    from labkit.course.runner import find_notebooks

    kinds = load_pace_file(notebooks_dir / PACE_FILE)
    wanted = {stem[:2] for stem, kind in kinds.items() if kind["pace"]} | set(TIME_SENSITIVE)
    return [p.stem[:2] for p in find_notebooks(notebooks_dir) if p.stem[:2] in wanted]


def plan_conditions(notebooks_dir: Path, paces: tuple[float, ...] = PACES,
                    one_core: bool = True) -> list[Condition]:
    ids = pace_notebooks(notebooks_dir)
    conditions = [Condition(f"pace-{p:g}", ["--pace", f"{p:g}", "--only", *ids]) for p in paces]
    if one_core:
        conditions.append(Condition("one-busy-core", [], one_core=True))
    return conditions


def _busy_core() -> int:
    return min(os.sched_getaffinity(0))


def _pin(core: int) -> None:
    os.sched_setaffinity(0, {core})


def run_condition(condition: Condition, out: Path, notebooks_dir: Path) -> Condition:
    """One ``labkit course run --smoke`` (pinned to one core beside a busy loop if asked)."""
    run_dir = out / condition.name
    command = [sys.executable, "-m", "labkit", "course", "run", "--smoke", "--no-progress",
               "--notebooks", str(notebooks_dir), "--out", str(run_dir), *condition.options]
    pin = None
    hog = None
    if condition.one_core:
        core = _busy_core()
        pin = lambda: _pin(core)  # noqa: E731 (a preexec function)
        hog = subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=pin)
    print(f"== {condition.name}: {' '.join(command[1:])}", flush=True)
    began = time.monotonic()
    runner = subprocess.Popen(command, preexec_fn=pin)
    try:
        condition.exit_code = runner.wait()
    except KeyboardInterrupt:  # the runner got the Ctrl-C too: let it clean up
        condition.exit_code = runner.wait()
        raise
    finally:
        if runner.poll() is None:
            runner.send_signal(signal.SIGTERM)
            runner.wait()
        if hog is not None:
            hog.kill()
            hog.wait()
        condition.seconds = round(time.monotonic() - began, 1)
        summary = run_dir / "summary.json"
        if summary.is_file():
            data = json.loads(summary.read_text())
            condition.notebooks = {nb["notebook"]: nb["status"] for nb in data["notebooks"]}
    return condition


def run_speed_tier(out: str | Path, notebooks_dir: str | Path = "notebooks",
                   paces: tuple[float, ...] = PACES, one_core: bool = True) -> list[Condition]:
    """Every condition in turn; writes ``<out>/speed.json`` and prints the table."""
    if one_core and not hasattr(os, "sched_setaffinity"):
        raise ParameterError("the one-core run needs Linux (sched_setaffinity); "
                             "pass --no-one-core elsewhere")
    out, notebooks_dir = Path(out).resolve(), Path(notebooks_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    done = []
    for condition in plan_conditions(notebooks_dir, paces, one_core):
        done.append(run_condition(condition, out, notebooks_dir))
        (out / "speed.json").write_text(json.dumps([asdict(c) for c in done], indent=2) + "\n")
    print(format_table(done), flush=True)
    return done


def passed(conditions: list[Condition]) -> bool:
    return all(c.exit_code == 0 and c.notebooks and all(s == "ok" for s in c.notebooks.values())
               for c in conditions)


def format_table(conditions: list[Condition]) -> str:
    stems = sorted({s for c in conditions for s in c.notebooks})
    width = max([len(s) for s in stems] + [8])
    head = f"{'notebook':<{width}}  " + "  ".join(f"{c.name:>14}" for c in conditions)
    rows = [head]
    for stem in stems:
        rows.append(f"{stem:<{width}}  " + "  ".join(
            f"{c.notebooks.get(stem, '-'):>14}" for c in conditions))
    rows.append(f"{'seconds':<{width}}  " + "  ".join(f"{c.seconds:>14.0f}" for c in conditions))
    rows.append("speed tier: " + ("passed" if passed(conditions) else "FAILED"))
    return "\n".join(rows)


__all__ = ["PACES", "TIME_SENSITIVE", "Condition", "pace_notebooks", "passed", "plan_conditions",
           "run_speed_tier"]
