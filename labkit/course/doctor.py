"""What this machine has for the lab: Python, torch, GPUs, distributed backends, Redis, NATS, and
whether simulated nodes can have their own network.

``run_doctor()`` never raises: each problem is a failed ``Check`` whose ``detail`` says the fix.
``format_table(run_doctor())`` prints it (``labkit doctor``, the first notebook); the optional
system programs are in ``programs``.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass

from labkit import services
from labkit.errors import LabkitError

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
