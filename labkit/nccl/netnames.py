"""``NCCL_NET``: the network a communicator must use, matched against the names networks register.

NCCL 2.30 copies ``NCCL_NET`` into ``comm->config.netName`` (``src/init.cc``), and ``ncclNetInit``
(``src/plugin/net.cc``) initialises only a network whose ``ncclNet_t.name`` equals it; none
equal ends in WARN "Failed to initialize any NET plugin" and ``ncclInvalidUsage``, for every
communicator. The names are compared with ``strcasecmp`` from NCCL 2.13.4, with ``strcmp`` before
(``src/net.cc`` of 2.12.12: "Error: network %s not found."). The networks there are the external
plugins NCCL loaded (``NCCL_NET_PLUGIN``, a comma list since 2.27.3, else ``libnccl-net.so``; none
with ``NCCL_NET_PLUGIN=none``, special since 2.28.3) and its two internal ones.

``REGISTERED`` lists the names each known network registers, each read in its source (or, for
closed plugins, in the vendor's own configurations). A name none of them registers is a
warning, not an error: a private plugin may register it. With ``NCCL_NET_PLUGIN=none`` no
plugin is loaded, so only the internal names can match: then another name fails on every host.
"""

from __future__ import annotations

import re

from labkit.nccl.context import Context
from labkit.nccl.findings import Edit, Finding, error, warning
from labkit.nccl.variable import NCCL_GITHUB, Variable

NET_INIT = NCCL_GITHUB + "src/plugin/net.cc#L321-L349"
NET_LIST = NCCL_GITHUB + "src/plugin/net.cc#L254-L305"
NET_READ = NCCL_GITHUB + "src/init.cc#L2117-L2125"
CASE_SINCE = "2.13.4"  # strcasecmp(netName, ...) from here on; strcmp before
OLD_MATCH = "https://github.com/NVIDIA/nccl/blob/v2.12.12-1/src/net.cc#L168-L195"
NONE_SINCE = "2.28.3"  # NCCL_NET_PLUGIN=none loads no external plugin (strcasecmp "none")
_SHARP = "https://github.com/Mellanox/nccl-rdma-sharp-plugins/blob/" \
    "2f5ac02e164336044388b7f1f6242cc0db575fec/src/"
_AWS = "https://github.com/aws/aws-ofi-nccl/blob/2daf7d303aa139a03140aa530957d10521e4478d/src/"

# name -> (who registers it, where that is seen). Versioned names (IBext_v11) are listed as their
# family: ``registered`` accepts <family>_v<N>.
REGISTERED: dict[str, tuple[str, str]] = {
    "IB": ("NCCL's internal InfiniBand/RoCE verbs transport",
           NCCL_GITHUB + "src/transport/net_ib/common.cc#L193-L194"),
    "Socket": ("NCCL's internal TCP socket transport",
               NCCL_GITHUB + "src/transport/net_socket.cc#L803-L804"),
    "Libfabric": ("aws-ofi-nccl 1.13 and later", _AWS + "nccl_ofi_interface_nvidia.cpp#L662"),
    "AWS Libfabric": ("aws-ofi-nccl up to 1.11, and later ones when NCCL_NET asks for it",
                      _AWS + "nccl_ofi_interface_nvidia.cpp#L831-L848"),
    "OFI": ("aws-ofi-nccl 1.13 and later, when NCCL_NET asks for it",
            _AWS + "nccl_ofi_interface_nvidia.cpp#L849-L857"),
    "IBext": ("NVIDIA's nccl-rdma-sharp-plugins (IBext until 2023, IBext_v<N> since)",
              _SHARP + "ib_plugin.c#L2202"),
    "UCX": ("NVIDIA's nccl-rdma-sharp-plugins (NCCL_PLUGIN_P2P=ucx)",
            _SHARP + "ucx_plugin.c#L1197"),
    "UCX-RMA": ("NVIDIA's nccl-rdma-sharp-plugins (NCCL_PLUGIN_P2P=ucx_rma)",
                _SHARP + "ucx_rma_plugin.c#L1342"),
    "UCX-UCT": ("NVIDIA's nccl-rdma-sharp-plugins (NCCL_PLUGIN_P2P=ucx_uct)",
                _SHARP + "ucx_uct_plugin.c#L514"),
    "UCX-UCT-RD": ("NVIDIA's nccl-rdma-sharp-plugins (NCCL_PLUGIN_P2P=ucx_uct_rd)",
                   _SHARP + "ucx_uct_rd_plugin.c#L473"),
    "GPUDirectTCPX": ("Google's GPUDirect-TCPX plugin (registers GPUDirectTCPX_v7)",
                      "https://github.com/google/nccl-plugin-gpudirecttcpx/blob/"
                      "4b8ea7f2716fc21b026b4d09c79578d43b23e86d/src/nccl_plugin.cc#L22-L23"),
    "FasTrak": ("Google's GPUDirect-TCPXO plugin (closed; NVIDIA's GCP recipes set it)",
                "https://github.com/NVIDIA/dgxc-benchmarking/blob/"
                "f8ee4cd6a381db771ace4e9681e62bf272c13352/README.md"),
    "gIB": ("Google's gIB plugin for A3 Ultra / A4 RoCE (closed; Google's examples set it)",
            "https://github.com/GoogleCloudPlatform/cluster-toolkit/blob/"
            "1047080375afbb44da4b596be314634e7486af4a/examples/gke-a3-ultragpu/"
            "nccl-jobset-example.yaml#L183"),
}
INTERNAL = ("IB", "Socket")
# Words people write for a network that registers under another name.
MEANT = {"tcp": "Socket", "sockets": "Socket", "socket": "Socket", "ethernet": "Socket",
         "ip": "Socket", "ib": "IB", "infiniband": "IB", "roce": "IB", "verbs": "IB",
         "rdma": "IB", "efa": "Libfabric", "aws": "Libfabric", "ofi": "OFI",
         "libfabric": "Libfabric", "sharp": "IBext", "tcpx": "GPUDirectTCPX",
         "tcpxo": "FasTrak", "gpudirecttcpxo": "FasTrak", "gib": "gIB"}
_VERSIONED = re.compile(r"(.+?)_v\d+")


def registered(value: str, case_matters: bool = False) -> str | None:
    """The known name ``value`` matches (its family for ``IBext_v11``), or None."""
    family = _VERSIONED.fullmatch(value)
    for text in (value, family.group(1) if family else None):
        if text is None:
            continue
        for name in REGISTERED:
            if (text == name) if case_matters else (text.lower() == name.lower()):
                return name
    return None


def check_net(var: Variable, value: str, ctx: Context) -> list[Finding]:
    """NCCL_NET against the names networks register, as the target release compares them."""
    case_matters = not ctx.target.at_least(CASE_SINCE)
    none = ctx.env.get("NCCL_NET_PLUGIN", "").strip().lower() == "none"
    plugins_off = none and ctx.target.at_least(NONE_SINCE)
    how = (f"NCCL {ctx.target.text} compares it with strcmp (case-sensitive; strcasecmp from "
           f"{CASE_SINCE})" if case_matters else "NCCL compares it with each loaded network's "
           "name (strcasecmp: case does not matter, blanks do)")
    source = OLD_MATCH if case_matters else NET_INIT
    name = registered(value, case_matters)
    if name is not None:
        if none and name not in INTERNAL:
            make, how_none = (error, "loads no external plugin") if plugins_off else (
                warning, f"is looked up as a library (none, libnccl-net-none.so) on NCCL "
                f"{ctx.target.text}, so no external plugin loads where none has that name")
            return [make(var.name, f"'{value}' names a plugin's network ({REGISTERED[name][0]}), "
                         f"but NCCL_NET_PLUGIN=none {how_none}: only IB and Socket exist, so "
                         "every communicator fails with 'Failed to initialize any NET plugin'",
                         "drop NCCL_NET_PLUGIN=none, or NCCL_NET=IB / Socket", source=NET_LIST)]
        return []
    loose = registered(value.strip().strip("'\"")) or registered(value)
    meant = loose or MEANT.get(re.sub(r"[\s_'\"-]+", "", value).lower())
    if case_matters and loose in INTERNAL and value.strip() == value:
        return [error(var.name, f"'{value}' differs from the registered name '{loose}' only in "
                      f"case: {how}, so no network matches and every communicator fails",
                      f"NCCL_NET={loose}", Edit("set", loose, "the registered name"),
                      source=source)]
    known = ", ".join(n for n in REGISTERED if n not in INTERNAL)
    fix = f"NCCL_NET={meant}" if meant else f"IB, Socket or the name your plugin registers " \
        f"({known}), or unset it"
    edit = Edit("set", meant, f"'{meant}' is the registered name") if meant else None
    what = f"'{value}' is not the name of NCCL's internal networks (IB, Socket) nor of a known " \
        f"plugin's ({known})" if value.strip() == value else \
        f"'{value}' has blanks around the name, which the comparison keeps"
    ending = ("every communicator fails with WARN 'Failed to initialize any NET plugin' "
              "(ncclInvalidUsage)")
    if plugins_off:
        return [error(var.name, f"{what}; with NCCL_NET_PLUGIN=none only IB and Socket are loaded, "
                      f"so {ending}", fix, edit, source=NET_LIST)]
    return [warning(var.name, f"{what}: {how}, and unless a private plugin registers exactly "
                    f"this name {ending}" + (f"; '{meant}' is what the name seems to mean"
                                             if meant else ""), fix, edit, source=source)]


NAME_CHECKS = {"NCCL_NET": check_net}
