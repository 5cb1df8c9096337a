"""Checks of PyTorch, gloo and torchrun values (process-group env vars, rendezvous options).

Sources: ``ProcessGroupNCCL.hpp`` (error-handling modes), ``c10d/debug.cpp``
(TORCH_DISTRIBUTED_DEBUG raises on other values), ``torch/distributed/run.py`` (backends, what
torchrun sets per worker). Gloo's interface check is a host fact (``hostfacts.gloo_ifname``).
"""

from __future__ import annotations

import ipaddress
import re

from labkit.nccl.context import Context
from labkit.nccl.findings import Edit, Finding, error, info, warning
from labkit.nccl.registry import Variable, in_torchrun_worker
from labkit.nccl.syntax import parse_int
from labkit.nccl.values import Check, check_enum


def _master_addr(var: Variable, value: str, ctx: Context) -> list[Finding]:
    try:
        ipaddress.ip_address(value.strip("[]"))
        return []
    except ValueError:
        pass
    if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?", value):
        return [error(var.name, f"'{value}' is neither an IP address nor a host name",
                      "MASTER_ADDR=<IP of rank 0's node>", source=var.doc)]
    return [info(var.name, f"host name '{value}': every node resolves it at startup; fine if DNS "
                 "or /etc/hosts resolve it everywhere", source=var.doc)]


def _master_port(var: Variable, value: str, ctx: Context) -> list[Finding]:
    port = parse_int(value)
    if port is None or not 1 <= port <= 65535:
        return [error(var.name, f"'{value}' is not a TCP port (1-65535)", "e.g. MASTER_PORT=29500",
                      source=var.doc)]
    if port < 1024:
        return [info(var.name, f"port {port} is privileged: binding it needs root",
                     source=var.doc)]
    return []


def _async_error_handling(var: Variable, value: str, ctx: Context) -> list[Finding]:
    found = check_enum(var, value, ctx)
    if not found and value == "0":
        found.append(warning(var.name, "0: no handling; a failed or timed-out collective is "
                             "never torn down and the job can hang until killed",
                             "leave it unset (3) or 1", source=var.link))
    elif not found and value == "2":
        found.append(info(var.name, "2: aborts the communicator but keeps the process; your "
                          "code must catch the error and exit", source=var.link))
    return found


def _dist_debug(var: Variable, value: str, ctx: Context) -> list[Finding]:
    found = check_enum(var, value, ctx)
    if not found and value.upper() == "DETAIL":
        found.append(warning(var.name, "DETAIL checks every collective's consistency and logs "
                             "more: PyTorch says it may hurt performance, for debugging runs",
                             "INFO or OFF outside debugging", source=var.doc, advice=True))
    return found


def _rdzv_backend(var: Variable, value: str, ctx: Context) -> list[Finding]:
    if value == "etcd":
        return [warning(var.name, "etcd is the legacy backend (maintenance mode, to be removed); "
                        "it needs an etcd server with the v2 API enabled",
                        "--rdzv-backend=c10d (needs no extra server), or etcd-v2",
                        source=var.doc)]
    if value == "etcd-v2":
        return [info(var.name, "etcd-v2 needs an etcd server with the v2 API enabled "
                     "(--enable-v2); c10d needs no extra server", source=var.doc)]
    if value not in var.choices:
        return [warning(var.name, f"'{value}' is not a built-in backend ({', '.join(var.choices)})"
                        ": works only if registered as a plugin", "--rdzv-backend=c10d",
                        source=var.doc)]
    return []


def _endpoint(var: Variable, value: str, ctx: Context) -> list[Finding]:
    _, sep, port = value.rpartition(":")
    if sep and parse_int(port) is None:
        return [error(var.name, f"port '{port}' is not a number", "<host>:<port>, e.g. "
                      "10.0.0.1:29400", source=var.doc)]
    return []


def _nnodes(var: Variable, value: str, ctx: Context) -> list[Finding]:
    parts = [parse_int(p) for p in value.split(":")]
    if len(parts) > 2 or None in parts or parts[0] < 1 or parts[0] > parts[-1]:
        return [error(var.name, f"'{value}' is not N or MIN:MAX", "e.g. 2 or 1:4",
                      source=var.doc)]
    return []


def _nproc(var: Variable, value: str, ctx: Context) -> list[Finding]:
    if value in ("auto", "cpu", "gpu", "xpu") or (parse_int(value) or 0) >= 1:
        return []
    return [error(var.name, f"'{value}' is not a count or auto/cpu/gpu/xpu", "e.g. 8 or gpu",
                  source=var.doc)]


def _set_by_launcher(var: Variable, value: str, ctx: Context) -> list[Finding]:
    if in_torchrun_worker(ctx.env):
        return []
    return [warning(var.name, "torchrun sets it for each worker; setting it yourself changes "
                    "nothing or misleads", "remove it", Edit("comment", reason="set by torchrun"),
                    source=var.doc, advice=True)]


def _plugin_removed(var: Variable, value: str, ctx: Context) -> list[Finding]:
    return [warning(var.name, f"{var.plugin}: {var.values}", "remove it",
                    Edit("comment", reason=f"{var.plugin} ignores it"), source=var.link)]


KIND_CHECKS: dict[str, Check] = {
    "host": _master_addr, "port": _master_port, "rdzv-backend": _rdzv_backend,
    "endpoint": _endpoint, "nnodes": _nnodes, "nproc": _nproc, "set-by-launcher": _set_by_launcher,
    "plugin-removed": _plugin_removed,
}
NAME_CHECKS: dict[str, Check] = {
    "TORCH_DISTRIBUTED_DEBUG": _dist_debug,
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": _async_error_handling,
    "NCCL_ASYNC_ERROR_HANDLING": _async_error_handling,
}
