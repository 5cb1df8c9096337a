"""``check_env``: what each NCCL / torch.distributed variable in an environment really does.

    findings = check_env({"NCCL_P2P_LEVEL": "5"}, interfaces={"lo", "eth0"}, hcas=set())

Per variable: empty values, deprecated names, no-op values, debug-only variables, then the value
itself (``values``, ``torch_values``); then rules across variables (``rules``). Host facts
(interfaces, InfiniBand devices) default to this machine's.
"""

from __future__ import annotations

import difflib
import re
import socket
from collections.abc import Mapping
from pathlib import Path

from labkit.nccl import torch_values, values
from labkit.nccl.findings import Edit, Finding, info, warning
from labkit.nccl.registry import (
    DIST_DOC,
    KNOWN_PREFIXES,
    NCCL_DOC,
    REGISTRY,
    TORCH_NCCL_DOC,
    Variable,
)
from labkit.nccl.rules import RULES
from labkit.nccl.syntax import nccl_int, parse_int
from labkit.nccl.values import Host

KIND_CHECKS = {**values.KIND_CHECKS, **torch_values.KIND_CHECKS}
NAME_CHECKS = {**values.NAME_CHECKS, **torch_values.NAME_CHECKS}

# Why a debug-only variable matters, where there is more to say than NCCL's general warning.
DEBUG_NOTES = {
    "NCCL_ALGO": "forcing Ring is for measuring raw bandwidth; there is no evidence trees "
                 "deadlock more; NCCL picks Tree across nodes where its model predicts lower "
                 "latency",
    "NCCL_PROTO": "NCCL discourages it except to disable one protocol while a bug is suspected; "
                  "enabling LL128 where unsupported can corrupt data",
    "NCCL_IB_DISABLE": "without IB hardware NCCL already uses sockets; keep =1 only as a "
                       "workaround for broken IB",
}
PYTORCH_RENAME = ("renamed to {new}; PyTorch still reads the old name as a legacy alias and warns "
                  "that it is deprecated")
NCCL_RENAME = "deprecated in favor of {new} (still read; if both are set the stricter wins)"


def local_interfaces() -> set[str]:
    """Network interface names of this host."""
    return {name for _, name in socket.if_nameindex()}


def local_hcas(root: str = "/sys/class/infiniband") -> set[str]:
    """RDMA devices of this host (empty when there is no InfiniBand/RoCE or no sysfs)."""
    try:
        return {entry.name for entry in Path(root).iterdir()}
    except OSError:
        return set()


def check_env(env: Mapping[str, str], *, interfaces: set[str] | None = None,
              hcas: set[str] | None = None) -> list[Finding]:
    """Findings for every relevant variable of ``env``, then for combinations of them."""
    host = Host(local_interfaces() if interfaces is None else set(interfaces),
                local_hcas() if hcas is None else set(hcas))
    findings: list[Finding] = []
    for name, value in env.items():
        var = REGISTRY.get(name)
        if var is None:
            findings += _unknown(name)
        else:
            findings += _check_variable(var, value, env, host)
    for rule in RULES:
        findings += rule(env)
    return findings


def _check_variable(var: Variable, value: str, env: Mapping[str, str], host: Host) -> list[Finding]:
    if value == "":
        return [info(var.name, "empty: treated as unset", "remove the line",
                     Edit("drop", reason="empty, treated as unset"))]
    found = []
    if var.deprecated_by:
        found.append(_deprecated(var, env))
    if _is_default(var, value):
        only = "; only =1 acts" if var.kind == "bool" and var.owner == "nccl" else ""
        return found + [info(var.name, f"no-op: the default{only}", "remove the line",
                             Edit("drop", reason=f"no-op, the default{only}"))]
    if "$" in value:
        return found + [info(var.name, f"'{value}' is a shell expansion: its value is not "
                             "checked here")]
    if var.debug_only:
        note = DEBUG_NOTES.get(var.name, "")
        found.append(warning(var.name, "debug-only: NCCL lists it under Debugging; keeping it set "
                             "can cause slowdowns, crashes or hangs as NCCL changes"
                             + (f"; {note}" if note else ""),
                             "use it for an experiment, then remove it",
                             Edit("comment", reason="debug-only")))
    check = NAME_CHECKS.get(var.name) or KIND_CHECKS.get(var.kind)
    return found + (check(var, value, env, host) if check else [])


def _deprecated(var: Variable, env: Mapping[str, str]) -> Finding:
    new = var.deprecated_by
    text = (PYTORCH_RENAME if var.owner == "pytorch" else NCCL_RENAME).format(new=new)
    edit = Edit("drop", reason=f"{new} is set") if new in env else \
        Edit("rename", new, f"renamed from {var.name}")
    return warning(var.name, text, f"use {new}", edit)


def _is_default(var: Variable, value: str) -> bool:
    if not re.fullmatch(r"-?\d+|[A-Z][A-Z0-9_,]*", var.default):
        return False  # a description ("auto", "platform dependent"), not a literal value
    if var.default.lstrip("-").isdigit():
        number = nccl_int(value) if var.owner == "nccl" else parse_int(value)
        return number is not None and str(number) == var.default
    return value.upper() == var.default


def _unknown(name: str) -> list[Finding]:
    if not name.startswith(KNOWN_PREFIXES):
        return []
    doc = NCCL_DOC if name.startswith("NCCL_") else \
        TORCH_NCCL_DOC if name.startswith("TORCH_NCCL_") else DIST_DOC
    close = difflib.get_close_matches(name, REGISTRY, n=1, cutoff=0.85)
    hint = f"did you mean {close[0]}? " if close else ""
    return [info(name, "not a variable this checker knows", f"{hint}check the name at {doc}")]
