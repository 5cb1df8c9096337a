"""NCCL_DEBUG_FILE's name as NCCL builds it: only ``%h``, ``%p`` and ``%%`` are conversions.

``ncclDebugInit`` (``src/debug.cc``) copies the value character by character: ``%h`` becomes
the host name, ``%p`` the process id, ``%%`` one ``%``; any other ``%x`` is copied as it is
("Echo everything we don't understand"), so ``%r`` (there is no rank conversion), ``%d`` or
strftime's ``%Y`` stay in the name. It then opens the name with ``fopen(name, "w")``, which
truncates the file: processes whose names come out the same write into one file and truncate
each other's log. NCCL's docs describe ``%h`` and ``%p`` only, and warn that a name not unique
across the job's processes may lose output.

Only NCCL_DEBUG_FILE is expanded this way: NCCL_TOPO_DUMP_FILE and NCCL_GRAPH_DUMP_FILE reach
``fopen`` as they are and are written by one rank, NCCL_TOPO_DUMP_FILE_RANK /
NCCL_GRAPH_DUMP_FILE_RANK (``src/graph/topo.cc``, ``src/graph/search.cc``, ``src/init.cc``).
"""

from __future__ import annotations

from labkit.nccl.findings import Edit, Finding, warning
from labkit.nccl.variable import NCCL_GITHUB, Variable

DEBUG_CC = NCCL_GITHUB + "src/debug.cc#L201-L246"  # the expansion loop and its fopen(..., "w")
EXPANDED = {"h": "the host name", "p": "the process id", "%": "one '%'"}


def conversions(value: str) -> list[tuple[int, str]]:
    """Where each ``%`` conversion of ``value`` starts and its letter, read as NCCL reads them
    (``%%`` is one conversion; a ``%`` that ends the value is none)."""
    found: list[tuple[int, str]] = []
    i = value.find("%")
    while 0 <= i < len(value) - 1:
        found.append((i, value[i + 1]))
        i = value.find("%", i + 2)
    return found


def debug_file_name(var: Variable, value: str) -> list[Finding]:
    """A ``%`` conversion NCCL does not expand, or a name without ``%p``, the same for every
    process of a node: a warning each (NCCL's docs warn that such output may be lost)."""
    found = conversions(value)
    codes = {c for _, c in found}
    where = "of a node" if "h" in codes else \
        "of a node (of the whole job, on a shared file system)"
    shared = (f"every process {where} opens the same file '{_opened(value)}' with "
              "fopen(..., \"w\"), which truncates it")
    literal = list(dict.fromkeys(f"%{c}" for _, c in found if c not in EXPANDED))
    if not literal:
        per_process = value + (".%p" if "h" in codes else ".%h.%p")
        return [] if "p" in codes else [warning(
            var.name, f"no %p in the name: {shared}, and NCCL's docs warn that output may be "
            "lost or corrupted when the name is not unique across the job's processes (fine "
            "only with one process per node)",
            per_process, Edit("set", per_process, "one file per process"), source=var.doc)]
    words = ", ".join(f"'{c}'" for c in literal)
    message = (f"{words} {'is not a conversion' if len(literal) == 1 else 'are not conversions'}"
               " NCCL expands: in NCCL_DEBUG_FILE it replaces only %h (the host name), %p (the "
               "process id) and %% (one '%'), and copies any other '%x' into the name as it is")
    if "p" in codes:
        return [warning(var.name, message, f"drop {words}, or write %% for a literal '%'",
                        source=DEBUG_CC)]
    fixed = _per_process(value, found, "h" in codes)
    return [warning(var.name, f"{message}, so without %p {shared}, and they overwrite one "
                    "another's log",
                    f"{var.name}={fixed} (one file per process; NCCL has no rank conversion)",
                    Edit("set", fixed, "NCCL expands only %h, %p and %%"), source=DEBUG_CC)]


def _per_process(value: str, found: list[tuple[int, str]], has_host: bool) -> str:
    """``value`` with its first unexpanded conversion replaced by %p (and %h, when it has none)
    and the other unexpanded ones dropped."""
    out, last, first = [], 0, True
    for i, code in found:
        if code in EXPANDED:
            continue
        out.append(value[last:i] + (("%p" if has_host else "%h.%p") if first else ""))
        last, first = i + 2, False
    return "".join(out) + value[last:]


def _opened(value: str) -> str:
    """The name NCCL opens (without %p), its host name shown as <host>."""
    out, last = [], 0
    for i, code in conversions(value):
        out.append(value[last:i] + {"h": "<host>", "%": "%"}.get(code, "%" + code))
        last = i + 2
    return "".join(out) + value[last:]
