"""What a check knows besides the variables: the host (if any), the NCCL release, the plugins.

``Host`` is the machine the config runs on when the checker can see it: this machine
(``Host.local()``, for the live environment or ``--this-host``) or one the caller describes (the
lesson's simulated nodes). Without a host, interface / HCA / file checks become infos saying how
to check them on the node. ``detect_plugins`` finds the network plugins a config uses, from
``NCCL_NET_PLUGIN`` / ``NCCL_NET`` and variables only a plugin reads.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from labkit.nccl.findings import Finding
from labkit.nccl.registry_plugins import PLUGINS, Plugin
from labkit.nccl.variable import NCCL_DOC
from labkit.nccl.versions import NcclTarget


@dataclass(frozen=True)
class Host:
    """The node a config is for, as far as the checker can see it (None: not known)."""

    interfaces: frozenset[str] | None = None
    hcas: frozenset[str] | None = None
    files: bool = False  # whether paths in the config name files on this machine
    label: str = "the node"  # how messages name it

    @classmethod
    def local(cls) -> Host:
        """This machine: its interfaces, its RDMA devices, its files."""
        return cls(frozenset(local_interfaces()), frozenset(local_hcas()), True, "this host")

    @classmethod
    def described(cls, interfaces: Iterable[str] | None = None,
                  hcas: Iterable[str] | None = None, files: bool = False) -> Host:
        return cls(None if interfaces is None else frozenset(interfaces),
                   None if hcas is None else frozenset(hcas), files)


def local_interfaces() -> set[str]:
    """Network interface names of this host."""
    return {name for _, name in socket.if_nameindex()}


def local_hcas(root: str = "/sys/class/infiniband") -> set[str]:
    """RDMA devices of this host (empty when there is no InfiniBand/RoCE or no sysfs)."""
    try:
        return {entry.name for entry in Path(root).iterdir()}
    except OSError:
        return set()


@dataclass(frozen=True)
class UsedPlugin:
    """A plugin a config uses, and what showed it."""

    plugin: Plugin
    evidence: str


GENERIC = Plugin("external", "an external net plugin", (), (), f"{NCCL_DOC}#nccl-net-plugin",
                 False)


def detect_plugins(env: Mapping[str, str],
                   nets: tuple[tuple[str, str], ...] = ()) -> tuple[UsedPlugin, ...]:
    """The network plugins ``env`` points at: by plugin name, by a variable only it reads, by
    its library on ``LD_LIBRARY_PATH`` (where NCCL, with NCCL_NET_PLUGIN unset, finds
    libnccl-net.so); and the ones NCCL's log shows (``nets``: name, what shows it)."""
    found: dict[str, UsedPlugin] = {}
    named = " ".join(env.get(name, "") for name in ("NCCL_NET_PLUGIN", "NCCL_NET")).lower()
    libraries = env.get("LD_LIBRARY_PATH", "").lower() if "NCCL_NET_PLUGIN" not in env else ""
    for plugin in PLUGINS:
        hint = next((v for v in plugin.plugin_values if v in named), None)
        names = sorted(n for n in env if n.startswith(plugin.prefixes))
        shown = next((why for net, why in nets
                      if any(v in net.lower() for v in plugin.plugin_values)), None)
        library = next((d for d in plugin.library_dirs if d in libraries), None)
        if hint:
            found[plugin.name] = UsedPlugin(plugin, f"NCCL_NET_PLUGIN/NCCL_NET names {hint}")
        elif shown:
            found[plugin.name] = UsedPlugin(plugin, shown)
        elif library:
            found[plugin.name] = UsedPlugin(plugin, f"LD_LIBRARY_PATH holds its {library} "
                                            "directory, where NCCL finds libnccl-net.so")
        elif names:
            found[plugin.name] = UsedPlugin(plugin, f"{names[0]} is set")
    if env.get("FI_PROVIDER", "").lower() == "efa" and "aws-ofi-nccl" not in found:
        found["aws-ofi-nccl"] = UsedPlugin(PLUGINS[0], "FI_PROVIDER=efa is set")
    plugin_name = env.get("NCCL_NET_PLUGIN", "").strip()
    if not found and plugin_name and plugin_name.lower() != "none":
        found["external"] = UsedPlugin(GENERIC, f"NCCL_NET_PLUGIN={plugin_name}")
    return tuple(found.values())


@dataclass(frozen=True)
class Context:
    """Everything a value check or rule may look at besides the value itself."""

    env: Mapping[str, str]
    target: NcclTarget
    host: Host | None = None
    plugins: tuple[UsedPlugin, ...] = ()
    runs: frozenset[str] | None = None  # the collectives a pasted benchmark runs (ParsedEnv.runs)
    nodes: int | None = None  # how many nodes the job spans, when the paste says (ParsedEnv.nodes)
    tilde: frozenset[str] = frozenset()  # values whose opening "~" the shell expands

    @property
    def rccl(self) -> bool:
        """Whether the config is for RCCL (AMD): it sets RCCL_* or HSA_* variables."""
        return any(name.startswith(("RCCL_", "HSA_")) for name in self.env)

    def plugin_setting(self, name: str) -> UsedPlugin | None:
        """The plugin in use whose documented configuration sets ``name``, if any."""
        return next((p for p in self.plugins if name in p.plugin.sets), None)

    @property
    def ib_replaced(self) -> UsedPlugin | None:
        """A plugin in use that carries the traffic without NCCL's IB verbs transport."""
        return next((p for p in self.plugins if not p.plugin.reads_ib
                     and p.plugin.name != "external"), None)


@dataclass(frozen=True)
class Rule:
    """A combination of settings known to break or contradict, with the source that says so."""

    name: str
    source: str
    check: Callable[[Context], list[Finding]]

    def apply(self, ctx: Context) -> list[Finding]:
        """The rule's findings, each linked to the rule's source unless it names its own."""
        found = self.check(ctx)
        for finding in found:
            finding.source = finding.source or self.source
        return found
