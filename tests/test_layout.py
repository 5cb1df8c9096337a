"""The layout the code promises: layers at the bottom, one folder per topic above them, imports
only downwards, no cycles, small files, and folder surfaces that do not shadow their modules.

Read from the source with ``ast`` (no module is imported for the graph), so a lazy import inside a
function counts as much as one at the top of a file.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import labkit

ROOT = Path(labkit.__file__).parent

# Each folder's level: a folder may import from folders of a lower level only (and itself).
LEVELS = {
    "errors": 0,
    "runtime": 1,
    "services": 2,
    "course": 3,
    # topics that stand on the layers alone
    "nccl": 4, "cluster": 4, "collectives": 4, "buffers": 4, "locks": 4, "reliability": 4,
    "observability": 4,
    # topics that build on one of those
    "rl": 5, "scaling": 5, "cost": 5, "orchestration": 5,
    "training": 6,
    "hangs": 6,  # its live watch reads what observability and orchestration publish
    "capstone": 7,
    "gpu": 8,
    "cli": 9, "__main__": 10,
}
TOP_LEVEL_MODULES = {"__init__", "__main__", "cli", "errors"}
MAX_LINES = 400
# The modules that run as ``python -m``: their package must not import them first (runpy warns,
# and the module would run twice over).
RUN_AS_MAIN = ("labkit.orchestration.control_agent", "labkit.orchestration.election_member",
               "labkit.training.fixed_lag", "labkit.buffers.bench_agent", "labkit.locks.agent",
               "labkit.hangs.fr_analyze_child",
               "labkit.runtime.worker")


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = _modules()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(name: str) -> set[str]:
    tree = ast.parse(MODULES[name].read_text())
    targets = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("labkit"):
            for alias in node.names:  # `from labkit.topic import module` names a module
                full = f"{node.module}.{alias.name}"
                targets.add(_resolve(full) if full in MODULES else _resolve(node.module))
        elif isinstance(node, ast.Import):
            targets |= {_resolve(a.name) for a in node.names if a.name.startswith("labkit")}
    return {t for t in targets if t and t != name}


GRAPH = {name: _imports(name) for name in MODULES}


def _folder(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "labkit"


def test_the_top_level_is_the_table_of_contents() -> None:
    files = {p.stem for p in ROOT.glob("*.py")}
    assert files == TOP_LEVEL_MODULES
    folders = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(LEVELS) - TOP_LEVEL_MODULES, "a folder without a level, or the reverse"


def test_imports_only_go_down() -> None:
    upward = []
    for name, targets in GRAPH.items():
        here = _folder(name)
        for target in targets:
            there = _folder(target)
            if here == "labkit" or there == here:
                continue  # the package root imports errors and the rank API only
            if there == "labkit" or LEVELS[there] >= LEVELS[here]:
                upward.append(f"{name} -> {target}")
    assert not upward, "imports that go up or sideways:\n" + "\n".join(sorted(upward))


def test_no_import_cycles() -> None:
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in GRAPH[node]:
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(path[path.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for name in GRAPH:
        if name not in state:
            visit(name, [name])
    assert not cycles, "\n".join(cycles)


def test_modules_stay_small() -> None:
    big = {name: n for name, path in MODULES.items()
           if (n := len(path.read_text().splitlines())) > MAX_LINES}
    unexplained = [name for name in big  # the docstring says "... N lines long because ..."
                   if " lines long" not in (ast.get_docstring(ast.parse(MODULES[name].read_text()))
                                            or "")]
    assert not unexplained, (f"over {MAX_LINES} lines without a docstring that says why: "
                             f"{ {n: big[n] for n in unexplained} }")


def test_every_experiment_is_a_driver_beside_its_rank_script() -> None:
    for name in MODULES:
        if name.endswith("_rank"):
            driver = name.removesuffix("_rank")
            assert driver in MODULES, f"{name} has no driver {driver}"
            assert "rank_script(__name__)" in MODULES[driver].read_text(), driver
            source = MODULES[name].read_text()  # its one argument: a JSON config
            assert "json.loads(" in source or "from_json(" in source, name
    for name, path in MODULES.items():
        for line in path.read_text().splitlines():
            if line.startswith("RANK_SCRIPT ="):
                assert line == "RANK_SCRIPT = rank_script(__name__)", f"{name}: {line}"


def test_folder_surfaces_resolve_and_do_not_shadow_their_modules() -> None:
    eager = {"runtime", "hangs"}  # their __init__ imports the module first: the function wins
    for info in pkgutil.iter_modules(labkit.__path__):
        if not info.ispkg:
            continue
        package = importlib.import_module(f"labkit.{info.name}")
        exported = set(getattr(package, "__all__", ()))
        assert exported, f"labkit.{info.name} declares no __all__"
        for name in exported:
            getattr(package, name)  # every exported name resolves
        if info.name not in eager:
            submodules = {m.name for m in pkgutil.iter_modules(package.__path__)}
            assert not exported & submodules, (info.name, exported & submodules)


@pytest.mark.parametrize("module", RUN_AS_MAIN)
def test_a_module_run_as_main_is_not_imported_by_its_package(module: str) -> None:
    package = module.rpartition(".")[0]
    code = f"import sys, {package}; print({module!r} in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr


def test_drivers_import_no_torch() -> None:
    drivers = sorted(n for n in MODULES if f"{n}_rank" in MODULES)
    code = ("import sys, importlib\n"
            f"for name in {drivers!r}:\n"
            "    importlib.import_module(name)\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == "False", out.stderr or "a driver imports torch at import time"
