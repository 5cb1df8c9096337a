"""Value domains of NCCL's name- and enum-valued variables, as NCCL 2.30.7's source compares them.

``NAME_CHECKS``: what NCCL does with a value outside a variable's domain, where that is more
than "undocumented" (``values._int_enum``); ``registry_domains`` gives the source-only ones
their kinds and choices:

- ``NCCL_IB_ADDR_FAMILY``: ``strcmp`` with AF_INET / AF_INET6, anything else keeps AF_INET
  (``src/transport/net_ib/connect.cc``), so an IPv6 meant in other words is never selected;
- ``NCCL_NVLS_ENABLE`` / ``NCCL_PAT_ENABLE``: 2 is "auto", and any other nonzero value forces the
  feature on like 1 (``src/transport/nvls.cc``, ``src/graph/tuning.cc``);
- ``NCCL_CROSS_NIC``: the graph search tests for 1 and 2 only (``src/graph/search.cc``);
- ``NCCL_SHM_LOCALITY``: 1 or 2, anything else WARNs and uses 2 (``src/transport/shm.cc``);
- ``NCCL_NET_MERGE_LEVEL``: a path name matched as a prefix, case-sensitively; anything else
  falls back to LOC, which merges no NICs (``src/graph/topo.cc``, ``src/graph/xml.h``);
- ``NCCL_IB_ROCE_VERSION_NUM``: compared with the RoCE version read for each GID (1 or 2).
"""

from __future__ import annotations

from labkit.nccl.context import Context
from labkit.nccl.findings import Edit, Finding, error, warning
from labkit.nccl.registry_domains import MERGE_LEVELS, SOURCE_VARIABLES
from labkit.nccl.syntax import nccl_int
from labkit.nccl.values import KIND_CHECKS
from labkit.nccl.variable import NCCL_GITHUB, Variable

CONNECT = NCCL_GITHUB + "src/transport/net_ib/connect.cc"
_IPV4 = {"af_inet", "inet", "ipv4", "ip4", "v4", "4", "pf_inet"}
_IPV6 = {"af_inet6", "inet6", "ipv6", "ip6", "v6", "6", "pf_inet6"}


def _ib_addr_family(var: Variable, value: str, ctx: Context) -> list[Finding]:
    """envIbAddrFamily: strcmp with AF_INET / AF_INET6, anything else keeps AF_INET."""
    if value in ("AF_INET", "AF_INET6"):
        return []
    source = CONNECT + "#L101-L117"
    meant = "AF_INET6" if value.strip().lower() in _IPV6 else \
        "AF_INET" if value.strip().lower() in _IPV4 else None
    edit = Edit("set", meant, "NCCL compares the exact name") if meant else None
    text = (f"'{value}' is neither AF_INET nor AF_INET6 (NCCL compares them with strcmp): NCCL "
            "keeps AF_INET, its default, when it selects a GID (NCCL_IB_GID_INDEX unset)")
    if meant == "AF_INET":
        return [warning(var.name, text + ", which is what this seems to mean, by chance",
                        "NCCL_IB_ADDR_FAMILY=AF_INET, or unset it", edit, source=source)]
    return [error(var.name, text + (", not the IPv6 GID this asks for" if meant else ""),
                  "AF_INET or AF_INET6", edit, source=source)]


def _forced_other(feature: str, source: str):
    """An int-enum 0/1/2 whose other nonzero values act as 1 (forced on, no auto checks)."""
    def check(var: Variable, value: str, ctx: Context) -> list[Finding]:
        number = nccl_int(value)
        if number is None or str(number) in var.choices:
            return _by_kind(var, value, ctx)
        return [warning(var.name, f"{number}: only {', '.join(var.choices)} are documented, and "
                        f"NCCL treats any other nonzero value as 1: {feature} is forced on "
                        "without the checks of 2 (auto)", f"{var.name}: {var.values}",
                        source=source)] if number else []
    return check


def _by_kind(var: Variable, value: str, ctx: Context) -> list[Finding]:
    """The kind's own check (an integer that is no integer, bounds)."""
    check = KIND_CHECKS.get(var.kind)
    return check(var, value, ctx) if check else []


def _cross_nic(var: Variable, value: str, ctx: Context) -> list[Finding]:
    number = nccl_int(value)
    if number is None or str(number) in var.choices:
        return _by_kind(var, value, ctx)
    return [warning(var.name, f"{number}: only 0, 1 and 2 are documented; NCCL's graph search "
                    "tests for 1 and 2 only, so it searches as with 0 (rings and trees keep one "
                    "NIC), while other checks count it as nonzero", "NCCL_CROSS_NIC: 0, 1 or 2",
                    source=NCCL_GITHUB + "src/graph/search.cc#L1068-L1085")]


def _shm_locality(var: Variable, value: str, ctx: Context) -> list[Finding]:
    number = nccl_int(value)
    if number is None or number in (1, 2):
        return _by_kind(var, value, ctx)
    return [warning(var.name, f"{number}: NCCL prints WARN 'Ignoring SHM locality, must be 1 "
                    "(sender side) or 2 (receiver side, default)' and uses 2",
                    "1 or 2, or unset it", source=SOURCE_VARIABLES[var.name][4])]


def _merge_level(var: Variable, value: str, ctx: Context) -> list[Finding]:
    """kvConvertToInt: the first name the value starts with (strncmp), else LOC."""
    if any(value.startswith(level) for level in MERGE_LEVELS):
        return []
    upper = next((level for level in MERGE_LEVELS if value.upper().startswith(level)), None)
    return [warning(var.name, f"'{value}' starts with none of {', '.join(MERGE_LEVELS)} "
                    "(compared case-sensitively): NCCL logs an INFO line and falls back to LOC, "
                    "which merges no NICs (the default is PORT)",
                    f"NCCL_NET_MERGE_LEVEL={upper}" if upper else f"one of {var.values}",
                    Edit("set", upper, "upper case") if upper else None,
                    source=NCCL_GITHUB + "src/graph/xml.h#L425-L438")]


def _roce_version(var: Variable, value: str, ctx: Context) -> list[Finding]:
    number = nccl_int(value)
    if number is None or number in (1, 2):
        return _by_kind(var, value, ctx)
    return [warning(var.name, f"{number}: NCCL compares it with the RoCE version it reads for "
                    "each GID (1 or 2), so no GID matches and no version is preferred when it "
                    "selects one", "1 or 2 (the default)", source=CONNECT + "#L284-L293")]


NAME_CHECKS = {
    "NCCL_IB_ADDR_FAMILY": _ib_addr_family,
    "NCCL_NVLS_ENABLE": _forced_other("NVLink SHARP",
                                      NCCL_GITHUB + "src/transport/nvls.cc#L248-L276"),
    "NCCL_PAT_ENABLE": _forced_other("PAT", SOURCE_VARIABLES["NCCL_PAT_ENABLE"][4]),
    "NCCL_CROSS_NIC": _cross_nic, "NCCL_SHM_LOCALITY": _shm_locality,
    "NCCL_NET_MERGE_LEVEL": _merge_level, "NCCL_IB_ROCE_VERSION_NUM": _roce_version,
}
