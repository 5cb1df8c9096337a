"""Checks of values that name things on a node: interfaces, RDMA devices, files.

Syntax is checked everywhere (NCCL ``parseStringList`` / ``matchIf`` in ``src/misc/utils.cc``:
entries are prefixes compared with ``strncmp``, ``=`` makes them exact, ``^`` excludes; there
are no wildcards). Whether the names exist is a fact of the node: it is checked only when the
host is known (``Context.host``: this machine for the live environment or ``--this-host``, or
the nodes a caller describes); otherwise an info says how to check it there. One thing is known
without the host: the loopback interface does not reach other nodes, so ``lo`` alone in a job
that the paste runs on several nodes (``Context.nodes``) is a warning.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from labkit.nccl.context import Context
from labkit.nccl.debugfile import debug_file_name
from labkit.nccl.findings import Edit, Finding, error, info, warning
from labkit.nccl.shellwords import computed
from labkit.nccl.syntax import NameList, parse_name_list
from labkit.nccl.variable import NCCL_DOC, NCCL_GITHUB, Variable

UTILS = NCCL_GITHUB + "src/misc/utils.cc"
FIND_INTERFACES = NCCL_GITHUB + "src/misc/socket.cc#L190-L229"
XML_CC = NCCL_GITHUB + "src/graph/xml.cc#L409-L422"
MAX_TOPO_BYTES = 8 << 20
LOOPBACK_ISSUE = "https://github.com/NVIDIA/nccl/issues/286"
LOOPBACK_PICKED = "https://github.com/horovod/horovod/pull/700"
LOOPBACK_RFC = "https://www.rfc-editor.org/rfc/rfc1122#section-3.2.1.3"
TILDE_EXPANSION = "https://www.gnu.org/software/bash/manual/bash.html#Tilde-Expansion"
# Where NCCL says, or shows in its source, that it takes a path as given: '~' stays a '~'.
OPENED_AS_GIVEN = {
    "NCCL_DEBUG_FILE": ("NCCL's description of NCCL_DEBUG_FILE says 'This does not accept the ~ "
                        "character as part of the path' (src/debug.cc)",
                        NCCL_GITHUB + "src/debug.cc#L103-L109"),
    "NCCL_CONF_FILE": ("NCCL's docs say of NCCL_CONF_FILE 'This does not accept the ~ character "
                       "as part of the path', and setEnvFile (src/misc/param.cc) passes it to "
                       "fopen() as it is", f"{NCCL_DOC}#nccl-conf-file"),
    "NCCL_TOPO_FILE": ("ncclTopoGetXmlFromFile (src/graph/xml.cc) passes the path to fopen() as "
                       "it is, and fopen() expands nothing",
                       NCCL_GITHUB + "src/graph/xml.cc#L409-L417"),
    "NCCL_TOPO_DUMP_FILE": ("ncclTopoDumpXmlToFile (src/graph/xml.cc) passes the path to fopen() "
                            "as it is, and fopen() expands nothing",
                            NCCL_GITHUB + "src/graph/xml.cc#L295-L300"),
}
ON_THE_NODE = ("run `labkit nccl check` on the node (or add --this-host when this file is for "
               "this machine)")


def _syntax(var: Variable, value: str, parsed: NameList, what: str) -> list[Finding]:
    """What is wrong on any host: misplaced '^'/'=', blanks, wildcards, bad ports."""
    found = [error(var.name, p, "see the syntax: " + var.values, source=UTILS)
             for p in parsed.problems]
    found += [warning(var.name, n, "see the syntax: " + var.values, source=UTILS)
              for n in parsed.notes]
    for raw in parsed.spaced:
        found.append(warning(var.name, f"'{raw}' has a blank: NCCL compares it as part of the "
                             "name, so that entry matches nothing", "remove the blanks",
                             Edit("set", value.replace(" ", ""), "blanks removed"), source=UTILS))
    if parsed.globs:
        fixed = value.replace("*", "").replace("?", "")
        every = not parsed.exclude and len(parsed.globs) == len(parsed.entries)
        effect = (f"so no {what} matches on any host" if every else
                  f"so '{parsed.globs[0]}' excludes nothing" if parsed.exclude else
                  f"so '{parsed.globs[0]}' matches nothing")
        tail = "" if not every else (": NCCL finds no socket interface and bootstrap fails"
                                     if what == "interface" else
                                     ": NCCL finds no IB device and falls back to TCP sockets")
        text = f"NCCL matches prefixes and compares '*' literally (no wildcards), {effect}{tail}"
        make = error if every else warning
        found.append(make(var.name, text, f"{var.name}={fixed} (a prefix already matches every "
                          "longer name)", Edit("set", fixed, "prefixes, no '*'"), source=UTILS))
    return found


def socket_ifname(var: Variable, value: str, ctx: Context) -> list[Finding]:
    """NCCL_SOCKET_IFNAME: syntax anywhere; which interfaces it selects, on a known host."""
    parsed = parse_name_list(value, with_ports=False)
    found = _syntax(var, value, parsed, "interface")
    if any(f.severity == "error" for f in found):
        return found
    interfaces = ctx.host.interfaces if ctx.host else None
    if parsed.exclude and (interfaces is None or "lo" in interfaces):
        found += _loopback_left(var, value, parsed)
    only_lo = parsed.selected(set(interfaces)) == ["lo"] if interfaces is not None else \
        not parsed.exclude and all(name == "lo" for name, _ in parsed.entries)
    if only_lo and (ctx.nodes or 0) > 1:
        return found + [loopback_across_nodes(var, value, ctx.nodes or 0)]
    if interfaces is None:
        prefix = "" if parsed.exact or parsed.exclude else (
            " As a prefix it also selects longer names that start the same (eth0: eth0.5).")
        return found + [info(var.name, f"'{value}' names interfaces of the node it runs on: not "
                             f"checked against this machine.{prefix}", ON_THE_NODE + "; `ip "
                             "-brief addr` there lists them", source=UTILS)]
    here = ", ".join(sorted(interfaces)) or "none"
    selected = parsed.selected(set(interfaces))
    where = ctx.host.label if ctx.host else "this host"
    if not selected:
        return found + [error(var.name, f"'{value}' selects no interface on {where} (it has: "
                              f"{here}): NCCL finds no socket interface and bootstrap fails",
                              "name an interface `ip -brief addr` lists on every node, e.g. "
                              "=eth0", source=UTILS)]
    if parsed.exclude:
        return found
    matched = parsed.matched(set(interfaces))
    for entry, names in matched.items():
        if not names:
            found.append(info(var.name, f"'{entry}' matches no interface here (fine if other "
                              "nodes have it)", source=UTILS))
    if not parsed.exact:
        edit = None
        if all(names == [entry] for entry, names in matched.items()):
            edit = Edit("set", parsed.render(exact=True), "exact name, not a prefix")
        found.append(info(var.name, f"prefix match: '{value}' selects {', '.join(selected)} here, "
                          "and any longer name that starts the same elsewhere (eth0 also matches "
                          "eth0.5); setting it also turns off NCCL's own choice",
                          f"'={value}' for exactly those names", edit, source=UTILS))
    if selected == ["lo"]:
        found.append(info(var.name, "loopback only: works only while every rank runs on this "
                          "host", "name the cluster network interface for multi-node jobs",
                          source=UTILS))
    return found


def loopback_across_nodes(var: Variable, value: str, nodes: int) -> Finding:
    """``lo`` alone in a job the paste runs on several nodes: a warning, since what spans the
    nodes (the training itself, or only independent jobs per node) is not always in the paste."""
    if var.name == "GLOO_SOCKET_IFNAME":
        what, source = ("gloo binds to lo and gives the other ranks its address, 127.0.0.1, "
                        "which never leaves a host (RFC 1122, 3.2.1.3)"), LOOPBACK_RFC
    else:
        what, source = ("NCCL uses only the interfaces NCCL_SOCKET_IFNAME selects for bootstrap "
                        "and socket traffic, so ranks on other nodes are told to connect to "
                        "127.0.0.1; "
                        "NCCL's maintainer: 'lo is loopback so you won't be able to use it "
                        "between two nodes' (NVIDIA/nccl#286)"), LOOPBACK_ISSUE
    return warning(var.name, f"'{value}' selects only the loopback interface, and the paste "
                   f"runs the job on {nodes} nodes: {what}. Fine only while all ranks that talk "
                   "to each other share one node", "name the interface the nodes reach each "
                   f"other on (e.g. {var.name}=eth0), or leave it unset", source=source)


def _loopback_left(var: Variable, value: str, parsed: NameList) -> list[Finding]:
    """An exclude list without lo. NCCL's ncclFindInterfaces (src/misc/socket.cc) uses a set
    NCCL_SOCKET_IFNAME instead of its own order (ib*, then anything but docker*/lo/virbr*, then
    docker*, lo, virbr*); ncclOsFindInterfaces (src/os/linux.cc) walks getifaddrs() in order and
    bootstrap takes the first match (maxIfs 1, src/bootstrap.cc)."""
    left = [name for name in ("lo", "docker", "virbr")
            if not any(parsed.matches(name + ("0" if name != "lo" else ""), e)
                       for e, _ in parsed.entries)]
    if "lo" not in left:
        return []
    also = [f"{n}*" for n in left if n != "lo"]
    fixed = value + ",lo"
    return [warning(var.name, f"'{value}' excludes only what it names, and not lo: a set "
                    "NCCL_SOCKET_IFNAME replaces NCCL's own choice, which skips lo, docker* and "
                    "virbr* while another interface is up, so lo"
                    + (f" (and {', '.join(also)})" if also else "") + " can be picked again. "
                    "NCCL takes interfaces in getifaddrs() order and bootstrap uses the first "
                    "match; lo is interface 1 on Linux and normally listed first, so bootstrap "
                    "can bind 127.0.0.1, which other nodes cannot reach (fine on one node). "
                    "NCCL's maintainer on '^docker0': it 'means we might pick the lo interface' "
                    f"({LOOPBACK_PICKED})",
                    f"NCCL_SOCKET_IFNAME={fixed}, or name the interface to use (e.g. =eth0)",
                    Edit("set", fixed, "exclude lo too"), source=FIND_INTERFACES)]


def ib_hca(var: Variable, value: str, ctx: Context) -> list[Finding]:
    """NCCL_IB_HCA: syntax and prefix pitfalls anywhere; matching HCAs on a known host."""
    parsed = parse_name_list(value, with_ports=True)
    found = _syntax(var, value, parsed, "HCA")
    replaced = ctx.ib_replaced
    numbered = [n for n, _ in parsed.entries if re.search(r"_[1-9]\d*$", n)]  # mlx5_1: mlx5_1x
    if not parsed.exact and numbered and not replaced:
        name = numbered[0]
        exact = parsed.render(exact=True)
        found.append(warning(var.name, f"prefix match: '{name}' also selects {name}0 to {name}9 "
                             "where they exist (NCCL's docs)", f"{var.name}={exact} (NCCL "
                             "recommends '=')", Edit("set", exact, "exact HCA names"),
                             source=var.doc))
    if replaced:
        return found + [info(var.name, f"{replaced.plugin.title} carries the traffic "
                             f"({replaced.evidence}) instead of NCCL's internal IB transport, "
                             "the one that reads NCCL_IB_HCA: it selects nothing the plugin "
                             "uses", "the plugin's own variables choose the NICs",
                             source=replaced.plugin.source)]
    hcas = ctx.host.hcas if ctx.host else None
    if hcas is None:
        return found + [info(var.name, f"'{value}' names RDMA devices of the node: not checked "
                             "against this machine", ON_THE_NODE + "; `ibv_devinfo -l` there "
                             "lists them", source=UTILS)]
    if not hcas:
        found.append(info(var.name, f"no InfiniBand devices visible on {ctx.host.label} "
                          "(/sys/class/infiniband): names not checked here",
                          "run the check on a GPU node", source=UTILS))
        return found
    if parsed.exclude:
        return found
    if not parsed.selected(set(hcas)):
        here = ", ".join(sorted(hcas))
        found.append(warning(var.name, f"no HCA on {ctx.host.label} matches (it has: {here}): "
                             "NCCL logs 'NET/IB : No device found' and falls back to sockets",
                             "name the HCAs `ibv_devinfo -l` lists", source=UTILS))
    elif not parsed.exact:
        for entry, names in parsed.matched(set(hcas)).items():
            if len(names) > 1 and entry not in numbered:
                found.append(info(var.name, f"prefix '{entry}' selects {', '.join(names)} here",
                                  source=UTILS))
    return found


def path_syntax(var: Variable, value: str, ctx: Context) -> list[Finding]:
    """A path that opens with '~': the shell expands it in an unquoted assignment
    (``Context.tilde``); otherwise it reaches NCCL as it is, and NCCL opens it as given."""
    if var.owner != "nccl" or not value.startswith("~"):
        return []
    if var.name in ctx.tilde:
        return [info(var.name, f"the shell expands the '~' in '{value}' (unquoted, in an "
                     "assignment) to the home directory of the user it runs as, before NCCL sees "
                     "the value; a launcher passes that path on to every node as it is",
                     source=TILDE_EXPANSION)]
    why, source = OPENED_AS_GIVEN.get(var.name, (
        "NCCL passes its paths to fopen() as they are", var.link))
    home = value.split("/", 1)[0]
    return [error(var.name, f"'{value}' reaches NCCL with its '~' (quoted, or not set by a "
                  f"shell), and NCCL does not expand it: {why}. It names a directory literally "
                  f"called '{home}' under the working directory, not a home directory",
                  "write an absolute path (or an unquoted ~ in a shell assignment: export "
                  f"{var.name}=~/...)", source=source)]


def _local_path(var: Variable, value: str, ctx: Context) -> str:
    """The path the process opens: the shell has expanded a leading '~' (``Context.tilde``)."""
    return os.path.expanduser(value) if var.name in ctx.tilde else value


def topo_file(var: Variable, value: str, ctx: Context) -> list[Finding]:
    """NCCL_TOPO_FILE: a missing file is ignored with an INFO line; bad XML fails init."""
    found = path_syntax(var, value, ctx)
    if any(f.severity == "error" for f in found):
        return found
    if ctx.host is None or not ctx.host.files:
        return found + [info(var.name, f"{value} is a file on the node: not checked here (NCCL "
                             "ignores a file it cannot open, and fails on one that is not valid "
                             "XML)", ON_THE_NODE, source=XML_CC)]
    path = Path(_local_path(var, value, ctx))
    comment = Edit("comment", reason="file missing or unreadable here")
    if not path.is_file():
        return [warning(var.name, f"{value} does not exist here: NCCL does not fail, it logs "
                        "'Could not open XML topology file' and detects the topology itself, so "
                        "the setting is silently ignored", "create it (NCCL_TOPO_DUMP_FILE on a "
                        "good node writes one) or drop the line", comment, source=XML_CC)]
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_TOPO_BYTES)
    except OSError as exc:
        return [warning(var.name, f"cannot read {value}: {exc.strerror}: NCCL ignores it",
                        "make it readable by the job's user", comment, source=XML_CC)]
    try:
        root = ElementTree.fromstring(data)
    except ElementTree.ParseError as exc:
        return [error(var.name, f"{value} is not valid XML ({exc}): NCCL fails to load it and "
                      "communicator init fails", "regenerate it with NCCL_TOPO_DUMP_FILE",
                      comment, source=XML_CC)]
    if root.tag != "system":
        return [warning(var.name, f"root element is <{root.tag}>: NCCL expects <system "
                        "version=...>", "regenerate it with NCCL_TOPO_DUMP_FILE", source=XML_CC)]
    return []


def output_file(var: Variable, value: str, ctx: Context) -> list[Finding]:
    """Files NCCL/PyTorch write: '~', a missing directory (known host), one file per process
    (NCCL_DEBUG_FILE's conversions: ``labkit.nccl.debugfile``)."""
    found = path_syntax(var, value, ctx)
    parent = Path(_local_path(var, value, ctx)).parent
    literal_tilde = any(f.severity == "error" for f in found)
    if not literal_tilde and ctx.host is not None and ctx.host.files and "%" not in str(parent) \
            and not computed(value) and not parent.is_dir():
        found.append(warning(var.name, f"directory {parent} does not exist here: the file cannot "
                             "be created", f"mkdir -p {parent}", source=var.link))
    if var.name == "NCCL_DEBUG_FILE" and not value.startswith("/dev/"):
        found += debug_file_name(var, value)  # %h, %p, %% and nothing else (labkit.nccl.debugfile)
    return found


def gloo_ifname(var: Variable, value: str, ctx: Context) -> list[Finding]:
    """GLOO_SOCKET_IFNAME: exact names (ProcessGroupGloo); they must exist on a known host."""
    names = [n for n in value.split(",") if n]
    if any(n.startswith(("^", "=")) for n in names):
        return [error(var.name, "gloo takes exact interface names, without NCCL's '^'/'=' syntax: "
                      f"it looks for an interface literally named '{names[0]}'",
                      "GLOO_SOCKET_IFNAME=eth0 (or eth0,eth1)", source=var.doc)]
    found = []
    interfaces = ctx.host.interfaces if ctx.host else None
    if names == ["lo"] and (ctx.nodes or 0) > 1:
        return [loopback_across_nodes(var, value, ctx.nodes or 0)]
    if interfaces is None:
        found.append(info(var.name, f"'{value}' names interfaces of the node: not checked "
                          "against this machine", ON_THE_NODE, source=var.doc))
    else:
        found += [error(var.name, f"no interface '{n}' on {ctx.host.label}: gloo raises 'Unable to "
                        f"find address for: {n}'", "name an interface that exists on every node",
                        source=var.doc) for n in names if n not in interfaces]
    if len(names) > 1:
        found.append(info(var.name, f"gloo round-robins over {len(names)} interfaces; every "
                          "process must list the same number", source=var.doc))
    return found
