"""``labkit gpu-check``: run every CUDA/NCCL path of the course on this host's GPUs, small, and
report each as passed, failed or skipped, with a reason and what it measured.

Made for a GPU host that brings its own CUDA build of torch (>= 2.4): nothing here pins torch.
Without a usable GPU every check is skipped with the reason, and no job is started.

Limits: the whole run has a budget (``--budget``, 270 s by default, so it ends within 5 minutes
with the clean-up). Each check's limit is sized from this machine: the start-up allowance of
its torchrun jobs (``labkit.runtime.pace``: a multiple of the measured ``import torch``) plus
a generous allowance for its work, and never past what is left of the budget; a check that
finds too little of the budget left is skipped with that reason. This process only asks torch
about the devices; every CUDA job runs in child processes that end with their check.
"""

from __future__ import annotations

import platform
import re
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from labkit.errors import ParameterError
from labkit.gpu.checks import CHECK_NAMES, CHECKS, Check, CheckFailed, CheckSkipped, Context

DEFAULT_BUDGET_S = 270.0
MIN_LEFT_S = 20.0  # a check that would get less than this is skipped: too little to start one
MIN_TORCH = (2, 4)
STATUSES = ("passed", "failed", "skipped")
ERROR_LINES = 30  # of a failure's full message, kept in its details

Echo = Callable[[str], None]


@dataclass
class CheckResult:
    """One check's outcome: ``status`` is passed, failed or skipped, ``reason`` one line."""

    name: str
    title: str
    status: str
    reason: str
    seconds: float = 0.0
    limit_s: float | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class GpuReport:
    """The host as torch sees it, and every check's result."""

    python_version: str
    platform: str
    hostname: str
    torch_version: str | None
    cuda_version: str | None  # torch.version.cuda: the CUDA torch was built with
    nccl_version: str | None  # torch.cuda.nccl.version(), when this torch has NCCL
    cuda_available: bool
    devices: list[str]
    budget_s: float
    seconds: float = 0.0
    checks: list[CheckResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no check failed (skipped ones do not count against it)."""
        return not any(c.status == "failed" for c in self.checks)

    def counts(self) -> dict[str, int]:
        return {s: sum(c.status == s for c in self.checks) for s in STATUSES}

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok, "counts": self.counts()}


def _version_tuple(text: str) -> tuple[int, int]:
    match = re.match(r"(\d+)\.(\d+)", text)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def host_facts() -> dict[str, Any]:
    """Python, torch, CUDA and NCCL versions and the GPUs' names; ``torch_error`` when torch
    does not import. Asks torch about the devices only: no tensor is made here."""
    facts: dict[str, Any] = {"python_version": platform.python_version(),
                             "platform": platform.platform(), "hostname": socket.gethostname(),
                             "torch_version": None, "cuda_version": None, "nccl_version": None,
                             "cuda_available": False, "devices": [], "torch_error": None}
    try:
        import torch
    except Exception as exc:  # a broken install raises more than ImportError
        facts["torch_error"] = f"{type(exc).__name__}: {_first_line(exc)}"
        return facts
    from labkit.gpu.jobs_rank import nccl_version_text

    facts.update(torch_version=torch.__version__, cuda_version=torch.version.cuda,
                 cuda_available=torch.cuda.is_available())
    if facts["cuda_available"]:
        facts["devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        facts["nccl_version"] = nccl_version_text()
    return facts


def skip_reason(facts: dict[str, Any]) -> str | None:
    """Why no check can run on this host, or None when they can."""
    if facts.get("torch_error"):
        return f"torch does not import: {facts['torch_error']}"
    version = facts["torch_version"]
    if _version_tuple(version) < MIN_TORCH:
        return f"torch {version} is older than {'.'.join(map(str, MIN_TORCH))}, which these need"
    if not facts["cuda_available"]:
        build = (f" (torch {version} is a CPU build: torch.version.cuda is None)"
                 if facts["cuda_version"] is None else "")
        return f"no CUDA device: torch.cuda.is_available() is False{build}"
    if not facts["devices"]:
        return "no CUDA device: torch.cuda.device_count() is 0"
    return None


def _first_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return lines[0].strip() if lines else repr(exc)


def _startup_s(processes: int) -> float:
    from labkit.runtime.pace import startup_allowance_s

    return startup_allowance_s(processes)


def run_one(check: Check, gpus: int, limit_s: float, startup_s: float) -> CheckResult:
    """Run one check within ``limit_s``; its exception becomes a failure in one line."""
    result = CheckResult(check.name, check.title, "failed", "", limit_s=round(limit_s, 1))
    began = time.monotonic()
    try:
        result.reason, result.details = check.run(Context(gpus, began + limit_s, startup_s))
        result.status = "passed"
    except CheckFailed as exc:
        result.reason, result.details = exc.reason, exc.details
    except CheckSkipped as exc:
        result.status, result.reason = "skipped", str(exc)
    except Exception as exc:  # whatever the path raised is what this check found
        result.reason = f"{type(exc).__name__}: {_first_line(exc)}"
        result.details = {"error": str(exc).splitlines()[-ERROR_LINES:]}
    result.seconds = round(time.monotonic() - began, 2)
    return result


def select_checks(only: Sequence[str] | None, checks: Sequence[Check] = CHECKS) -> list[Check]:
    """The checks named in ``only`` (all when None or empty), in their usual order."""
    names = [n.strip() for n in only or () if n.strip()]
    unknown = sorted(set(names) - {c.name for c in checks})
    if unknown:
        raise ParameterError(f"unknown check(s) {unknown}: choose from {', '.join(CHECK_NAMES)}")
    return [c for c in checks if not names or c.name in names]


def run_checks(only: Sequence[str] | None = None, budget_s: float = DEFAULT_BUDGET_S,
               facts: dict[str, Any] | None = None, checks: Sequence[Check] = CHECKS,
               echo: Echo | None = None,
               startup_s: Callable[[int], float] | None = None) -> GpuReport:
    """Every check (or those in ``only``) within ``budget_s`` seconds, one after the other;
    ``echo`` hears a line as each starts and ends (nothing when none can run). ``facts`` and
    ``startup_s`` (processes -> seconds to start them) are this host's unless given."""
    if budget_s <= 0:
        raise ParameterError(f"the budget must be positive, got {budget_s}")
    chosen = select_checks(only, checks)
    startup_s = startup_s or _startup_s
    began = time.monotonic()
    facts = host_facts() if facts is None else facts
    report = GpuReport(**{k: v for k, v in facts.items() if k != "torch_error"},
                       budget_s=budget_s)
    cannot = skip_reason(facts)
    gpus = len(facts["devices"])
    for check in chosen:
        if cannot:
            result = CheckResult(check.name, check.title, "skipped", cannot)
        else:
            allowance = startup_s(check.ranks or max(1, gpus))
            left = budget_s - (time.monotonic() - began)
            limit = min(check.launches * allowance + check.work_s, left)
            if limit < MIN_LEFT_S:
                result = CheckResult(check.name, check.title, "skipped",
                                     f"{left:.0f} s of the {budget_s:g} s budget left: rerun "
                                     f"with --only {check.name}")
            else:
                if echo is not None:
                    echo(f"gpu-check: {check.name}: running (limit {limit:.0f} s)")
                result = run_one(check, gpus, limit, allowance)
            if echo is not None:
                echo(f"gpu-check: {result.name}: {result.status} in {result.seconds:.1f} s: "
                     f"{result.reason}")
        report.checks.append(result)
    report.seconds = round(time.monotonic() - began, 2)
    return report


def format_report(report: GpuReport) -> str:
    """A readable table: the host, then one row per check; a failure's error lines below it."""
    counts = report.counts()
    devices = ", ".join(f"{i}: {name}" for i, name in enumerate(report.devices)) or "none"
    lines = [
        f"labkit gpu-check: {counts['passed']} passed, {counts['failed']} failed, "
        f"{counts['skipped']} skipped in {report.seconds:.1f} s (budget {report.budget_s:g} s)",
        f"python {report.python_version}, torch {report.torch_version or '-'}, "
        f"CUDA {report.cuda_version or '-'}, NCCL {report.nccl_version or '-'}",
        f"GPUs: {devices}",
        "",
    ]
    width = max([len("check"), *(len(c.name) for c in report.checks)])
    lines.append(f"{'check':<{width}}  {'status':<7}  {'seconds':>7}  reason")
    for c in report.checks:
        lines.append(f"{c.name:<{width}}  {c.status:<7}  {c.seconds:>7.1f}  {c.reason}")
        if c.status == "failed":
            lines += [f"{'':<{width}}    {line}" for line in c.details.get("error", [])[-8:]]
    return "\n".join(lines)
