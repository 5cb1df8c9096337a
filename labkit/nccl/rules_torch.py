"""Rules across PyTorch / torchrun variables: error handling, the flight recorder, ranks.

Sources: torch 2.13's ``ProcessGroupNCCL.hpp`` (the comments on TORCH_NCCL_DUMP_ON_TIMEOUT and
TORCH_NCCL_DESYNC_DEBUG, the 10-minute default timeout) and ``ProcessGroupNCCL.cpp``'s
constructor: with blocking wait it logs "TORCH_NCCL_BLOCKING_WAIT is enabled, NO watchdog thread
is created" (before that, "Only TORCH_NCCL_BLOCKING_WAIT is being used in this process" and
async error handling set to 0), and it turns async error handling back on for desync debug.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

from labkit.nccl.context import Context, Rule
from labkit.nccl.findings import Edit, Finding, error, info, warning
from labkit.nccl.registry import in_torchrun_worker
from labkit.nccl.syntax import parse_int, torch_bool
from labkit.nccl.variable import ENV_INIT_DOC, TORCH_GITHUB, TORCH_HEADER

PG_CPP = TORCH_GITHUB + "torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp"


def _first(env: Mapping[str, str], *names: str) -> tuple[str, str] | None:
    """The first of ``names`` set in ``env`` (PyTorch prefers the first name of its list)."""
    return next(((n, env[n]) for n in names if n in env), None)


def blocking_wait(ctx: Context) -> list[Finding]:
    """Blocking wait: no watchdog; with async error handling set too, that setting is ignored."""
    blocking = _first(ctx.env, "TORCH_NCCL_BLOCKING_WAIT", "NCCL_BLOCKING_WAIT")
    if not blocking or not torch_bool(blocking[1]):
        return []
    handling = _first(ctx.env, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING")
    name = blocking[0]
    if handling and handling[1].strip() not in ("", "0"):
        other, value = handling
        return [
            warning(name, f"together with {other}={value}, blocking wait wins: ProcessGroupNCCL "
                    "creates no watchdog thread (older PyTorch: sets async error handling to 0), "
                    f"so {other} does nothing and errors surface only as exceptions from wait() "
                    "after the process-group timeout", f"keep one: drop {name} (the watchdog "
                    "with async error handling tears failed jobs down), or drop " + other,
                    source=PG_CPP),
            warning(other, f"ignored: {name}=1 is set, and with blocking wait PyTorch runs no "
                    "watchdog to apply it", f"drop {name}", source=PG_CPP)]
    return [info(name, "wait() now blocks and raises once init_process_group's timeout expires "
                 "(10 min by default for NCCL): not fast, and ProcessGroupNCCL then creates no "
                 "watchdog thread; by default (TORCH_NCCL_ASYNC_ERROR_HANDLING=3) the watchdog "
                 "already tears the job down after the same timeout",
                 "pass init_process_group(timeout=timedelta(seconds=...)); to find the rank that "
                 "hangs use TORCH_DISTRIBUTED_DEBUG=DETAIL and the flight recorder", source=PG_CPP)]


def desync_without_handling(ctx: Context) -> list[Finding]:
    """Desync debug needs async error handling; PyTorch switches it back on (3)."""
    desync = _first(ctx.env, "TORCH_NCCL_DESYNC_DEBUG", "NCCL_DESYNC_DEBUG")
    handling = _first(ctx.env, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING")
    if desync and torch_bool(desync[1]) and handling and handling[1].strip() == "0":
        return [info(handling[0], f"with {desync[0]}=1 PyTorch logs 'must both be enabled' and "
                     "sets async error handling to 3", source=PG_CPP)]
    return []


def flight_recorder(ctx: Context) -> list[Finding]:
    """Dumping on timeout needs a trace buffer and the monitoring thread (ProcessGroupNCCL.hpp)."""
    env, found = ctx.env, []
    if not torch_bool(env.get("TORCH_NCCL_DUMP_ON_TIMEOUT", "0")):
        return []
    size = _first(env, "TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
    if size and parse_int(size[1]) == 0:
        found.append(warning("TORCH_NCCL_DUMP_ON_TIMEOUT", f"nothing to dump: {size[0]}=0 turns "
                             "the flight recorder off", "TORCH_FR_BUFFER_SIZE=2000"))
    if torch_bool(env.get("TORCH_NCCL_ENABLE_MONITORING", "1")) is False:
        found.append(warning("TORCH_NCCL_DUMP_ON_TIMEOUT", "needs TORCH_NCCL_ENABLE_MONITORING=1 "
                             "(ProcessGroupNCCL.hpp: it must be set together with it)",
                             "drop TORCH_NCCL_ENABLE_MONITORING=0"))
    return found


def ranks(ctx: Context) -> list[Finding]:
    """WORLD_SIZE / RANK / LOCAL_RANK / LOCAL_WORLD_SIZE must agree with each other."""
    env = ctx.env
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


def rank_per_node(ctx: Context) -> list[Finding]:
    """RANK set by hand (``RANK=$NODE_RANK``): RANK is per process, and torchrun sets it."""
    env = ctx.env
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


def loopback_master(ctx: Context) -> list[Finding]:
    """A loopback MASTER_ADDR cannot be reached from other nodes."""
    env = ctx.env
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
    if loopback and (ctx.nodes or 0) > 1:
        return [warning("MASTER_ADDR", f"{address} is loopback, and the paste runs the job on "
                        f"{ctx.nodes} nodes: ranks on the other nodes would look for rank 0's "
                        "store on their own node. Fine only where each node runs a job of its "
                        "own", "the IP or host name of rank 0's node")]
    return []


RULES_TORCH: tuple[Rule, ...] = (
    Rule("blocking-wait-drops-watchdog", PG_CPP, blocking_wait),
    Rule("desync-needs-error-handling", TORCH_HEADER, desync_without_handling),
    Rule("flight-recorder-needs-buffer", TORCH_HEADER, flight_recorder),
    Rule("ranks-agree", ENV_INIT_DOC, ranks),
    Rule("rank-per-process", "https://docs.pytorch.org/docs/stable/elastic/run.html",
         rank_per_node),
    Rule("loopback-master", ENV_INIT_DOC, loopback_master),
)
