"""A safety net under the structured reader: watched names paired with a value in any loose form.

``labkit.nccl.paste`` reads the shapes it knows exactly (an ``export``, a YAML ``env:`` map, an
environment table ...). People also write settings where no shape is: mid-sentence (``the page
sets os.environ['NCCL_TIMEOUT']='1800' in seconds``), in a table cell, as ``NAME: VALUE`` on a
line of its own, or in words (``set NCCL_DEBUG to WARN``). ``loose_pairs`` scans the whole text
once more, after the structured parse, for a watched name (``commands.WATCHED``, or an upper-case
name whose ``NCCL_`` prefix is mangled, ``CCL_NET_GDR_LEVEL``: ``labkit.nccl.mangled``) paired
with a value in one of these forms (``FORMS`` names them):

- ``NAME=VALUE`` anywhere in a line, the value bare, quoted or in backticks; ``NAME = 'VALUE'``
  with blanks around ``=`` only with a quoted value or a number (``NAME = other_name`` is code);
- a subscript assignment in text: ``os.environ['NAME']='VALUE'``, ``env["NAME"] = "VALUE"``,
  also in an inline code span (`` `os.environ["NAME"] = "1"` `` mid-sentence or as a line of its
  own: the structured parse names the variable there but takes no value); a literal followed by
  ``+`` or ``%`` (``"/tmp/x." + str(rank)``) is an expression, no value;
- ``NAME: VALUE`` where the value ends the line (or a list: ``, ; # |`` follows it);
- a table row (``labkit.nccl.mdtable``, or a ``| ... |`` row pasted without its table) whose
  cell holds the name and whose value column (a header naming Value, Default, Setting, Example
  ..., else the next cell) holds one value;
- ``set NAME to VALUE`` / ``NAME set to VALUE``, in prose; there a bare value must look like one
  (a digit, a capital letter or one of ``^=/,:._-``), so ``set NCCL_DEBUG to the right level``
  reads nothing;
- a Python typed variable with a literal default, ``NCCL_DEBUG: str = "INFO"``, outside a class
  whose fields are all variable names (inside one it is a setting: ``labkit.nccl.pyfields``).

A pair is kept only for a variable the structured parse did not read (never twice: a variable
it read a value for, or an ``unset``, is not looked at again), one per distinct value. A variable
it only named (``mpirun -x NAME``, ``os.environ["NAME"] = <expression>``) had no value to check,
so a loose value for it is looked at. Skipped: log output (``labkit.nccl.logoutput``'s ``NAME:
value`` runs, NCCL's ``NCCL INFO``/``WARN`` lines, which ``labkit.nccl.nccllog`` reads), code
that only reads a variable (``os.environ.get("NCCL_X", "1")``, ``getenv``, ``"NCCL_X" in
os.environ``, ``==``: none of the forms matches them), commented-out settings (``# export
NCCL_X=1``, ``# NCCL_X: 1``, ``# -x NCCL_X=1``, ``# mpirun ...``: switched off on purpose; a
``#`` line in none of these shapes is read, so a Markdown heading whose inline code span holds
the setting, ``# `-e NAME=VALUE` Typo in ...``, is read like prose), a diff's removed lines, shell
expansions
(``${NCCL_X:-1}``, ``$NCCL_X``), values that are no values (placeholders such as ``...``,
``<iface>``, ``VALUE``, ``%d``; YAML's ``null``; Python names such as ``master_addr`` or a dict
value ``"NCCL_X": level``; an expression such as ``",".join(...)``) and ``make NAME=VALUE``
(a variable of make's, not of the environment NCCL runs in).

A value that carries another language's syntax (``a=b``, a call, a quote that never closes:
``labkit.nccl.confidence``) is no value here. A loose pair is checked like any setting, by name
and by value, but never more than a warning (``check.check_env``'s ``loose``,
``confidence.at_most_warning``): the text may describe the setting rather than set it, so the
finding says where it was read and in which form, for the reader to judge. Loose pairs stay out
of ``ParsedEnv.env``, so ``--fix`` writes only what the structured parse read.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from labkit.nccl import mangled, mdtable, pyfields
from labkit.nccl.commands import WATCHED
from labkit.nccl.confidence import at_most_warning, foreign_syntax
from labkit.nccl.context import Context
from labkit.nccl.findings import Finding
from labkit.nccl.logoutput import is_log_line

# A watched name, or a candidate mangle of an NCCL_ name (``_watched`` keeps the real mangles).
_NAME = rf"(?:{WATCHED}|{mangled.LOOSE})"

FORMS = {"assign": "NAME=VALUE in a line", "subscript": "os.environ['NAME']=VALUE in a line",
         "colon": "NAME: VALUE", "table": "a table row", "set": "'set NAME to VALUE'",
         "command": "a set command (fish set -x, setenv, setx, launchctl setenv: NAME VALUE)",
         "set-to": "'NAME set to VALUE'",
         "annotated": "NAME: type = VALUE (a Python typed variable)",
         "pair": "'NAME', 'VALUE' (a Python pair of strings)"}
_END = rf"""(?=[`'"’”*]*[.,;:!?)\]]*(?:\s|$|[|<])|,(?:{_NAME})=)"""
_NAMED = rf"""[`'"*]{{0,3}}(?P<name>{_NAME})[`'"*]{{0,3}}"""
# After a value's closing quote: a break, also after a code span's closing backquote
# (`os.environ["NCCL_X"] = "1"` mid-sentence); not '",".join(...)': an expression.
_QUOTE_END = r"(?=`*(?:[\s,;)\]|<#*]|[.:!?](?:\s|$)|$))"


def _quoted(tag: str) -> str:
    """A value in quotes, backticks or typographic quotes (its groups named q<tag><n>)."""
    pairs = ("''", '""', "``", "‘’", "“”")
    return "|".join(f"{re.escape(a)}(?P<q{tag}{n}>[^{re.escape(b)}\n]*){re.escape(b)}{_QUOTE_END}"
                    for n, (a, b) in enumerate(pairs))


def _bare(tag: str, end: str = _END, also: str = "") -> str:
    return rf"""(?P<bare{tag}>[^\s'"`;()<>\[\]{{}}|\\{also}]+?){end}"""


PATTERNS = {
    "subscript": re.compile(rf"""\[\s*(["'])(?P<name>{_NAME})\1\s*\]\s*=(?!=)\s*"""
                            rf"""(?:{_quoted("a")}|(?P<num>-?\d+(?:\.\d+)?)(?=`*(?:[\s,;)#]|$)))"""
                            r"""(?!`*\s*[+%]\s*[\w"'(])"""),  # "1" + rank: an expression
    "assign": re.compile(rf"""(?<![\w$%{{}}.\-/\\])[`'"]?(?P<name>{_NAME})"""
                         rf"""(?:=(?!=)(?:{_quoted("a")}|{_bare("a")})|\s+=(?!=)\s*"""
                         rf"""(?:{_quoted("b")}|(?P<num>-?\d+(?:\.\d+)?)(?=[.,;:!?)]*(?:\s|$))))"""),
    "colon": re.compile(rf"""(?:^|(?<=[\s(,;]))(?:[-*]\s+)?[`*]{{0,2}}(?P<key>["']?)(?P<name>"""
                        rf"""{_NAME})(?P=key)[`*]{{0,2}}\s*:\s+(?:{_quoted("a")}|"""
                        rf"""{_bare("a", "", "#")})\s*(?=$|[,;#|])"""),
    "set": re.compile(rf"""\b[Ss]et(?:s|ting)?\s+(?:the\s+)?(?:(?:env(?:ironment)?\s+)?"""
                      rf"""variable\s+)?{_NAMED}\s+(?:to|=)\s+(?:{_quoted("a")}|{_bare("a")})"""),
    "command": re.compile(rf"""(?<![\w$-])(?:set(?P<flags>(?:\s+--?[A-Za-z][A-Za-z-]*)+)|setenv|setx"""
                          rf"""|set-env|launchctl\s+setenv)\s+{_NAMED}\s+(?:{_quoted("a")}|"""
                          rf"""{_bare("a")})"""),
    # ("NCCL_X", "1") in a list of pairs, key, value = "NCCL_X", "1": not a call's arguments
    # (os.environ.get("NCCL_X", "1") reads with a default: labkit.nccl.baked's business).
    "pair": re.compile(rf"""(?:^|[\[=]|(?<![\w.\])'"])\()\s*(?P<pq>["'])"""
                       rf"""(?P<name>{_NAME})(?P=pq)\s*,\s*(?:{_quoted("a")})"""),
    "set-to": re.compile(rf"""(?<![\w$%{{]){_NAMED}\s+(?:is\s+|was\s+|are\s+|has\s+been\s+|being\s+)?"""
                         rf"""set\s+to\s+(?:{_quoted("a")}|{_bare("a")})"""),
}
_PROSE = ("set", "set-to")
_VALUE_LIKE = re.compile(r"[0-9A-Z^=/,:._-]")
_PLACEHOLDER = re.compile(r"\.{2,}|…|[xX]+|value|VALUE|val|\*+|<.*>|\$|%[-+ #0]*\d*[sdiuxf]|")
_NOT_A_VALUE = re.compile(r"null|Null|NULL|~|None|_*[a-z]+(?:_[a-z]+)*_[a-z]+|_[a-z]+")  # a name
_JSON_BARE = re.compile(r"-?\d+(?:\.\d+)?|true|false")  # what a JSON or dict value is unquoted
_COMMAND_BREAK = re.compile(r"[;&|(`]")
_WATCHED_NAME = re.compile(_NAME)
_WATCHED_ONLY = re.compile(WATCHED)
_DOTTED = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.")
_NCCL_LOG = re.compile(r"\bNCCL (?:INFO|WARN|TRACE)\b")
_COMMENTED = re.compile(rf"""\s*(?:#+|//|rem\s|::)\s*(?:(?:export|setenv|set|ENV|declare\s+-x)\s+|"""
                        rf"""[-*]\s+)?(?:(?:{_NAME})\s*[=:]|(?:os\.)?environ\b|(?:mpirun|"""
                        rf"""mpiexec|srun|torchrun|docker|python3?|-x|-e|--env)\s|(?:set(?:\s+"""
                        rf"""--?[A-Za-z-]+)+|setenv|setx|set-env|launchctl\s+setenv)\s+"""
                        rf"""(?:{_NAME})\s)""", re.IGNORECASE)
_DIFF_START = re.compile(r"\s*(?:```\s*(?:diff|patch)\s*$|@@ .* @@|diff --git )")


@dataclass(frozen=True)
class LoosePair:
    """A watched name paired with a value outside any shape the structured parse reads: where
    (``line``, from 1), in which form (``shape``, one of ``FORMS``' values) and the words it
    was read from (``raw``)."""

    name: str
    value: str
    line: int
    shape: str
    raw: str

    def where(self) -> str:
        """How a finding names the place: line, form and words."""
        raw = self.raw if len(self.raw) <= 80 else self.raw[:77] + "..."
        return f"line {self.line}, in the form {self.shape}: {raw!r}"


def loose_findings(pairs: Iterable[LoosePair], ctx: Context,
                   check: Callable[[str, str, Context], list[Finding]]) -> list[Finding]:
    """Each pair checked as a setting by ``check(name, value, ctx)`` (its name and value checks,
    no rules across variables), and what is wrong kept, never above a warning, saying where and
    how it was read; infos, and advice about good values (``Finding.advice``), are dropped."""
    out: list[Finding] = []
    seen: set[tuple[str, str]] = set()
    for pair in pairs:
        for found in check(pair.name, pair.value, ctx):
            if found.severity == "info" or found.advice or (found.variable, found.message) in seen:
                continue
            seen.add((found.variable, found.message))
            out.append(at_most_warning(found, f"read loosely from {pair.where()}", "the text may "
                                       "describe a setting rather than make it: check that it "
                                       "is one"))
    return out


def loose_pairs(text: str, read: Iterable[str], skip: Iterable[int] = ()) -> tuple[LoosePair, ...]:
    """The loose pairs in ``text`` (see the module docstring) for the variables not in ``read``
    (every name the structured parse read a value for, or unset); ``skip``: line numbers that
    are log output, or that the structured parse read as something else (a Python field)."""
    read, skip = frozenset(read), frozenset(skip)
    lines = text.split("\n")
    pairs: dict[tuple[str, str], LoosePair] = {}
    in_diff = False
    for n, line in enumerate(lines, 1):
        in_diff = bool(_DIFF_START.match(line)) or in_diff and not line.lstrip().startswith("```")
        if n in skip or _NCCL_LOG.search(line) or is_log_line(line) or \
                _COMMENTED.match(line) or (in_diff and line.startswith("-")) or \
                not _WATCHED_NAME.search(line):
            continue
        typed = pyfields.annotated(line) if ":" in line else None
        if typed is not None and typed[2]:  # Python: no "NAME: VALUE" with the value "str = 1"
            if typed[1] is not None and typed[0] not in read and _watched(typed[0]):
                pairs.setdefault(typed[:2], LoosePair(typed[0], typed[1], n, FORMS["annotated"],
                                                      line.strip()))
            continue
        for form, pattern in PATTERNS.items():
            for match in pattern.finditer(line):
                value = _value(match, form)
                name = match.group("name")
                if not _watched(name):
                    continue  # CCL_WORKER_COUNT: oneCCL's own; NCLX_FOO: no NCCL name's rest
                if form == "command" and not _exports(match.group("flags")):
                    continue  # fish's set without -x: a variable of fish, not of the environment
                if value is not None and name not in read and \
                        not _make_argument(line, match.start()):
                    start = match.start()
                    while form == "subscript" and start and line[start - 1] in _DOTTED:
                        start -= 1  # the raw text with its os.environ
                    while form == "pair" and line[start] in "=[( \t":
                        start += 1  # the raw text from the pair's first quote
                    pairs.setdefault((name, value), LoosePair(name, value, n, FORMS[form],
                                                              _raw(line[start:match.end()])))
    for pair in _table_pairs(lines, read, skip):
        pairs.setdefault((pair.name, pair.value), pair)
    return tuple(sorted(pairs.values(), key=lambda p: p.line))


def _watched(name: str) -> bool:
    """Whether ``name`` is watched: a prefix ``commands.WATCHED`` names, or an NCCL name whose
    prefix is mangled (``labkit.nccl.mangled``)."""
    return bool(_WATCHED_ONLY.fullmatch(name)) or mangled.intended(name) is not None


def _exports(flags: str | None) -> bool:
    """Whether a ``set`` command's options (None: not ``set``) export: fish's ``-x``/``--export``."""
    words = (flags or "").split()
    return flags is None or "--export" in words or any(
        w[1] != "-" and "x" in w for w in words)


def _raw(text: str) -> str:
    """The words a pair was read from, without a quote that opens it and never closes."""
    text = text.strip()
    return text[1:] if text[:1] in "`'\"" and text.count(text[0]) == 1 else text


def _make_argument(line: str, at: int) -> bool:
    """Whether ``at`` is in the arguments of ``make``: ``make NCCL_HOME=/x`` sets a variable of
    make's, for the build, not the environment of any process that runs NCCL."""
    words = _COMMAND_BREAK.split(line[:at])[-1].split()
    return bool(words) and words[0].rsplit("/", 1)[-1] in ("make", "gmake")


def _value(match: re.Match[str], form: str) -> str | None:
    """The value a match holds, or None when it is no value (a placeholder, a prose word)."""
    groups = match.groupdict()
    quoted = next((v for k, v in groups.items() if k.startswith("q") and v is not None), None)
    if quoted is not None:
        value = quoted.strip()
    else:
        value = next((v for k, v in groups.items() if k.startswith(("bare", "num")) and v), "")
        if form in _PROSE and not _VALUE_LIKE.search(value) or _NOT_A_VALUE.fullmatch(value):
            return None  # "set NCCL_DEBUG to the right level", "X: null", "X=master_addr,"
        if groups.get("key") and not _JSON_BARE.fullmatch(value):
            return None  # '"NCCL_X": some_name' in a dict: an expression
    return None if _PLACEHOLDER.fullmatch(value) or foreign_syntax(value) else value


def _table_pairs(lines: list[str], read: frozenset[str],
                 skip: frozenset[int]) -> list[LoosePair]:
    """Rows of tables whose name cell holds a watched name and whose value cell one value."""
    found: list[LoosePair] = []
    i = 0
    while i < len(lines):
        table = mdtable.rows(lines, i) if "|" in lines[i] or \
            lines[i].lstrip().startswith("+") else None
        if table is None:  # a row pasted without its table: | `NAME` | `VALUE` | ... |
            line = lines[i].strip()
            cells = mdtable.split_cells(line) if line[:1] == line[-1:] == "|" else None
            if cells and i + 1 not in skip:
                found += _row_pair(mdtable.Row(i + 1, cells, ()), line, read)
            i += 1
            continue
        for row in table[0]:
            if row.line in skip:
                continue
            found += _row_pair(row, lines[row.line - 1], read)
        i = max(i + 1, table[1])
    return found


def _row_pair(row: mdtable.Row, line: str, read: frozenset[str]) -> list[LoosePair]:
    column = row.column(mdtable.LOOSE_VALUE_HEADERS)
    for at, cell in enumerate(row.cells):
        name = mdtable.cell_text(cell)
        if not _watched(name) or name in read:
            continue
        value_at = column if column is not None and column != at else at + 1
        value = mdtable.cell_value(row.cells[value_at]) if value_at < len(row.cells) else None
        if value is None or _PLACEHOLDER.fullmatch(value):
            return []
        head = f" ({row.header[value_at]!r} column)" if value_at < len(row.header) else ""
        return [LoosePair(name, value, row.line, FORMS["table"] + head, line.strip())]
    return []
