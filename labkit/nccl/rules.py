"""Rules that look at several variables at once: contradictions, ranks, launcher mistakes.

Each rule is ``rule(env) -> list[Finding]``; ``RULES`` lists them in the order they report.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping

from labkit.nccl.findings import Edit, Finding, error, info, warning
from labkit.nccl.registry import REGISTRY, in_torchrun_worker
from labkit.nccl.syntax import nccl_int, parse_int, torch_bool

Rule = Callable[[Mapping[str, str]], list[Finding]]


def _is_one(env: Mapping[str, str], name: str) -> bool:
    return nccl_int(env.get(name, "")) == 1


def ib_disabled_with_hca(env: Mapping[str, str]) -> list[Finding]:
    """NCCL_IB_DISABLE=1 turns IB off, so an HCA list (or NCCL_NET=IB) cannot apply."""
    found = []
    if _is_one(env, "NCCL_IB_DISABLE") and "NCCL_IB_HCA" in env:
        found.append(warning("NCCL_IB_HCA", "ignored: NCCL_IB_DISABLE=1 turns InfiniBand/RoCE off",
                             "drop one of the two"))
    if _is_one(env, "NCCL_IB_DISABLE") and env.get("NCCL_NET", "").upper() == "IB":
        found.append(error("NCCL_NET", "NCCL_NET=IB forces the IB network that NCCL_IB_DISABLE=1 "
                           "turns off: communicator init fails", "drop one of the two"))
    return found


def p2p_disabled_with_level(env: Mapping[str, str]) -> list[Finding]:
    """paths.cc reads NCCL_P2P_DISABLE first; =1 wins over any NCCL_P2P_LEVEL."""
    if _is_one(env, "NCCL_P2P_DISABLE") and "NCCL_P2P_LEVEL" in env:
        return [warning("NCCL_P2P_LEVEL", "ignored: NCCL_P2P_DISABLE=1 wins (NCCL reads it first)",
                        "drop one of the two")]
    return []


def socket_threads(env: Mapping[str, str]) -> list[Finding]:
    """NCCL's docs: NSOCKS_PERTHREAD x SOCKET_NTHREADS cannot exceed 64."""
    threads = nccl_int(env.get("NCCL_SOCKET_NTHREADS", "1")) or 1
    socks = nccl_int(env.get("NCCL_NSOCKS_PERTHREAD", "1")) or 1
    if threads * socks > 64:
        return [error("NCCL_NSOCKS_PERTHREAD", f"NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD = "
                      f"{threads * socks}: NCCL allows at most 64", "e.g. 4 x 4 on a 100G network")]
    return []


def min_above_max(env: Mapping[str, str]) -> list[Finding]:
    """A minimum channel/CTA count above the maximum."""
    found = []
    for low_name, high_name in (("NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS"),
                                ("NCCL_MIN_CTAS", "NCCL_MAX_CTAS")):
        low, high = nccl_int(env.get(low_name, "")), nccl_int(env.get(high_name, ""))
        if low is not None and high is not None and low > high:
            found.append(warning(low_name, f"{low_name}={low} is above {high_name}={high}",
                                 "set the minimum at or below the maximum"))
    return found


def renamed_twice(env: Mapping[str, str]) -> list[Finding]:
    """Old and new name both set: the new one wins (c10d ``getCvar*`` prefers the first name)."""
    found = []
    for var in REGISTRY.values():
        new = var.deprecated_by
        if new and var.name in env and new in env and env[new] != env[var.name]:
            found.append(warning(var.name, f"both {var.name}={env[var.name]} and {new}={env[new]}"
                                 f" are set: {new} wins", f"drop {var.name}"))
    return found


def blocking_wait(env: Mapping[str, str]) -> list[Finding]:
    """TORCH_NCCL_BLOCKING_WAIT raises after the process-group timeout, not right away."""
    name = next((n for n in ("TORCH_NCCL_BLOCKING_WAIT", "NCCL_BLOCKING_WAIT") if n in env), None)
    if name and torch_bool(env[name]):
        return [info(name, "wait() now blocks and raises once init_process_group's timeout "
                     "expires (10 min by default for NCCL): not fast, and it does not prevent the "
                     "hang; the watchdog (TORCH_NCCL_ASYNC_ERROR_HANDLING, default 3) already "
                     "tears the job down after the same timeout",
                     "pass init_process_group(timeout=timedelta(seconds=...)); to find the rank "
                     "that hangs use TORCH_DISTRIBUTED_DEBUG=DETAIL and the flight recorder")]
    return []


def flight_recorder(env: Mapping[str, str]) -> list[Finding]:
    """Dumping on timeout needs a trace buffer."""
    size = parse_int(env.get("TORCH_NCCL_TRACE_BUFFER_SIZE", "1"))
    if torch_bool(env.get("TORCH_NCCL_DUMP_ON_TIMEOUT", "0")) and size == 0:
        return [warning("TORCH_NCCL_DUMP_ON_TIMEOUT", "nothing to dump: TORCH_NCCL_TRACE_BUFFER_"
                        "SIZE=0 turns the flight recorder off",
                        "TORCH_NCCL_TRACE_BUFFER_SIZE=2000")]
    return []


def ranks(env: Mapping[str, str]) -> list[Finding]:
    """WORLD_SIZE / RANK / LOCAL_RANK / LOCAL_WORLD_SIZE must agree with each other."""
    world, rank = parse_int(env.get("WORLD_SIZE", "")), parse_int(env.get("RANK", ""))
    local, local_world = parse_int(env.get("LOCAL_RANK", "")), \
        parse_int(env.get("LOCAL_WORLD_SIZE", ""))
    found = []
    if world and rank is not None and rank >= world:
        found.append(error("RANK", f"RANK={rank} but WORLD_SIZE={world}: ranks go 0 to {world - 1}",
                           "RANK < WORLD_SIZE"))
    if local_world and local is not None and local >= local_world:
        found.append(error("LOCAL_RANK", f"LOCAL_RANK={local} but LOCAL_WORLD_SIZE={local_world}",
                           "LOCAL_RANK < LOCAL_WORLD_SIZE"))
    if world and local_world and local_world > world:
        found.append(error("LOCAL_WORLD_SIZE", f"LOCAL_WORLD_SIZE={local_world} is above "
                           f"WORLD_SIZE={world}", "ranks per node <= total ranks"))
    elif world and local_world and world % local_world:
        found.append(info("WORLD_SIZE", f"WORLD_SIZE={world} is not a multiple of "
                          f"LOCAL_WORLD_SIZE={local_world}: nodes run different rank counts"))
    return found


def rank_per_node(env: Mapping[str, str]) -> list[Finding]:
    """The guide's ``RANK=$NODE_RANK``: RANK is per process, and torchrun sets it."""
    if "RANK" not in env or in_torchrun_worker(env):
        return []
    local_world = parse_int(env.get("LOCAL_WORLD_SIZE", "")) or 0
    per_node = "NODE_RANK" in env["RANK"]
    if local_world > 1 or per_node:
        why = "$NODE_RANK gives every process on a node the same rank; " if per_node else ""
        return [warning("RANK", f"{why}RANK must be unique per process: under torchrun, do not "
                        "set RANK yourself; torchrun sets RANK, LOCAL_RANK and WORLD_SIZE per "
                        "process", "drop RANK; give torchrun --node-rank (or use --rdzv-backend="
                        "c10d, which numbers nodes itself)",
                        Edit("comment", reason="torchrun sets RANK per process"))]
    return []


def loopback_master(env: Mapping[str, str]) -> list[Finding]:
    """A loopback MASTER_ADDR cannot be reached from other nodes."""
    address = env.get("MASTER_ADDR", "")
    world = parse_int(env.get("WORLD_SIZE", "")) or 0
    local_world = parse_int(env.get("LOCAL_WORLD_SIZE", "")) or world
    try:
        loopback = address == "localhost" or ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        loopback = False
    if loopback and world > local_world:
        return [warning("MASTER_ADDR", f"{address} is loopback but WORLD_SIZE={world} spans "
                        "several nodes: other nodes cannot reach it", "the IP of rank 0's node")]
    return []


RULES: list[Rule] = [ib_disabled_with_hca, p2p_disabled_with_level, socket_threads,
                     min_above_max, renamed_twice, blocking_wait, flight_recorder, ranks,
                     rank_per_node, loopback_master]
