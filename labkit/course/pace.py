"""The course at another pace: the same work, its wall-clock parameters scaled.

Every parameter of a notebook that is a wall-clock quantity is declared in
``notebooks/pace.yml`` as one of two kinds:

- ``pace``: set against an amount of work (a measurement window, a delay, a heartbeat, a TTL,
  an alert's ``for:``, simulated work per step). ``labkit course run --pace F`` multiplies these
  by F: at 0.1 the work meets a tenth of the time, as it would on a machine ten times slower; at
  10, ten times the time, as on a machine ten times faster. A lesson must run to the end at
  either, explaining what did not happen, because learners' machines differ that much.
- ``fixed``: never scaled: a limit that only bounds a hang or a launch (far above the work it
  bounds, or sized from pace measured in the same run: a limit scaled down only tests the
  limit), or a threshold that is itself the lesson's subject.

``tests/test_course_pace.py`` checks that every parameter whose name says it is in seconds is
declared, so a new one gets a decision.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

import yaml

from labkit.errors import ParameterError

PACE_FILE = "pace.yml"
KINDS = ("pace", "fixed")


def load_pace_file(path: str | Path) -> dict[str, dict[str, list[str]]]:
    """``pace.yml``: notebook stem -> {"pace": [names], "fixed": [names]}."""
    path = Path(path)
    if not path.is_file():
        raise ParameterError(f"no pace declarations at {path}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ParameterError(f"{path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ParameterError(f"{path} must map notebook names to pace and fixed lists")
    kinds: dict[str, dict[str, list[str]]] = {}
    for stem, entry in data.items():
        entry = entry or {}
        if not isinstance(entry, dict) or set(entry) - set(KINDS):
            raise ParameterError(f"{path}: {stem} takes only the lists {' and '.join(KINDS)}")
        kinds[str(stem)] = {kind: [str(name) for name in entry.get(kind) or []]
                            for kind in KINDS}
    return kinds


def notebook_defaults(notebook: Path) -> dict[str, object]:
    """The literal values of a notebook's ``parameters`` cell (name -> value)."""
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    cells = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    values: dict[str, object] = {}
    for node in ast.parse(cells[0].source if cells else "").body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name):
            try:
                values[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue  # not a literal: nothing to scale
    return values


def scaled(notebook: Path, planned: Mapping[str, object], names: list[str],
           factor: float) -> dict[str, object]:
    """The pace parameters ``names`` at ``factor`` times their planned value (a smoke or given
    value, else the notebook's default)."""
    if not factor > 0:
        raise ParameterError(f"--pace must be a positive factor, got {factor}")
    defaults = notebook_defaults(notebook)
    out: dict[str, object] = {}
    for name in names:
        value = planned.get(name, defaults.get(name))
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ParameterError(f"{notebook.stem}: pace parameter {name} is {value!r}, "
                                 "not a number of seconds")
        out[name] = value * factor
    return out


__all__ = ["KINDS", "PACE_FILE", "load_pace_file", "notebook_defaults", "scaled"]
