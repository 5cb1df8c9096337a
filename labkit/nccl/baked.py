"""Host facts baked into a program's code as defaults: an interface or HCA name that Python source
sets when the user has not.

A job script's ``export NCCL_SOCKET_IFNAME=ens5`` is one cluster's own config: the interface is a
fact of that cluster's nodes, which the checker reports as an info to check there
(``labkit.nccl.hostfacts``). A default in a program's code is different: the code runs on every
host its users have, and an interface (or HCA) name is right only on the hosts that have it. On
the others gloo finds no such interface and fails ("Unable to find address for: eth0"), NCCL
finds no interface to bootstrap on, or no IB device and falls back to sockets.

``baked_defaults(text)`` finds exactly these forms in Python source (a diff's ``+`` or context
lines included), and nothing else:

- ``os.environ["NAME"] = "value"`` on a line after ``if "NAME" not in os.environ:`` (or ``if not
  os.environ.get("NAME"):``, ``if os.getenv("NAME") is None:``), within three lines, or on the
  same line after the colon;
- ``os.environ.setdefault("NAME", "value")``, and ``os.environ["NAME"] = os.environ.get("NAME",
  "value")`` (or ``os.getenv``), which mean the same;
- ``os.environ["NAME"] = param`` (or ``os.environ.setdefault("NAME", param)``) in the body of a
  ``def`` whose parameter ``param`` has a string literal as its default.

``baked_findings`` turns those of ``HOST_NAMED`` (NCCL_SOCKET_IFNAME, NCCL_OOB_NET_IFNAME,
GLOO_SOCKET_IFNAME, NCCL_IB_HCA) whose value selects names (not an exclusion such as
``^docker0,lo``, which suits every host) into a warning that says it is a default baked into
code and what to do instead, in place of the host-fact info. An unguarded ``os.environ[...] =``
in a script, an ``export`` in a job script, a YAML ``env:`` are a host's own config: they stay
infos.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from labkit.nccl.context import Context
from labkit.nccl.findings import Finding, warning
from labkit.nccl.hostfacts import FIND_INTERFACES, ON_THE_NODE, UTILS
from labkit.nccl.registry import REGISTRY
from labkit.nccl.shellwords import computed
from labkit.nccl.syntax import PLACEHOLDER, parse_name_list

# What an interface or HCA name that the host lacks does there, with the source that says so.
HOST_NAMED = {
    "GLOO_SOCKET_IFNAME": ("interface", "gloo", "gloo raises 'Unable to find address for: "
                           "{value}' and init fails", ""),
    "NCCL_SOCKET_IFNAME": ("interface", "NCCL", "NCCL finds no socket interface to bootstrap on "
                           "and init fails", FIND_INTERFACES),
    "NCCL_OOB_NET_IFNAME": ("interface", "NCCL", "the name selects no interface there",
                            FIND_INTERFACES),
    "NCCL_IB_HCA": ("HCA", "NCCL", "NCCL finds no IB device and falls back to TCP sockets", UTILS),
}
_Q = r"""(["'])"""
_NAME = r"([A-Z_][A-Z0-9_]*)"
_GUARD = re.compile(
    r"""[+ ]?\s*if\s+(?:(["'])(?P<a>[A-Z_][A-Z0-9_]*)\1\s+not\s+in\s+os\.environ"""
    r"""|not\s+os\.(?:environ\.get|getenv)\(\s*(["'])(?P<b>[A-Z_][A-Z0-9_]*)\3\s*\)"""
    r"""|os\.(?:environ\.get|getenv)\(\s*(["'])(?P<c>[A-Z_][A-Z0-9_]*)\5\s*\)\s+is\s+None)"""
    r"""\s*:(?P<rest>.*)""")
_SET = re.compile(r"os\.environ\[\s*" + _Q + _NAME + r"\1\s*\]\s*=\s*" + _Q + r"([^\"'\n]*)\3")
_SETDEFAULT = re.compile(r"os\.environ\.setdefault\(\s*" + _Q + _NAME + r"\1\s*,\s*" + _Q
                         + r"([^\"'\n]*)\3\s*\)")
_GET_DEFAULT = re.compile(r"os\.environ\[\s*" + _Q + _NAME + r"\1\s*\]\s*=\s*os\.(?:environ\.get"
                          r"|getenv)\(\s*" + _Q + r"\2\3\s*,\s*" + _Q + r"([^\"'\n]*)\4\s*\)")
_DEF = re.compile(r"([+ ]?\s*)(?:async\s+)?def\s+(\w+)\s*\(")
_PARAM = re.compile(r"(?<!\w)(\w+)(?:\s*:\s*[\w\[\]|.]+(?: ?\| ?[\w\[\].]+)*)?\s*=\s*" + _Q + r"([^\"'\n]*)\2")
_SET_PARAM = re.compile(r"os\.environ(?:\[\s*" + _Q + _NAME + r"\1\s*\]\s*=\s*(\w+)\s*(?:#.*)?$"
                        r"|\.setdefault\(\s*" + _Q + _NAME + r"\4\s*,\s*(\w+)\s*\))")


@dataclass(frozen=True)
class Baked:
    """A value Python source sets as a default for an environment variable: ``how`` says which
    form (a guard, setdefault, a function's default argument)."""

    name: str
    value: str
    line: int
    how: str


def baked_defaults(text: str) -> tuple[Baked, ...]:
    """The defaults ``text`` bakes into code (see the module docstring), in line order."""
    if "os." not in text:
        return ()
    lines = text.split("\n")
    found: list[Baked] = []
    for i, line in enumerate(lines):
        guard = _GUARD.match(line)
        if guard:
            name = guard.group("a") or guard.group("b") or guard.group("c")
            for j, later in enumerate([guard.group("rest"), *lines[i + 1:i + 4]]):
                set_ = _SET.search(later)
                if set_ and set_.group(2) == name:
                    found.append(Baked(name, set_.group(4), i + 1 + j, "set only where the "
                                       f"environment lacks it, under the 'if' on line {i + 1}"))
                    break
        for match in _SETDEFAULT.finditer(line):
            found.append(Baked(match.group(2), match.group(4), i + 1, "os.environ.setdefault"))
        for match in _GET_DEFAULT.finditer(line):
            found.append(Baked(match.group(2), match.group(5), i + 1,
                               "the default of an os.environ.get that is set back"))
        header = _DEF.match(line)
        if header:
            found += _argument_defaults(lines, i, header)
    return tuple(sorted(set(found), key=lambda b: b.line))


def _argument_defaults(lines: list[str], i: int, header: re.Match[str]) -> list[Baked]:
    """``os.environ["NAME"] = param`` in the body of the ``def`` on line ``i``, where ``param``
    defaults to a string literal."""
    signature, end = "", i
    while end < len(lines) and end < i + 12:
        signature += lines[end]
        if re.search(r"\)\s*(?:->[^:]*)?:\s*(?:#.*)?$", lines[end]):
            break
        end += 1
    defaults = {m.group(1): m.group(3) for m in _PARAM.finditer(signature[header.end():])}
    if not defaults:
        return []
    indent = len(header.group(1).lstrip("+"))
    found = []
    for n in range(end + 1, min(len(lines), end + 200)):
        body = lines[n][1:] if lines[n][:1] in "+ " and lines[i][:1] in "+ " else lines[n]
        if body.strip() and len(body) - len(body.lstrip()) <= indent - (lines[i][:1] in "+ "):
            break
        match = _SET_PARAM.search(body)
        param = match and (match.group(3) or match.group(6))
        if match and param in defaults:
            found.append(Baked(match.group(2) or match.group(5), defaults[param], n + 1,
                               f"the default of argument '{param}' of {header.group(2)}()"))
    return found


def baked_findings(baked: Iterable[Baked], ctx: Context, findings: list[Finding]
                   ) -> list[Finding]:
    """``findings`` with a warning for each host-named default baked into code, which takes the
    place of the info that says to check the name on the node."""
    out = list(findings)
    for item in baked:
        var = REGISTRY.get(item.name)
        if var is None or item.name not in HOST_NAMED or not item.value or \
                computed(item.value) or PLACEHOLDER.search(item.value):
            continue
        if item.name != "GLOO_SOCKET_IFNAME" and parse_name_list(
                item.value, with_ports=item.name == "NCCL_IB_HCA").exclude:
            continue  # an exclusion ('^docker0,lo') suits every host
        what, who, effect, source = HOST_NAMED[item.name]
        out = [f for f in out if not (f.variable == item.name and f.severity == "info"
                                      and f.fix.startswith(ON_THE_NODE))]
        out.append(warning(item.name, f"'{item.value}' is a default baked into code (line "
                           f"{item.line}, {item.how}): the code runs on every host its users have, and "
                           f"an {what} name is right only on the hosts that have it; on a host "
                           f"without '{item.value}' {effect.format(value=item.value)}",
                           f"leave {item.name} unset so that {who} picks an {what} itself, or "
                           "take the name from the user (an option, or the environment they "
                           "set), not from the code", source=source or var.doc))
    return out
