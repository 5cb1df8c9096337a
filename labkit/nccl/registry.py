"""The variables the checker knows, as one ``REGISTRY``: curated entries joined with NCCL's source.

``registry_nccl`` / ``registry_nccl_debug`` hold NCCL's documented variables (its env page),
``registry_torch`` PyTorch's, gloo's and torchrun's, ``registry_plugins`` the network plugins'.
``registry_nccl_source`` says which NCCL releases read which names; every NCCL name it lists is
known here (documented or not), with ``introduced`` / ``removed`` from it; ``registry_domains``
gives the undocumented ones whose values are names or a few integers their kinds and choices.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from labkit.nccl import registry_nccl_source as nccl_source
from labkit.nccl.registry_domains import SOURCE_VARIABLES
from labkit.nccl.registry_nccl import SYSTEM
from labkit.nccl.registry_nccl_debug import DEBUGGING
from labkit.nccl.registry_plugins import LIBRARY_PREFIXES, PLUGIN_VARIABLES, PLUGINS
from labkit.nccl.registry_torch import TORCH
from labkit.nccl.variable import (
    DIST_DOC,
    NCCL_DOC,
    RUN_DOC,
    TORCH_NCCL_DOC,
    Bounds,
    Owner,
    Variable,
    version_tuple,
)

__all__ = ["DIST_DOC", "NCCL_DOC", "NEWEST_NCCL", "REGISTRY", "RUN_DOC", "TORCH_NCCL_DOC",
           "Bounds", "Owner", "Variable", "in_torchrun_worker", "lookup",
           "plugin_prefix", "source_default"]

NEWEST_NCCL = nccl_source.RELEASES[-1]
OLDEST_READ = nccl_source.RELEASES[0]

# Old names NCCL still reads after the new one (docs: "still works as an alias ... ignored if
# NCCL_M*_NCHANNELS is set").
ALIASES = {"NCCL_MIN_NRINGS": "NCCL_MIN_NCHANNELS", "NCCL_MAX_NRINGS": "NCCL_MAX_NCHANNELS"}
# What replaces a variable, where it is not a plain rename: the docs' words, or two source facts
# (the old name's last release and the new one's first).
SUCCESSORS = {
    "NCCL_IB_CUDA_SUPPORT": "NCCL_NET_GDR_LEVEL (NCCL's docs: removed in 2.4.0, see "
                            "NCCL_NET_GDR_LEVEL)",
    "NCCL_CHECK_POINTERS": "NCCL_CHECK_MODE=DEBUG_LOCAL (NCCL's docs)",
    "NCCL_MNNVL": "NCCL_MNNVL_ENABLE (read from 2.21.5, the release after NCCL_MNNVL's last)",
    "NCCL_WORK_FIFO_DEPTH": "NCCL_WORK_FIFO_BYTES (read from 2.22.3, the release after "
                            "NCCL_WORK_FIFO_DEPTH's last)",
    "NCCL_THREAD_THRESHOLD": "NCCL_THREAD_THRESHOLDS (read from 2.5.6)",
}


def _with_source(var: Variable) -> Variable:
    """Add what NCCL's source says of a curated NCCL variable: since when, until when, where."""
    read = nccl_source.READS.get(var.name)
    successor = var.successor or SUCCESSORS.get(var.name, "")
    if read is None:
        return dataclasses.replace(var, successor=successor)
    first, removed, _kind, _default, where = read
    return dataclasses.replace(
        var, introduced=None if first == OLDEST_READ else first,
        removed=removed or var.removed, source=var.source or nccl_source.NCCL_BLOB + where,
        successor=successor)


def _from_source(name: str) -> Variable:
    """An NCCL variable the source reads but the env docs do not list (or no longer list)."""
    first, removed, kind, default, where = nccl_source.READS[name]
    link = nccl_source.NCCL_BLOB + where
    meaning = "read by NCCL's source, not on NCCL's env page"
    return Variable(name, "nccl", kind, "integer (strtoll)" if kind == "int" else "string",
                    default or "unset", False, ALIASES.get(name), meaning, link,
                    introduced=None if first == OLDEST_READ else first, removed=removed or None,
                    source=link, documented=False, successor=SUCCESSORS.get(name, ""))


def _build() -> dict[str, Variable]:
    found: dict[str, Variable] = {}
    for var in SYSTEM + DEBUGGING:
        found[var.name] = _with_source(var)
    for var in TORCH + PLUGIN_VARIABLES:
        found.setdefault(var.name, var)
    for name in nccl_source.READS:
        found.setdefault(name, _from_source(name))
    for name, (kind, values, choices, meaning, where) in SOURCE_VARIABLES.items():
        found[name] = dataclasses.replace(found[name], kind=kind, values=values,
                                          choices=choices, meaning=meaning, source=where)
    return found


REGISTRY: dict[str, Variable] = _build()

# Prefixes whose unknown members get an info finding ("not a variable this checker knows").
KNOWN_PREFIXES = ("NCCL_", "TORCH_NCCL_", "TORCH_FR_", "TORCH_DIST", "GLOO_")
PLUGIN_PREFIXES: dict[str, tuple[str, str]] = {
    prefix: (plugin.title, plugin.source) for plugin in PLUGINS for prefix in plugin.prefixes}
PLUGIN_PREFIXES.update(LIBRARY_PREFIXES)
PLUGIN_PREFIXES["OFI_"] = ("aws-ofi-nccl", PLUGINS[0].source)


def lookup(name: str) -> Variable | None:
    """The registry entry for ``name``, or None."""
    return REGISTRY.get(name)


def plugin_prefix(name: str) -> tuple[str, str] | None:
    """(plugin or library, source) when ``name`` has a prefix only that software reads."""
    for prefix in sorted(PLUGIN_PREFIXES, key=len, reverse=True):
        if name.startswith(prefix):
            return PLUGIN_PREFIXES[prefix]
    return None


def source_default(name: str, version: tuple[int, ...]) -> str | None:
    """NCCL's integer default for ``name`` at ``version`` (from its source), or None."""
    read = nccl_source.READS.get(name)
    if read is None or read[2] != "int":
        return None
    default = read[3]
    for since, value in nccl_source.DEFAULT_CHANGES.get(name, ()):
        if version >= version_tuple(since):
            default = value
    return default if default.lstrip("-").isdigit() else None


def in_torchrun_worker(env: Mapping[str, str]) -> bool:
    """Whether ``env`` is a torchrun worker's (torchrun set these, so they are right)."""
    return all(name in env for name in ("TORCHELASTIC_RUN_ID", "RANK", "LOCAL_RANK", "WORLD_SIZE"))
