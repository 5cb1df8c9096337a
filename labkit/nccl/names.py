"""Names the registry does not know: what to say about them, and typo hints only for likely
typos of a known name of the same software (then a warning: the intended setting is not applied).

A hint is offered only within two edits (one for short names) and never for a name that merely
adds or drops a whole ``_WORD_`` (``NCCL_TIMEOUT`` is not ``NCCL_IB_TIMEOUT``); a name with a
plugin's or library's prefix (``FI_``, ``OFI_NCCL_``, ``NCCL_FASTRAK_`` ...) gets no NCCL hint.
An ``NCCL_X`` that NCCL does not read while PyTorch reads ``TORCH_NCCL_X`` is a warning: it does
nothing. The legacy ``NCCL_`` names PyTorch does accept are registry entries, so they never get
here: torch 2.13's c10d headers list five (NCCL_BLOCKING_WAIT, NCCL_ASYNC_ERROR_HANDLING,
NCCL_DESYNC_DEBUG, NCCL_ENABLE_TIMING, NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK in
ProcessGroupNCCL.hpp's getCvar* name lists). A name whose ``NCCL_`` prefix is mangled
(``CCL_NET_GDR_LEVEL``, ``NCL_DEBUG``, ``nccl_debug``: ``labkit.nccl.mangled``) is a warning
naming the variable meant, at any length and even where that variable is set too (then the line
is only dead); other vendors' ``xCCL_`` names (``HCCL_BUFFSIZE``) and oneCCL's ``CCL_`` names get
no NCCL hint.
"""

from __future__ import annotations

from labkit.nccl import mangled
from labkit.nccl.context import Context
from labkit.nccl.findings import Edit, Finding, info, warning
from labkit.nccl.registry import (
    DIST_DOC,
    NCCL_DOC,
    REGISTRY,
    TORCH_NCCL_DOC,
    Variable,
    plugin_prefix,
)
from labkit.nccl.registry_nccl_source import RELEASES
from labkit.nccl.registry_oneccl import is_oneccl

MIN_PREFIX_TYPO = 10  # shorter names outside NCCL_/TORCH_ are too often some other tool's own
SOURCE_SPAN = f"{RELEASES[0]} to {RELEASES[-1]}"
NCCL_TREE = f"https://github.com/NVIDIA/nccl/tree/v{RELEASES[-1]}-1/src"


def unknown_variable(name: str, ctx: Context) -> list[Finding]:
    """A name the registry does not know, under a prefix the checker watches: a warning for an
    NCCL_ or TORCH_ name no release reads (the line does nothing), an info for plugin and gloo
    names and where RCCL may read it."""
    owner = plugin_prefix(name)
    if owner is not None:
        software, source = owner
        return [info(name, f"read by {software}, but not one of the {software} variables this "
                     "checker lists: its value is not checked", f"check the name at {source}",
                     source=source)]
    torch = REGISTRY.get("TORCH_" + name)
    if name.startswith("NCCL_") and torch is not None and torch.owner == "pytorch":
        return [_torch_name(name, torch, ctx)]
    if name.startswith("NCCL_"):
        rccl = any(n.startswith(("RCCL_", "HSA_")) for n in ctx.env)
        also = "; RCCL may read it (this config sets RCCL/HSA variables)" if rccl else \
            "; a framework may read it itself, which this checker cannot see"
        meant = mangled.intended(name)  # NCCL_debug: the right prefix, the rest in lower case
        hint = f"did you mean {meant}? " if meant else _hint(name, "nccl", ctx)
        make = info if rccl else warning  # a line that does nothing for NCCL (a typo, if hinted)
        return [make(name, f"not a variable NCCL reads: none of NCCL {SOURCE_SPAN}'s sources "
                     f"names it, so NCCL ignores it{also}", hint + f"check the name at {NCCL_DOC}",
                     source=NCCL_TREE)]
    if name.startswith(("TORCH_NCCL_", "TORCH_FR_", "TORCH_DIST")):
        hint = _hint(name, "pytorch", ctx)
        return [warning(name, "not a variable this checker knows torch 2.13 to read (its c10d "
                     "headers, libtorch and torch.distributed)", hint +
                     f"check the name at {TORCH_NCCL_DOC}", source=TORCH_NCCL_DOC)]
    if name.startswith("GLOO_"):
        return [info(name, "not a variable this checker knows", _hint(name, "gloo", ctx) +
                     f"check the name at {DIST_DOC}", source=DIST_DOC)]
    return _prefix_typo(name, ctx)


def _prefix_typo(name: str, ctx: Context) -> list[Finding]:
    """A name outside the watched prefixes that misspells an NCCL or torch variable's first word:
    an ``NCCL_`` prefix mangled (``labkit.nccl.mangled``: ``CCL_NET_GDR_LEVEL``, ``NCL_DEBUG``,
    ``nccl_debug``), else one edit from such a variable with a different first word; never
    another vendor's ``xCCL_`` name or oneCCL's own. The intended setting is lost."""
    meant = mangled.intended(name)
    if meant is not None:
        return [_misspelt(name, meant, ctx)]
    if len(name) < MIN_PREFIX_TYPO or "_" not in name or _other_library(name):
        return []
    for candidate, var in REGISTRY.items():
        if var.owner in ("nccl", "pytorch") and candidate not in ctx.env and \
                candidate.split("_")[0] != name.split("_")[0] and \
                abs(len(candidate) - len(name)) <= 1 and edit_distance(name, candidate) == 1:
            return [_misspelt(name, candidate, ctx)]
    return []


def _other_library(name: str) -> bool:
    """Whether ``name``'s first word is another vendor's collective library (NCCL with its first
    letter changed: ``HCCL_BUFFSIZE``, ``mangled.HCCL_DOC``) or ``name`` is oneCCL's own."""
    first = name.split("_")[0].upper()
    return len(first) == 4 and first[0] != "N" and first[1:] == "CCL" or is_oneccl(name)


def _misspelt(name: str, candidate: str, ctx: Context) -> Finding:
    """The warning for ``name``, a misspelling of ``candidate``, with its source."""
    var = REGISTRY[candidate]
    reader = {"nccl": "NCCL", "pytorch": "PyTorch"}.get(var.owner, var.plugin or "its plugin")
    near = f"one letter from {candidate}" if edit_distance(name, candidate) == 1 else \
        f"{candidate} in other letter case" if name.upper() == candidate else \
        f"{candidate} with its prefix misspelt"
    also = f"; {candidate} is set as well, and only that one is applied" \
        if candidate in ctx.env else ""
    edit = Edit("drop", reason=f"{candidate} is set") if also else \
        Edit("rename", candidate, f"{candidate} is the variable read")
    return warning(name, f"{near}, which {reader} reads; {name} itself is not a name "
                   f"it reads, so the setting is not applied{also}",
                   f"did you mean {candidate}? check the name at {var.link or NCCL_DOC}", edit,
                   source=var.link or NCCL_DOC)


def _torch_name(name: str, torch: Variable, ctx: Context) -> Finding:
    """``NCCL_X`` where only ``TORCH_NCCL_X`` is read (torch 2.13's ProcessGroupNCCL.hpp lists
    no ``NCCL_X`` alias for it)."""
    new = torch.deprecated_by or torch.name  # TORCH_NCCL_TRACE_BUFFER_SIZE: now TORCH_FR_...
    now = f" (now {new}, which PyTorch prefers)" if new != torch.name else ""
    present = next((n for n in (torch.name, new) if n in ctx.env), None)
    edit = Edit("drop", reason=f"{present} is set") if present else \
        Edit("rename", new, f"PyTorch reads {new}, not {name}")
    return warning(name, f"PyTorch reads {torch.name}{now}; {name} does nothing: NCCL does not "
                   f"read it (none of NCCL {SOURCE_SPAN}'s sources names it) and PyTorch accepts "
                   f"no legacy NCCL_ name for {torch.name}", f"use {new}", edit,
                   source=torch.link)


def _hint(name: str, owner: str, ctx: Context) -> str:
    limit = 1 if len(name) < 12 else 2
    best = None
    for candidate, var in REGISTRY.items():
        if var.owner != owner or candidate in ctx.env or abs(len(candidate) - len(name)) > limit:
            continue
        distance = edit_distance(name, candidate)
        if distance <= limit and not _whole_word_apart(name, candidate) and \
                (best is None or distance < best[0]):
            best = (distance, candidate)
    return f"did you mean {best[1]}? " if best else ""


def _whole_word_apart(a: str, b: str) -> bool:
    """Whether one name is the other with whole ``_`` words added or removed."""
    short, long = sorted((a.split("_"), b.split("_")), key=len)
    if len(short) == len(long):
        return False
    rest = iter(long)
    return all(word in rest for word in short)


def edit_distance(a: str, b: str) -> int:
    """Optimal-string-alignment distance: insertions, deletions, substitutions, swaps."""
    rows = [list(range(len(b) + 1))]
    for i, char in enumerate(a, 1):
        row = [i]
        for j, other in enumerate(b, 1):
            cost = 0 if char == other else 1
            row.append(min(rows[-1][j] + 1, row[j - 1] + 1, rows[-1][j - 1] + cost))
            if i > 1 and j > 1 and char == b[j - 2] and a[i - 2] == other:
                row[j] = min(row[j], rows[-2][j - 2] + 1)
        rows.append(row)
    return rows[-1][-1]


def is_relevant(name: str) -> bool:
    """Whether the checker should look at this variable of a live environment: a known or
    watched name, or a known NCCL name whose prefix is mangled (``CCL_NET_GDR_LEVEL``)."""
    return name in REGISTRY or name.startswith(("NCCL_", "TORCH_", "GLOO_")) \
        or plugin_prefix(name) is not None or mangled.intended(name) is not None
