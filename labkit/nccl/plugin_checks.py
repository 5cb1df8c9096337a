"""Checks that depend on the network plugin a config uses (``Context.plugins``), and what an
empty plugin variable does (``empty``).

With aws-ofi-nccl or GCP's TCPX/TCPXO the traffic does not go through NCCL's IB verbs transport,
so ``NCCL_IB_*`` settings have no effect (aws-ofi-nccl reads no ``NCCL_IB_*``; its own
variables and libfabric's choose the NICs). What aws-ofi-nccl's doc/efa-env-var.md says of
libfabric and rdma-core variables is reported as it says it (``registry_plugins.EFA_ADVICE``).

An empty plugin variable is not "none" (NCCL 2.30.7, ``src/plugin/``): tuner.cc, profiler.cc
and env.cc skip only ``none`` (strcasecmp, since 2.28.3; env.cc from its first release,
2.28.7), then ``openPluginLib`` (plugin_open.cc) opens ``<prefix>.so`` for an empty name, the
default, and tuner/profiler fall back to the net plugin's library. Releases 2.21.5 to 2.25 skip
empty names with ``strlen`` (src/misc/tuner.cc, profiler.cc), with the same result. net.cc,
gin.cc and rma.cc split a set value as a comma list (net.cc since 2.27.3): an empty one names
no library, which is what ``none`` does; before 2.27.3 net.cc treated an empty name as unset.
"""

from __future__ import annotations

from labkit.nccl.context import Context
from labkit.nccl.findings import Edit, Finding, info, warning
from labkit.nccl.registry_plugins import EFA_ADVICE, EFA_DOC
from labkit.nccl.variable import NCCL_GITHUB, Variable

HANDLED_ELSEWHERE = {"NCCL_IB_HCA", "NCCL_IB_DISABLE"}  # hostfacts.ib_hca, rules
# NCCL's socket transport settings, which aws-ofi-nccl's EFA notes list as "Not applicable for
# EFA": the plugin, not NCCL's socket transport, carries the traffic.
NOT_FOR_EFA = {"NCCL_SOCKET_NTHREADS", "NCCL_NSOCKS_PERTHREAD"}


def check(var: Variable, value: str, ctx: Context) -> list[Finding] | None:
    """Findings that replace the usual value check, or None to run it."""
    advice = EFA_ADVICE.get(var.name)
    if advice is not None:
        severity, text = advice
        make = warning if severity == "warning" else info
        return [make(var.name, f"aws-ofi-nccl's EFA notes (doc/efa-env-var.md): {text}", "",
                     source=EFA_DOC)]
    efa = next((p for p in ctx.plugins if p.plugin.name == "aws-ofi-nccl"), None)
    if efa is not None and var.name in NOT_FOR_EFA:
        return [warning(var.name, f"not applicable with aws-ofi-nccl ({efa.evidence}): its EFA "
                        "notes (doc/efa-env-var.md) say 'Not applicable for EFA'; it tunes "
                        "NCCL's own socket transport, which the plugin replaces",
                        "leave it out on EFA nodes", source=EFA_DOC)]
    replaced = ctx.ib_replaced
    if replaced and var.owner == "nccl" and var.name.startswith("NCCL_IB_") \
            and var.name not in HANDLED_ELSEWHERE:
        return [info(var.name, f"no effect here: {replaced.plugin.title} carries the traffic "
                     f"({replaced.evidence}), not NCCL's IB verbs transport that reads "
                     f"{var.name}", source=replaced.plugin.source)]
    return None


PLUGIN = NCCL_GITHUB + "src/plugin/"
OLD_NET = "https://github.com/NVIDIA/nccl/blob/v2.25.1-1/src/net.cc#L670-L678"
# Plugins whose empty name still loads the default: (what loads, first release with a default,
# first release where "none" disables it, what "none" does before that, source). Before 2.28.3
# "none" is a library name: the profiler lookup then fails (no profiler), while the tuner lookup
# goes on to the net plugin's library.
LOADS_DEFAULT = {
    "NCCL_TUNER_PLUGIN": ("libnccl-tuner.so, else a tuner in the net plugin's library",
                          "2.21.5", "2.28.3",
                          "'none' is not special there: NCCL looks for a library of that name, "
                          "then still takes the net plugin's tuner",
                          PLUGIN + "tuner.cc#L58-L69"),
    "NCCL_PROFILER_PLUGIN": ("libnccl-profiler.so (from 2.28.3 also the profiler in the net "
                             "plugin's library)", "2.23.4", "2.23.4", "",
                             PLUGIN + "profiler.cc#L58-L70"),
    "NCCL_ENV_PLUGIN": ("libnccl-env.so", "2.28.7", "2.28.7", "", PLUGIN + "env.cc#L42-L48"),
}
# Plugins whose set value is a list: (first release reading it as one, source).
LISTS = {"NCCL_NET_PLUGIN": ("2.27.3", PLUGIN + "net.cc#L263-L269"),
         "NCCL_GIN_PLUGIN": ("2.29.7", PLUGIN + "gin.cc#L203-L209"),
         "NCCL_RMA_PLUGIN": ("2.30.7", PLUGIN + "rma.cc#L166-L172")}


def empty(var: Variable, ctx: Context) -> list[Finding] | None:
    """What an empty plugin variable does on the target release; None: not a plugin variable
    (the caller reports "treated as unset")."""
    on = f"NCCL {ctx.target.text}"
    if var.name in LOADS_DEFAULT:
        loads, since, none_since, old_none, source = LOADS_DEFAULT[var.name]
        if not ctx.target.at_least(since):
            return None
        none = (f"{var.name}=none disables it" if ctx.target.at_least(none_since) else
                f"{old_none}; {var.name}=none disables it from NCCL {none_since} on")
        return [warning(var.name, f"empty: {on} treats an empty name as unset, so it still "
                        f"loads the default plugin where one is installed: {loads}; {none}",
                        f"{var.name}=none to disable the plugin, or remove the line",
                        Edit("drop", reason="empty, treated as unset"),
                        source=source)]
    if var.name in LISTS:
        since, source = LISTS[var.name]
        if ctx.target.at_least(since):
            only = " (NCCL's internal IB and socket transports remain)" \
                if var.name == "NCCL_NET_PLUGIN" else ""
            return [info(var.name, f"empty: {on} reads it as an empty list of plugins, so it "
                         f"loads no library for it{only}, the same as 'none'"
                         + (" (before 2.27.3 an empty name was treated as unset and "
                            "libnccl-net.so loaded)" if var.name == "NCCL_NET_PLUGIN" else ""),
                         f"{var.name}=none says so in every release that reads it",
                         source=source)]
        if var.name == "NCCL_NET_PLUGIN":
            return [warning(var.name, f"empty: {on} treats an empty name as unset, so it still "
                            "loads libnccl-net.so where one is installed; NCCL_NET_PLUGIN=none "
                            "loads no external net plugin", "NCCL_NET_PLUGIN=none to disable "
                            "external net plugins, or remove the line",
                            Edit("drop", reason="empty, treated as unset"),
                            source=OLD_NET)]
    return None
