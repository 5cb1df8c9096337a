"""Checks of one NCCL value, by kind (``KIND_CHECKS``) or by name (``NAME_CHECKS``), plus the
generic integer/boolean/enum checks every owner uses.

Each check is ``check(var, value, env, host) -> list[Finding]``; the sources are in the module
docstrings of ``registry`` and ``syntax``.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from labkit.nccl.findings import Edit, Finding, error, info, warning
from labkit.nccl.registry import Variable
from labkit.nccl.syntax import (
    ALGORITHMS,
    PATH_NAMES,
    PROTOCOLS,
    SUBSYSTEMS,
    nccl_int,
    parse_int,
    parse_level,
    parse_name_list,
    parse_subsystems,
    parse_token_list,
    torch_bool,
)


@dataclass
class Host:
    """What this host has, for checks that compare names against it."""

    interfaces: set[str]
    hcas: set[str]


Check = Callable[[Variable, str, Mapping[str, str], Host], list[Finding]]

# Ranges the docs give (None: unbounded).
RANGES: dict[str, tuple[int, int | None]] = {
    "NCCL_SOCKET_NTHREADS": (1, 16), "NCCL_NSOCKS_PERTHREAD": (1, None),
    "NCCL_IB_TIMEOUT": (0, 31), "NCCL_IB_RETRY_CNT": (0, 7), "NCCL_BUFFSIZE": (1, None),
    "NCCL_MAX_NCHANNELS": (1, None), "NCCL_MIN_NCHANNELS": (1, 32), "NCCL_MAX_CTAS": (1, 64),
    "NCCL_MIN_CTAS": (1, 64), "NCCL_IB_QPS_PER_CONNECTION": (1, 128),
    "TORCH_NCCL_TRACE_BUFFER_SIZE": (0, None), "WORLD_SIZE": (1, None), "RANK": (0, None),
    "LOCAL_RANK": (0, None), "LOCAL_WORLD_SIZE": (1, None), "PET_NODE_RANK": (0, None),
    "PET_MAX_RESTARTS": (0, None),
}
MAX_TOPO_BYTES = 8 << 20


def _integer(var: Variable, value: str, env: Mapping[str, str], host: Host) -> list[Finding]:
    number = nccl_int(value) if var.owner == "nccl" else parse_int(value)
    if number is None:
        return [error(var.name, f"'{value}' is not an integer", f"{var.name}: {var.values}")]
    low, high = RANGES.get(var.name, (None, None))
    if (low is not None and number < low) or (high is not None and number > high):
        return [error(var.name, f"{number} is out of range ({var.values})",
                      f"{var.name}: {var.values}")]
    if var.name == "NCCL_BUFFSIZE" and number & (number - 1):
        return [info(var.name, f"{number} is not a power of 2 (NCCL recommends powers of 2)")]
    if var.name == "TORCH_NCCL_TRACE_BUFFER_SIZE" and number == 0:
        return [info(var.name, "0 turns the flight recorder off: nothing to dump after a hang",
                     "leave it unset (2000 events in current PyTorch)")]
    return []


def _boolean(var: Variable, value: str, env: Mapping[str, str], host: Host) -> list[Finding]:
    if var.owner == "pytorch":
        if torch_bool(value) is None:
            return [error(var.name, f"'{value}' is not a boolean: PyTorch raises 'Invalid value "
                          "for environment variable'", "use 1 or 0")]
        return []
    number, meant = nccl_int(value), torch_bool(value)
    if number is None:
        edit = None if meant is None else Edit("set", str(int(meant)), "NCCL reads integers")
        return [error(var.name, f"NCCL reads an integer: '{value}' is not 1 (older NCCL reads it "
                      "as 0, newer rejects it and keeps the default)", "use 1 or 0", edit)]
    if number not in (0, 1):
        return [warning(var.name, f"{number}: only 0 and 1 are documented", "use 1 or 0")]
    return []


def check_enum(var: Variable, value: str, env: Mapping[str, str], host: Host) -> list[Finding]:
    """``value`` must be one of ``var.choices`` (case-insensitive)."""
    if value.upper() in (c.upper() for c in var.choices):
        return []
    valid = ", ".join(var.choices)
    if var.name == "TORCH_CPP_LOG_LEVEL":
        return [warning(var.name, f"'{value}' is not a level: PyTorch prints that it cannot parse "
                        "it and keeps WARNING", f"one of {valid}")]
    if var.name == "TORCH_DISTRIBUTED_DEBUG":
        return [error(var.name, f"'{value}': importing torch.distributed raises ValueError "
                      "(must be OFF, INFO or DETAIL)", "OFF, INFO or DETAIL")]
    return [error(var.name, f"'{value}' is not one of {valid}", f"{var.name}: {var.values}")]


def _level(var: Variable, value: str, env: Mapping[str, str], host: Host) -> list[Finding]:
    level = parse_level(value)
    named = ", ".join(var.choices)
    if level.level is None:
        if value.upper() in PATH_NAMES:
            return [error(var.name, f"NCCL compares level names case-sensitively: '{value}' is "
                          "ignored without a word", f"write {value.upper()}",
                          Edit("set", value.upper(), "level names are upper case"))]
        return [error(var.name, f"'{value}' is not a level: NCCL ignores it silently",
                      f"one of {named}")]
    if level.legacy_integer:
        what = f"legacy integer: NCCL reads '{value}' as {level.level}"
        if (nccl_int(value) or 0) > 4:
            what += " (every integer above 4 reads as SYS)"
        if var.name == "NCCL_P2P_LEVEL" and level.level == "SYS":
            what += ", which allows P2P even across CPU sockets (through QPI/UPI)"
        if var.name == "NCCL_P2P_LEVEL":
            what += (". The level is the largest GPU distance at which P2P is used; P2P is on by "
                     "default, so the guide's 'enables GPU-to-GPU direct transfers' is wrong")
        what += ". NCCL discourages integers: their meaning changed across versions"
        return [warning(var.name, what, f"write the name: {var.name}={level.level}, or unset it",
                        Edit("set", level.level, f"'{value}' reads as {level.level}"))]
    if level.level not in var.choices:
        return [info(var.name, f"{level.level} is accepted by NCCL's parser but not documented "
                     f"for {var.name} (documented: {named})")]
    return []


def _socket_ifname(var: Variable, value: str, env: Mapping[str, str], host: Host) -> list[Finding]:
    parsed = parse_name_list(value, with_ports=False)
    found = [error(var.name, p, "see the syntax: " + var.values) for p in parsed.problems]
    found += [warning(var.name, n, "see the syntax: " + var.values) for n in parsed.notes]
    here = ", ".join(sorted(host.interfaces)) or "none"
    selected = parsed.selected(host.interfaces)
    if not selected:
        return found + [error(var.name, f"'{value}' selects no interface on this host (here: "
                              f"{here}): NCCL finds no socket interface and bootstrap fails",
                              "name an interface `ip -brief addr` lists on every node, e.g. "
                              "=eth0")]
    if parsed.exclude:
        return found
    matched = parsed.matched(host.interfaces)
    for entry, names in matched.items():
        if not names:
            found.append(info(var.name, f"'{entry}' matches no interface here (fine if other "
                              "nodes have it)"))
    if not parsed.exact:
        edit = None
        if all(names == [entry] for entry, names in matched.items()):
            edit = Edit("set", parsed.render(exact=True), "exact name, not a prefix")
        found.append(info(var.name, f"prefix match: '{value}' selects {', '.join(selected)} here, "
                          "and any longer name that starts the same elsewhere (eth0 also matches "
                          "eth0.5); setting it also turns off NCCL's own choice",
                          f"'={value}' for exactly those names", edit))
    if selected == ["lo"]:
        found.append(info(var.name, "loopback only: works only while every rank runs on this "
                          "host", "name the cluster network interface for multi-node jobs"))
    return found


def _ib_hca(var: Variable, value: str, env: Mapping[str, str], host: Host) -> list[Finding]:
    parsed = parse_name_list(value, with_ports=True)
    found = [error(var.name, p, "see the syntax: " + var.values) for p in parsed.problems]
    numbered = [n for n, _ in parsed.entries if re.search(r"_\d+$", n)]  # mlx5_1, not mlx5
    if not parsed.exact and numbered:
        name = next((n for n in numbered if not n.endswith("_0")), numbered[0])
        exact = parsed.render(exact=True)
        found.append(warning(var.name, f"prefix match: '{name}' also selects {name}0 to {name}9 "
                             "where they exist", f"{var.name}={exact} (NCCL recommends '=')",
                             Edit("set", exact, "exact HCA names")))
    if not host.hcas:
        found.append(info(var.name, "no InfiniBand devices visible on this host "
                          "(/sys/class/infiniband): names not checked here",
                          "run the check on a GPU node"))
        return found
    if parsed.exclude:
        return found
    if not parsed.selected(host.hcas):
        here = ", ".join(sorted(host.hcas))
        found.append(warning(var.name, f"no HCA here matches (here: {here}):"
                             " NCCL logs 'NET/IB : No device found' and falls back to sockets",
                             "name the HCAs `ibv_devinfo -l` lists"))
    elif not parsed.exact:
        for entry, names in parsed.matched(host.hcas).items():
            if len(names) > 1 and entry not in numbered:
                found.append(info(var.name, f"prefix '{entry}' selects {', '.join(names)} here"))
    return found


def _token_list(tokens: tuple[str, ...]) -> Check:
    def check(var: Variable, value: str, env: Mapping[str, str], host: Host) -> list[Finding]:
        parsed = parse_token_list(value, tokens)
        found = [error(var.name, p + ": NCCL >= 2.24 fails communicator init on it",
                       f"{var.name}: {var.values}") for p in parsed.problems]
        if parsed.per_function:
            found.append(info(var.name, "per-collective syntax needs NCCL >= 2.24"))
        return found
    return check


def _nccl_debug(var: Variable, value: str, env: Mapping[str, str], host: Host) -> list[Finding]:
    level = value.upper()
    if level in ("INFO", "TRACE"):
        return [warning(var.name, f"{level} is for bring-up and debugging, not for a month: it "
                        "logs every init step of every rank (TRACE: every call)",
                        "NCCL_DEBUG=WARN in production; while debugging, INFO narrowed with "
                        "NCCL_DEBUG_SUBSYS (INIT,NET or COLL) and NCCL_DEBUG_FILE=/path/nccl.%h.%p",
                        Edit("set", "WARN", f"{level} is for bring-up only"))]
    if level == "ABORT":
        return [info(var.name, "ABORT is accepted by NCCL's parser but not documented")]
    if level not in var.choices:
        return [error(var.name, f"'{value}' is not a level NCCL knows: it logs nothing",
                      "VERSION, WARN, INFO or TRACE (case does not matter)")]
    return []


def _debug_subsys(var: Variable, value: str, env: Mapping[str, str], host: Host) -> list[Finding]:
    found = [warning(var.name, f"'{t}' is not a subsystem NCCL knows", ", ".join(SUBSYSTEMS))
             for t in parse_subsystems(value)]
    if env.get("NCCL_DEBUG", "").upper() not in ("INFO", "TRACE"):
        found.append(info(var.name, "filters INFO output only: without NCCL_DEBUG=INFO it changes "
                          "nothing"))
    return found


def _path_checks(var: Variable, value: str) -> list[Finding]:
    if value.startswith("~"):
        return [error(var.name, "NCCL does not expand '~'", "write an absolute path")]
    return []


def _topo_file(var: Variable, value: str, env: Mapping[str, str], host: Host) -> list[Finding]:
    found = _path_checks(var, value)
    if found:
        return found
    path, comment = Path(value), Edit("comment", reason="file missing or unreadable here")
    if not path.is_file():
        return [error(var.name, f"{value} does not exist here: NCCL does not fail, it logs "
                      "'Could not open XML topology file' and detects the topology itself, so the "
                      "setting is silently ignored", "create it (NCCL_TOPO_DUMP_FILE on a good "
                      "node writes one) or drop the line", comment)]
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_TOPO_BYTES)
    except OSError as exc:
        return [error(var.name, f"cannot read {value}: {exc.strerror}", "make it readable by "
                      "the job's user", comment)]
    try:
        root = ElementTree.fromstring(data)
    except ElementTree.ParseError as exc:
        return [error(var.name, f"{value} is not valid XML ({exc}): NCCL fails to load it",
                      "regenerate it with NCCL_TOPO_DUMP_FILE", comment)]
    if root.tag != "system":
        return [warning(var.name, f"root element is <{root.tag}>: NCCL expects <system "
                        "version=...>", "regenerate it with NCCL_TOPO_DUMP_FILE")]
    return []


def _output_file(var: Variable, value: str, env: Mapping[str, str], host: Host) -> list[Finding]:
    found = _path_checks(var, value)
    parent = Path(value).parent
    if not found and "%" not in str(parent) and not parent.is_dir():
        found.append(warning(var.name, f"directory {parent} does not exist here: the file cannot "
                             "be created", f"mkdir -p {parent}"))
    if var.name == "NCCL_DEBUG_FILE" and "%p" not in value and not value.startswith("/dev/"):
        found.append(info(var.name, "one file for every process: NCCL's docs warn output may be "
                          "lost or corrupted", f"{value}.%h.%p"))
    return found


KIND_CHECKS: dict[str, Check] = {
    "int": _integer, "bool": _boolean, "enum": check_enum, "level": _level, "hca-list": _ib_hca,
    "algo-list": _token_list(ALGORITHMS), "proto-list": _token_list(PROTOCOLS),
    "subsys-list": _debug_subsys, "path": _output_file,
}
NAME_CHECKS: dict[str, Check] = {
    "NCCL_SOCKET_IFNAME": _socket_ifname, "NCCL_DEBUG": _nccl_debug, "NCCL_TOPO_FILE": _topo_file,
}
