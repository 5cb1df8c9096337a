"""Parsers for the value syntaxes NCCL and PyTorch accept, written to mirror their source.

- interface and HCA lists: NCCL ``parseStringList``/``matchIfList`` (``src/misc/utils.cc``): a
  leading ``^`` excludes, then ``=`` makes names exact, else each entry is a prefix; ``:port``
  follows a name.
- P2P/GDR levels: NCCL ``ncclGetLevel`` (``src/graph/paths.cc``): ``strcmp`` against the path
  names (case-sensitive), else a leading digit is read as a legacy integer, clamped to SYS.
- algorithm/protocol lists: NCCL ``parseList`` (``src/graph/tuning.cc``, 2.24+): ``;`` separates
  ``function:list`` pairs, ``,`` separates tokens, ``^`` inverts, all case-insensitive.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

PATH_NAMES = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS")  # topo.cc
LEGACY_LEVELS = ("LOC", "PIX", "PXB", "PHB", "SYS", "SYS")  # paths.cc levelsOldToNew
ALGORITHMS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
# First release that knows each algorithm token (env docs' NCCL_ALGO table; CollNet: 2.5 to 2.13).
ALGORITHM_SINCE = {"tree": "2.5", "ring": "2.5", "collnet": "2.5", "collnetdirect": "2.14",
                   "collnetchain": "2.14", "nvls": "2.17", "nvlstree": "2.18", "pat": "2.23"}
ALGORITHM_UNTIL = {"collnet": "2.14"}  # first release that no longer knows it
PROTOCOLS = ("LL", "LL128", "Simple")
FUNCTIONS = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")
# Which algorithms NCCL's tuning model can run per function (src/graph/tuning.cc, 2.23 to 2.30):
# Broadcast and Reduce only Ring; AllGather/ReduceScatter Ring, PAT, NVLS, CollNetDirect;
# AllReduce everything but PAT. Beyond Ring, each needs hardware (NVSwitch, SHARP, 1 GPU/node).
SUPPORTED = {"broadcast": {"ring"}, "reduce": {"ring"},
             "allgather": {"ring", "pat", "nvls", "collnetdirect"},
             "reducescatter": {"ring", "pat", "nvls", "collnetdirect"},
             "allreduce": {"ring", "tree", "collnetdirect", "collnetchain", "nvls", "nvlstree"}}
SUBSYSTEMS = ("INIT", "COLL", "P2P", "SHM", "NET", "GRAPH", "TUNING", "ENV", "ALLOC", "ALLOC_HOST",
              "CALL", "PROXY", "NVLS", "BOOTSTRAP", "REG", "PROFILE", "RAS", "DESTROY", "ALL")
# A placeholder to fill in: <IP_address_of_node_1>, <your-hca>, <node 1's IP>. No NCCL, gloo or
# torch value has a "<" in it, and a shell reads an unquoted "<" as a redirection.
PLACEHOLDER = re.compile(r"<[A-Za-z_][^<>\n]*>")
# A usage pattern: alternatives in brackets, as docs and answers write "one of these"
# ([INIT|COLL|NET], {0|1}).
CHOICES = re.compile(r"[\[{][^\[\]{}|\n]+(?:\|[^\[\]{}|\n]+)+[\]}]")
TORCH_TRUE = ("y", "yes", "1", "t", "true")  # c10d getCvarBool
TORCH_FALSE = ("n", "no", "0", "f", "false")


@dataclass
class NameList:
    """A parsed NCCL_SOCKET_IFNAME / NCCL_IB_HCA value."""

    exclude: bool
    exact: bool
    entries: list[tuple[str, str]] = field(default_factory=list)  # (name, ":port..." or "")
    problems: list[str] = field(default_factory=list)  # NCCL misreads these
    notes: list[str] = field(default_factory=list)  # NCCL reads these, maybe not as meant
    spaced: list[str] = field(default_factory=list)  # entries with blanks: they match nothing
    globs: list[str] = field(default_factory=list)  # entries with '*' or '?': compared literally

    def matches(self, name: str, entry: str) -> bool:
        return name == entry if self.exact else name.startswith(entry)

    def matched(self, names: set[str]) -> dict[str, list[str]]:
        """For each entry, the names on this host it selects (before ``^`` is applied)."""
        return {entry: sorted(n for n in names if self.matches(n, entry))
                for entry, _ in self.entries}

    def selected(self, names: set[str]) -> list[str]:
        """The names NCCL would use here, ``^`` applied."""
        hit = {n for n in names for e, _ in self.entries if self.matches(n, e)}
        return sorted(names - hit if self.exclude else hit)

    def render(self, *, exact: bool) -> str:
        head = ("^" if self.exclude else "") + ("=" if exact else "")
        return head + ",".join(name + rest for name, rest in self.entries)


def parse_name_list(value: str, *, with_ports: bool) -> NameList:
    """Parse ``[^][=]name[:port...],...`` the way NCCL does, noting what NCCL would misread."""
    text, exclude, exact = value, False, False
    if text.startswith("^"):
        exclude, text = True, text[1:]
    if text.startswith("="):
        exact, text = True, text[1:]
    result = NameList(exclude, exact)
    if text.startswith(("^", "=")):
        result.problems.append(f"'{value}': write '^' before '=' (NCCL reads the rest as a name)")
    for raw in text.split(","):
        if not raw:
            continue
        name, sep, rest = raw.partition(":")
        if name != name.strip():
            result.spaced.append(raw)
        elif name.startswith(("^", "=")) and len(result.entries) > 0:
            result.notes.append(f"'{raw}': '^' and '=' count only at the start of the whole "
                                "list; here they are part of the name, so this entry matches "
                                "nothing (write one list: ^=a,b)")
        if any(c in name for c in "*?["):
            result.globs.append(name)
        if sep and not with_ports:
            result.notes.append(f"'{raw}': NCCL cuts the name at ':' and ignores the rest")
        if sep and with_ports:
            port = rest.split(":")[0]
            if port and not port.isdigit():
                result.problems.append(f"'{raw}': the port after ':' must be a number")
        result.entries.append((name, sep + rest))
    if not result.entries:
        result.problems.append(f"'{value}' names nothing")
    return result


@dataclass
class Level:
    """How NCCL reads a P2P/GDR level value."""

    level: str | None  # the path type NCCL ends up with; None if it ignores the value
    legacy_integer: bool = False
    exact_name: bool = False  # one of the named levels, spelled exactly


def parse_level(value: str) -> Level:
    """Mirror ``ncclGetLevel``: exact path name, else leading-digit integer, else ignored."""
    if value in PATH_NAMES:
        return Level(value, exact_name=True)
    if value[:1].isdigit():
        digits = re.match(r"\d+", value).group()  # strtol stops at the first non-digit
        return Level(LEGACY_LEVELS[min(int(digits), len(LEGACY_LEVELS) - 1)], legacy_integer=True)
    return Level(None)


@dataclass
class TokenList:
    """A parsed NCCL_ALGO / NCCL_PROTO value."""

    per_function: bool = False  # uses the 2.24+ "function:list;..." form
    problems: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)  # tokens this release does not know
    enabled: dict[str, set[str]] = field(default_factory=dict)  # function -> tokens it may use


def parse_token_list(value: str, tokens: tuple[str, ...],
                     known: set[str] | None = None) -> TokenList:
    """Mirror NCCL's 2.24+ ``parseList`` (src/graph/tuning.cc): ``;`` separates entries, only the
    first may lack ``function:``, ``^`` inverts a list, tokens compare case-insensitively; an
    unknown token or function makes NCCL fail. ``known``: the tokens of the target release."""
    known = known if known is not None else {t.lower() for t in tokens}
    result = TokenList(enabled={f.lower(): set(known) for f in FUNCTIONS})
    functions = {f.lower() for f in FUNCTIONS}
    for index, entry in enumerate(p for p in value.split(";") if p):
        parts = entry.split(":")
        if len(parts) == 1 and index > 0:
            result.problems.append(f"'{entry}': every entry after the first needs 'function:'")
        prefix = parts[0].lower() if len(parts) >= 2 else None
        if prefix is not None:
            result.per_function = True
            if prefix not in functions:
                known_functions = ", ".join(FUNCTIONS)
                result.problems.append(f"unknown function '{parts[0]}' (known: {known_functions})")
        elements = parts[1] if len(parts) >= 2 else parts[0]
        invert = elements.startswith("^")
        chosen = {t.lower() for t in elements.removeprefix("^").split(",") if t}
        for token in (t for t in elements.removeprefix("^").split(",") if t):
            if token.lower() not in known:
                hint = " (split into CollnetDirect and CollnetChain in 2.14)" \
                    if token.lower() == "collnet" else ""
                result.unknown.append(token)
                result.problems.append(f"unknown token '{token}'{hint} (known: "
                                       f"{', '.join(t for t in tokens if t.lower() in known)})")
        selected = known - chosen if invert else chosen & known
        for function in ([prefix] if prefix in functions else [] if prefix else functions):
            result.enabled[function] = set(selected)
    return result


def parse_subsystems(value: str) -> list[str]:
    """The tokens of NCCL_DEBUG_SUBSYS that NCCL does not know."""
    tokens = (t.strip().removeprefix("^") for t in value.removeprefix("^").split(","))
    return [t for t in tokens if t and t.upper() not in SUBSYSTEMS]


def parse_int(value: str) -> int | None:
    """A plain decimal integer, or None."""
    return int(value) if re.fullmatch(r"[+-]?\d+", value.strip()) else None


def nccl_int(value: str) -> int | None:
    """What NCCL's ``strtoll(value, 0)`` makes of an integer parameter (None: no number at all)."""
    match = re.match(r"\s*([+-]?)(0[xX][0-9a-fA-F]+|\d+)", value)
    if not match:
        return None
    return int(match.group(1) + match.group(2), 0 if match.group(2)[:2].lower() == "0x" else 10)


def torch_bool(value: str) -> bool | None:
    """What c10d's ``getCvarBool`` makes of a value (None: it raises)."""
    low = value.lower()
    return True if low in TORCH_TRUE else False if low in TORCH_FALSE else None
