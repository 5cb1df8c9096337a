"""Rules that look at several variables at once: known-broken combinations, contradictions,
ranks, launcher mistakes. ``RULES`` is data: each ``Rule`` names the source that backs it.

    for rule in RULES:
        findings += rule.apply(ctx)
"""

from __future__ import annotations

from collections.abc import Mapping

from labkit.nccl import rules_torch
from labkit.nccl.context import Context, Rule
from labkit.nccl.findings import Finding, error, info, warning
from labkit.nccl.registry import ALIASES, REGISTRY
from labkit.nccl.registry_plugins import IBEXT_DISABLE, IBEXT_MAINTAINER, UCX_DISABLE
from labkit.nccl.shellwords import computed
from labkit.nccl.syntax import (
    ALGORITHMS,
    FUNCTIONS,
    PLACEHOLDER,
    PROTOCOLS,
    SUPPORTED,
    nccl_int,
    parse_token_list,
)
from labkit.nccl.variable import NCCL_DOC, NCCL_GITHUB


def is_one(env: Mapping[str, str], name: str) -> bool:
    return nccl_int(env.get(name, "")) == 1


def ib_disabled_with_hca(ctx: Context) -> list[Finding]:
    """IB off (NCCL_IB_DISABLE=1 or NCCL_NET=Socket): no NCCL_IB_* setting (HCAs, GID index,
    timeouts) can apply; NCCL_NET=IB fails."""
    env, found = ctx.env, []
    ibext = any(p.plugin.reads_ib for p in ctx.plugins) or ctx.ib_replaced is not None
    socket_only = env.get("NCCL_NET", "").lower() == "socket"
    if (is_one(env, "NCCL_IB_DISABLE") or socket_only) and not ibext:
        why = "NCCL_NET=Socket forces IP sockets" if socket_only else \
            "NCCL_IB_DISABLE=1 turns InfiniBand/RoCE off"
        # every NCCL_IB_* setting is read by NCCL's IB transport, which then never starts
        for name in sorted(n for n in env if n.startswith("NCCL_IB_") and n != "NCCL_IB_DISABLE"):
            found.append(warning(name, f"ignored: {why}, and only NCCL's IB transport reads "
                                 f"{name}", "drop one of the two"))
    if is_one(env, "NCCL_IB_DISABLE") and env.get("NCCL_NET", "").upper() == "IB":
        found.append(error("NCCL_NET", "NCCL_NET=IB forces the IB network that NCCL_IB_DISABLE=1 "
                           "turns off, and NCCL_NET does not fall back: communicator init fails",
                           "drop one of the two", source=f"{NCCL_DOC}#nccl-net"))
    return found


def ib_disable_with_plugin(ctx: Context) -> list[Finding]:
    """NCCL_IB_DISABLE is read by NCCL's own IB transport only, not by external net plugins."""
    if not is_one(ctx.env, "NCCL_IB_DISABLE") or not ctx.plugins:
        return []
    used = next((p for p in ctx.plugins if p.plugin.reads_ib), ctx.plugins[0])
    if used.plugin.reads_ib and "ucx" in used.evidence.lower():
        return [warning("NCCL_IB_DISABLE", f"{used.plugin.title} is in use with its UCX "
                        f"transport ({used.evidence}): that transport is switched off by "
                        "NCCL_UCX_DISABLE (NCCL_PARAM(UCXDisable, \"UCX_DISABLE\", 0) in its "
                        "ucx_plugin.c), not by NCCL_IB_DISABLE, so NCCL_IB_DISABLE=1 does not "
                        "force sockets", "NCCL_NET=Socket to force sockets", source=UCX_DISABLE)]
    if used.plugin.reads_ib:
        return [warning("NCCL_IB_DISABLE", f"{used.plugin.title} is in use ({used.evidence}): it "
                        "reads NCCL_IBEXT_DISABLE, not NCCL_IB_DISABLE (NCCL_PARAM(IbDisable, "
                        "\"IBEXT_DISABLE\", 0) in its ib_plugin.c), so its IB transport stays on "
                        "and NCCL_IB_DISABLE=1 does not force sockets; NCCL's maintainer on this "
                        "plugin: set NCCL_IBEXT_DISABLE=1 and keep NCCL_IB_DISABLE=1 for NCCL's "
                        f"internal IB transport ({IBEXT_MAINTAINER})", "NCCL_IBEXT_DISABLE=1 as "
                        "well (or NCCL_NET=Socket) to really turn IB off", source=IBEXT_DISABLE)]
    return [info("NCCL_IB_DISABLE", f"turns off NCCL's internal IB transport only; "
                 f"{used.plugin.title} ({used.evidence}) carries the traffic and reads its own "
                 "variables", source=used.plugin.source)]


def p2p_disabled_with_level(ctx: Context) -> list[Finding]:
    """ncclGetLevel reads NCCL_P2P_DISABLE first; =1 wins over any NCCL_P2P_LEVEL."""
    if is_one(ctx.env, "NCCL_P2P_DISABLE") and "NCCL_P2P_LEVEL" in ctx.env:
        return [warning("NCCL_P2P_LEVEL", "ignored: NCCL_P2P_DISABLE=1 wins (NCCL reads it first)",
                        "drop one of the two")]
    return []


def socket_threads(ctx: Context) -> list[Finding]:
    """net_socket.cc: more than 64 sockets -> NCCL lowers NSOCKS_PERTHREAD (and WARNs)."""
    threads = min(nccl_int(ctx.env.get("NCCL_SOCKET_NTHREADS", "1")) or 1, 16)
    socks = nccl_int(ctx.env.get("NCCL_NSOCKS_PERTHREAD", "1")) or 1
    if threads > 0 and threads * socks > 64:
        return [warning("NCCL_NSOCKS_PERTHREAD", f"NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD = "
                        f"{threads * socks}, above NCCL's 64: it lowers NCCL_NSOCKS_PERTHREAD to "
                        f"{64 // threads} and warns", "e.g. 4 x 4 on a 100G network")]
    return []


def min_above_max(ctx: Context) -> list[Finding]:
    """A minimum channel/CTA count above the maximum (init.cc: minCTAs is set to maxCTAs)."""
    found = []
    for low_name, high_name in (("NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS"),
                                ("NCCL_MIN_CTAS", "NCCL_MAX_CTAS")):
        low, high = nccl_int(ctx.env.get(low_name, "")), nccl_int(ctx.env.get(high_name, ""))
        if low is not None and high is not None and low > high:
            what = ": NCCL sets both to the maximum" if low_name == "NCCL_MIN_CTAS" else ""
            found.append(warning(low_name, f"{low_name}={low} is above {high_name}={high}{what}",
                                 "set the minimum at or below the maximum"))
    return found


def renamed_twice(ctx: Context) -> list[Finding]:
    """Old and new name both set: PyTorch's getCvar* prefers the new name; NCCL's docs say the
    most restrictive of NCCL_M*_NCHANNELS and NCCL_M*_CTAS is used."""
    found, env = [], ctx.env
    for var in REGISTRY.values():
        new = var.deprecated_by
        if new and var.name in env and new in env and env[new] != env[var.name]:
            wins = f"{var.name} is ignored" if var.name in ALIASES else \
                "the most restrictive is used" if var.owner == "nccl" else f"{new} wins"
            found.append(warning(var.name, f"both {var.name}={env[var.name]} and {new}={env[new]}"
                                 f" are set: {wins}", f"drop {var.name}", source=var.link))
    return found


OFFLOAD = {"collnetdirect", "collnetchain", "nvls", "nvlstree"}  # need NVSwitch / a CollNet plugin
# What each algorithm beyond Ring and Tree needs (tuning.cc: ncclPatEnable wants one GPU per node).
NEEDS = (({"nvls", "nvlstree"}, "NVLS: NVSwitch"),
         ({"collnetdirect", "collnetchain"}, "CollNet: a CollNet plugin"),
         ({"pat"}, "PAT: one GPU per node"))


def algorithm_coverage(ctx: Context) -> list[Finding]:
    """Since 2.24 an NCCL_ALGO / NCCL_PROTO list that leaves a collective without any algorithm
    it can run makes that collective fail; Broadcast and Reduce run only on Ring."""
    found = []
    for name, tokens, supported in (("NCCL_ALGO", ALGORITHMS, SUPPORTED),
                                    ("NCCL_PROTO", PROTOCOLS, {})):
        value = ctx.env.get(name, "")
        if not value or computed(value) or PLACEHOLDER.search(value):
            continue
        parsed = parse_token_list(value, tokens)
        if parsed.problems:
            continue  # the value check reports those
        empty, hardware = [], []
        for function in FUNCTIONS:
            enabled = parsed.enabled[function.lower()]
            usable = enabled & supported.get(function.lower(), enabled)
            if not usable:
                empty.append(function)
            elif supported and not usable & {"ring", "tree"}:
                hardware.append(function)
        named = {t.lower() for entry in value.split(";") for t in entry.split(":")[-1].split(",")
                 if not entry.split(":")[-1].startswith("^")}
        offload = named & OFFLOAD and "ring" not in named
        what = "algorithm it can run" if supported else "protocol"
        ring = any(f in ("Broadcast", "Reduce") for f in empty) and supported
        fix = ("add Ring (e.g. NCCL_ALGO=Ring,Tree), or restrict per collective: "
               "NCCL_ALGO='allreduce:tree'" if supported else
               "leave each collective at least one protocol (e.g. NCCL_PROTO=^LL128), or "
               "restrict per collective: NCCL_PROTO='allreduce:Simple'")
        benchmark = ctx.runs is not None and not ctx.runs & set(empty)
        if empty and ctx.target.at_least("2.24"):
            make = warning if (offload and supported) or benchmark else error
            why = (f" (the benchmark pasted runs only {', '.join(sorted(ctx.runs))}, which it "
                   "covers: a training job fails at its first such call, e.g. DDP's initial "
                   "Broadcast)" if benchmark and ctx.runs else
                   " (a list of offload algorithms only, as in a benchmark of them: the other "
                   "collectives still fail)" if make is warning else "")
            found.append(make(name, f"'{value}' leaves {', '.join(empty)} with no {what}: "
                              "since NCCL 2.24 there is no fallback, so those collectives "
                              "fail with ncclInvalidUsage ('No algorithm/protocol available')"
                              + ("; Broadcast and Reduce run only on Ring" if ring else "")
                              + f"{why} (checked against {ctx.target.describe()})", fix,
                              source=f"{NCCL_DOC}#nccl-{name[5:].lower()}"))
        elif empty:
            found.append(info(name, f"'{value}' leaves {', '.join(empty)} with no {what}: NCCL "
                              f"{ctx.target.text} falls back to another, NCCL 2.24 and later "
                              "fail those collectives with ncclInvalidUsage", fix,
                              source=f"{NCCL_DOC}#nccl-{name[5:].lower()}"))
        if hardware and not empty:
            used = set().union(*(parsed.enabled[f.lower()] & supported[f.lower()]
                                 for f in hardware))
            needs = "; ".join(text for algos, text in NEEDS if used & algos)
            late = ctx.target.at_least("2.24")
            found.append((warning if late else info)(
                name, f"'{value}' leaves {', '.join(hardware)} only algorithms that need "
                f"particular hardware ({needs}): elsewhere those collectives "
                + ("fail" if late else f"fall back to another algorithm on NCCL "
                   f"{ctx.target.text} and fail from 2.24 on"), "keep Ring in the list",
                source=NCCL_GITHUB + "src/graph/tuning.cc#L215-L298"))
    return found


def mnnvl_without_cumem(ctx: Context) -> list[Finding]:
    """NCCL's docs: MNNVL needs cuMem; NCCL_MNNVL_ENABLE=1 fails init if MNNVL cannot be used."""
    if ctx.env.get("NCCL_MNNVL_ENABLE", "").strip() == "1" and \
            ctx.env.get("NCCL_CUMEM_ENABLE", "").strip() == "0":
        return [error("NCCL_MNNVL_ENABLE", "=1 requires MNNVL, which needs cuMem (NCCL's docs), "
                      "but NCCL_CUMEM_ENABLE=0 turns cuMem off: communicator init fails",
                      "drop NCCL_CUMEM_ENABLE=0, or use NCCL_MNNVL_ENABLE=2 (auto)")]
    return []


def graph_ordering_with_mixing(ctx: Context) -> list[Finding]:
    """NCCL's docs: NCCL_GRAPH_STREAM_ORDERING=0 with graph mixing is not supported."""
    if ctx.env.get("NCCL_GRAPH_STREAM_ORDERING", "").strip() == "0" and \
            ctx.env.get("NCCL_GRAPH_MIXING_SUPPORT", "").strip() == "1":
        return [warning("NCCL_GRAPH_STREAM_ORDERING", "=0 together with "
                        "NCCL_GRAPH_MIXING_SUPPORT=1 (graph mixing) is not supported (NCCL's "
                        "docs)", "NCCL_GRAPH_MIXING_SUPPORT=0, or drop the ordering bypass")]
    return []


def nvls_with_multi_rank_gpu(ctx: Context) -> list[Finding]:
    """NCCL's docs: NVLS=1 makes init fail when several ranks share a GPU."""
    if ctx.env.get("NCCL_NVLS_ENABLE", "").strip() == "1" and \
            is_one(ctx.env, "NCCL_MULTI_RANK_GPU_ENABLE"):
        return [warning("NCCL_NVLS_ENABLE", "=1 with NCCL_MULTI_RANK_GPU_ENABLE=1: communicator "
                        "init fails wherever ranks really share a GPU (NCCL's docs; 2 silently "
                        "disables NVLS instead)", "NCCL_NVLS_ENABLE=2 (the default)")]
    return []


RULES: tuple[Rule, ...] = (
    Rule("ib-off-with-hca", f"{NCCL_DOC}#nccl-ib-disable", ib_disabled_with_hca),
    Rule("ib-disable-with-plugin", IBEXT_DISABLE, ib_disable_with_plugin),
    Rule("p2p-disable-wins", NCCL_GITHUB + "src/graph/paths.cc#L244-L256", p2p_disabled_with_level),
    Rule("socket-threads-64", NCCL_GITHUB + "src/transport/net_socket.cc#L390-L396",
         socket_threads),
    Rule("min-above-max", NCCL_GITHUB + "src/init.cc#L2190-L2194", min_above_max),
    Rule("renamed-twice", f"{NCCL_DOC}#nccl-min-nchannels", renamed_twice),
    Rule("algo-no-fallback", f"{NCCL_DOC}#nccl-algo", algorithm_coverage),
    Rule("mnnvl-needs-cumem", f"{NCCL_DOC}#nccl-mnnvl-enable", mnnvl_without_cumem),
    Rule("graph-ordering-mixing", f"{NCCL_DOC}#nccl-graph-stream-ordering",
         graph_ordering_with_mixing),
    Rule("nvls-multi-rank-gpu", f"{NCCL_DOC}#nccl-multi-rank-gpu-enable", nvls_with_multi_rank_gpu),
) + rules_torch.RULES_TORCH
