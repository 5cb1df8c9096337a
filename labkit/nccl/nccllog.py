"""NCCL's own log lines in a paste: the settings they echo, and the network they show in use.

NCCL prints ``host:pid:tid [dev] NCCL INFO <message>`` (``src/debug.cc``); launchers and people
often change the prefix, so each message is looked for after any prefix (or none). At v2.30.7-1
these messages echo a variable the environment set, each read by its own format:

- ``"%s set by environment to %lld."`` (``ncclLoadParam``, ``src/misc/param.cc``; ``%lu.`` in
  ``src/include/param.h`` of 2.7), for every integer parameter, and ``"NCCL_COLLNET_ENABLE set by
  environment to %d."`` (``src/init.cc``; ``%s.`` from 2.12 to 2.26): the full stop belongs to the
  format, so it is dropped (``NCCL_IB_RETRY_CNT set by environment to 15.`` is 15). The number is
  what ``strtoll`` made of the setting, which is what NCCL uses;
- ``"NCCL_X set by environment to %s"`` for string settings (NCCL_SOCKET_IFNAME, NCCL_ALGO,
  NCCL_PROTO, NCCL_TOPO_FILE, NCCL_*_PLUGIN, NCCL_IB_ADDR_*, NCCL_COMM_ID ...) and ncclGetLevel's
  ``"%s set by environment to %s"`` (``src/graph/paths.cc``, the level's name, also for a legacy
  number): no full stop, so a final ``.`` there is the value's own;
- ``"NCCL_SOCKET_IFNAME set to %s"`` (``src/misc/socket.cc``), ``"NCCL_IB_HCA set to %s"``
  (``src/transport/net_ib/init.cc``), ``"NCCL_OOB_NET_IFNAME set to %s"`` (``src/bootstrap.cc``);
- ``"Comm config <field> reset to NCCL_X=%d"`` and ``"... reset to %d by NCCL_X=%d"``
  (``src/init.cc``);
- ``"Invalid value %s for %s, using default %lld."`` (``src/misc/param.cc``): the setting as
  given, which NCCL replaced by its default (the checker says what is wrong with it).

A value is one word: more words after it make the line prose, not a log message. The settings
are read with the shape ``NCCL log`` and a note. Before 2.23.4 ncclGetLevel printed ``NCCL_P2P_LEVEL
set by environment to LOC`` also for NCCL_P2P_DISABLE=1, so that line is not read where the paste
sets NCCL_P2P_DISABLE=1 (``log_settings``). ``shown_nets(text)`` gives the networks such a
log shows: ``"Using network %s"`` (``src/init.cc``) names the one a communicator uses; without
it, ``"NET/Plugin: Loaded net plugin %s"`` (``src/plugin/net/``), the IB/SHARP plugin's ``"Plugin
Path : %s"`` and ``"P2P plugin %s"`` (nccl-rdma-sharp-plugins ``src/p2p_plugin.c``), channels
``"via NET/<name>/..."`` and a net's own ``"NET/<name> : ..."`` lines show what was loaded.
"""

from __future__ import annotations

import re

from labkit.nccl.commands import Found
from labkit.nccl.parsed import Assignment

SHAPE = "NCCL log"
NOTE = ("read from NCCL's own log lines ('NAME set by environment to VALUE' and the like): the "
        "values NCCL reports it read from the environment; a full stop that NCCL's format adds "
        "after a number is not part of the value (src/misc/param.cc: '%s set by environment to "
        "%lld.')")
DISABLE_NOTE = ("'NCCL_P2P_LEVEL set by environment to LOC' not read as a setting: NCCL before "
                "2.23.4 printed it for NCCL_P2P_DISABLE=1, which the paste sets "
                "(src/graph/paths.cc, ncclGetLevel)")
_NAME = r"[A-Z][A-Z0-9]*_[A-Z0-9_]*[A-Z0-9]"
_SET_BY_ENVIRONMENT = re.compile(rf"(?:^|(?<=\s))({_NAME}) set by environment to (\S+)\s*$")
_SET_TO = re.compile(r"(?:^\s*|\bNCCL INFO )(NCCL_SOCKET_IFNAME|NCCL_IB_HCA|NCCL_OOB_NET_IFNAME)"
                     r" set to (\S+)\s*$")
_RESET = re.compile(rf"\bComm config \w+ reset to (?:-?\d+ by )?({_NAME})=(\S+)\s*$")
_INVALID = re.compile(rf"\bInvalid value (.*) for ({_NAME}), using default -?\d+\.\s*$")
_INTEGER_STOP = re.compile(r"(-?\d+)\.")
ALWAYS_STOP = {"NCCL_COLLNET_ENABLE"}  # "%s." in 2.12-2.26, "%d." since 2.27.5: the format's '.'

_USING = re.compile(r"(?:\bNCCL INFO |^[ \t]*)Using network (\S.*?)[ \t]*$", re.MULTILINE)
_LOADED = [re.compile(r"\bNET/Plugin ?: Loaded net plugin (.+?)(?: \(v\d+\))?[ \t]*$",
                      re.MULTILINE),
           re.compile(r"\bPlugin Path : (\S+)"),
           re.compile(r"\bP2P plugin (?:v\d+ )?(\S+)"),
           re.compile(r"\bNET/(?!Plugin\b)([A-Za-z][\w-]*)(?:/|\s?:)")]  # via NET/IBext_v8/1, NET/IBext :


def read_line(line: str) -> list[Found] | None:
    """The settings an NCCL log line echoes (see the module docstring); None when it is not
    one of those messages."""
    if " to " not in line and "Invalid value" not in line:
        return None
    match = _SET_BY_ENVIRONMENT.search(line)
    if match:
        return [Found(match.group(1), echoed_value(*match.groups()), SHAPE)]
    match = _SET_TO.search(line) or _RESET.search(line)
    if match:
        return [Found(match.group(1), match.group(2), SHAPE)]
    match = _INVALID.search(line)
    if match:
        return [Found(match.group(2), match.group(1), SHAPE)]
    return None


def echoed_value(name: str, printed: str) -> str:
    """The value in ``NAME set by environment to <printed>``: a number's full stop is the
    format's (``%lld.``), and so is NCCL_COLLNET_ENABLE's (``%s.`` in 2.12-2.26); a string setting
    is printed with none, so a final ``.`` there is the value's own."""
    stop = _INTEGER_STOP.fullmatch(printed)
    if stop:
        return stop.group(1)
    return printed[:-1] if name in ALWAYS_STOP and printed.endswith(".") else printed


def log_settings(assignments: list[Assignment]) -> tuple[list[Assignment],
                                                           list[tuple[int, str]]]:
    """``assignments`` as a paste with NCCL log lines sets them, and the notes on those: the log
    lines' note (``NOTE``), on the first one read; and without ``NCCL_P2P_LEVEL set by environment
    to LOC`` when the paste sets NCCL_P2P_DISABLE=1 and not NCCL_P2P_LEVEL: before 2.23.4
    ncclGetLevel printed that line under the NCCL_P2P_LEVEL name for a value that came from
    NCCL_P2P_DISABLE=1 (from 2.23.4 on it names NCCL_P2P_DISABLE)."""
    notes: list[tuple[int, str]] = []
    set_here = {a.name: a.value for a in assignments if a.shape != SHAPE}
    if (set_here.get("NCCL_P2P_DISABLE") or "").strip() == "1" and \
            "NCCL_P2P_LEVEL" not in set_here:
        echoes = [a for a in assignments if a.shape == SHAPE and a.name == "NCCL_P2P_LEVEL"
                  and a.value == "LOC"]
        assignments = [a for a in assignments if a not in echoes]
        notes += [(echoes[0].line, DISABLE_NOTE)] if echoes else []
    first = next((a.line for a in assignments if a.shape == SHAPE), None)
    return assignments, notes + ([(first, NOTE)] if first is not None else [])


def shown_nets(text: str) -> tuple[tuple[str, str], ...]:
    """The networks NCCL's log lines in ``text`` show, each with what shows it: the ones
    ``Using network`` names when the log has that line, else the plugins it shows loaded."""
    if "NCCL" not in text and "Using network" not in text:
        return ()
    using = {m.group(1): f"the log's 'Using network {m.group(1)}'"
             for m in _USING.finditer(text)}
    if using:
        return tuple(using.items())
    shown: dict[str, str] = {}
    for pattern in _LOADED:
        for match in pattern.finditer(text):
            shown.setdefault(match.group(1), f"the log's '{_message(text, match.start())}'")
    return tuple(shown.items())


def _message(text: str, at: int) -> str:
    """The log line of ``text`` around ``at``, without NCCL's ``host:pid:tid [dev] NCCL INFO``
    prefix, shortened."""
    end = text.find("\n", at)
    line = text[text.rfind("\n", 0, at) + 1:len(text) if end < 0 else end]
    message = line.split(" NCCL INFO ", 1)[-1].strip()
    return message if len(message) <= 100 else message[:97] + "..."
