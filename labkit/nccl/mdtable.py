"""Markdown and RST grid tables of environment variables: the rows, and when to trust them.

Tables are read two ways, and which one depends on what the table says of itself.

    | Variable     | Value   | Why                |      +------------+-------+
    |--------------|---------|--------------------|      | Name       | Value |
    | `NCCL_DEBUG` | `WARN`  | errors only        |      +============+=======+
                                                         | NCCL_DEBUG | WARN  |

A table is read as settings in its own right (shape "markdown table", ``env_tables``) when it
clearly lists environment variables with the values they are set to: its header names a
variable column (``NAME_HEADERS``: Variable, Name, Env, Environment variable, Key ...) and a
value column (``VALUE_HEADERS``: Value, Setting, Set to, Recommended value ...), and the row's
value cell is one value (a code span, or one word). Such a table says "these are set to these"
as plainly as a YAML ``env:`` map does, and its cells hold exactly the value, so it is read like
one, and what is wrong in it is as wrong as anywhere else (an error, where it is one). Only the
name and value cells count: a command quoted in a "Why" cell is an example, and a value cell of
prose (```Ring` or `Tree```) sets nothing.

Every other table is left to the loose reading (``labkit.nccl.loose``), which never makes an
error: a header that names a Default or Example column documents what happens without a
setting or how one could look, not what this config sets; a table without such a header (a
changelog whose prose cell says ``NCCL_IB_DISABLE=1``) may mean anything. ``rows`` gives both
readers a table's cells with their header.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from labkit.nccl.commands import Found

SHAPE = "markdown table"
NAME_HEADERS = {"variable", "variables", "name", "env", "env var", "env vars", "env variable",
                "environment variable", "environment variables", "environment", "key",
                "variable name", "env name"}
VALUE_HEADERS = {"value", "values", "setting", "set to", "recommended value", "recommended",
                 "our value", "env value"}
# Columns that show a value without saying the config sets it: read loosely only.
LOOSE_VALUE_HEADERS = VALUE_HEADERS | {"default", "default value", "example", "examples",
                                       "example value", "suggested value", "suggested"}
_SEPARATOR = re.compile(r"\s*\|?\s*:?-{3,}:?\s*(?:\|\s*:?-{3,}:?\s*)*\|?\s*")
_GRID_BORDER = re.compile(r"\s*\+[-=+:]+\+\s*")
_CELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CODE = re.compile(r"(`{1,3})((?:(?!\1).)*)\1")  # one code span: `x`, ``x``
_EMPTY = {"", "-", "--", "\u2013", "\u2014", "n/a", "N/A"}


@dataclass(frozen=True)
class Row:
    """One row of a table: its line (counted from 1), its cells as written, and the table's
    header cells (lower case, code and emphasis marks removed; empty without a header)."""

    line: int
    cells: tuple[str, ...]
    header: tuple[str, ...]

    def column(self, names: set[str]) -> int | None:
        """The first column whose header is one of ``names``."""
        return next((n for n, head in enumerate(self.header) if head in names), None)


def cell_text(cell: str) -> str:
    """A cell without its blanks, emphasis (``**x**``) and code marks when one code span is
    all it holds."""
    text = cell.strip()
    while len(text) > 4 and text[:2] in ("**", "__") and text.endswith(text[:2]):
        text = text[2:-2].strip()
    code = _CODE.fullmatch(text)
    return code.group(2).strip() if code else text


def cell_value(cell: str) -> str | None:
    """The one value a cell holds (a code span, or a word), else None (prose, two values,
    nothing)."""
    text = cell.strip()
    code = _CODE.fullmatch(text)
    value = code.group(2).strip() if code else text
    if value in _EMPTY or (not code and (re.search(r"\s|`", value) or value.startswith("<"))):
        return None
    return value


def split_cells(line: str) -> tuple[str, ...] | None:
    """The cells of a table row (``| a | b |``, outer pipes optional with two cells or more),
    split at pipes outside code spans and not escaped; None when the line is no row."""
    text = line.strip()
    if "|" not in text:
        return None
    cells, current, code = [], [], ""
    i = 0
    while i < len(text):
        char = text[i]
        if char == "`":
            run = len(text[i:]) - len(text[i:].lstrip("`"))
            code = "" if code == "`" * run else code or "`" * run
            current.append("`" * run)
            i += run
            continue
        if char == "\\" and text[i + 1:i + 2] == "|":
            current.append("|")
            i += 2
            continue
        if char == "|" and not code:
            cells.append("".join(current))
            current = []
        else:
            current.append(char)
        i += 1
    cells.append("".join(current))
    if text.startswith("|"):
        cells = cells[1:]
    if text.endswith("|") and cells:
        cells = cells[:-1]
    return tuple(cells) if len(cells) >= 2 else None


def rows(lines: list[str], start: int) -> tuple[list[Row], int] | None:
    """The table opening on line index ``start``: its body rows and the index of the line after
    it; None when no table opens there. A Markdown table is a header row, a ``---|---`` line,
    then rows; an RST grid table is ``+---+`` borders around rows, with ``+===+`` under its
    header."""
    first = lines[start]
    if _GRID_BORDER.fullmatch(first):
        return _grid(lines, start)
    head = split_cells(first)
    if head is None or start + 1 >= len(lines) or not _SEPARATOR.fullmatch(lines[start + 1]) \
            or "|" not in lines[start + 1]:
        return None
    header = tuple(cell_text(c).lower() for c in head)
    found, i = [], start + 2
    while i < len(lines) and (cells := split_cells(lines[i])) is not None:
        found.append(Row(i + 1, cells, header))
        i += 1
    return found, i


def _grid(lines: list[str], start: int) -> tuple[list[Row], int] | None:
    body: list[tuple[int, tuple[str, ...]]] = []
    header: tuple[str, ...] = ()
    i = start + 1
    while i < len(lines):
        line = lines[i].strip()
        if _GRID_BORDER.fullmatch(line):
            if "=" in line and not header and body:
                header = tuple(cell_text(c).lower() for c in body[-1][1])
                body = []
        elif line.startswith("|") and (cells := split_cells(line)) is not None:
            body.append((i + 1, cells))
        else:
            break
        i += 1
    if not body:
        return None
    return [Row(n, cells, header) for n, cells in body], i


def env_row(row: Row) -> Found | None:
    """The setting a row of an environment table holds (see the module docstring), else None."""
    name_at, value_at = row.column(NAME_HEADERS), row.column(VALUE_HEADERS)
    if name_at is None or value_at is None or max(name_at, value_at) >= len(row.cells):
        return None
    name = cell_text(row.cells[name_at])
    value = cell_value(row.cells[value_at])
    if not _CELL_NAME.fullmatch(name) or not re.search("[A-Z]", name) or value is None:
        return None
    return Found(name, value, SHAPE)


def env_tables(lines: list[str]) -> dict[int, tuple[list[tuple[int, Found, str]], int]]:
    """Every table of ``lines`` that lists environment variables with their values, by the index
    of its first line: the settings it holds (line, setting, row) and the index after it."""
    found: dict[int, tuple[list[tuple[int, Found, str]], int]] = {}
    i = 0
    while i < len(lines):
        table = rows(lines, i) if "|" in lines[i] or lines[i].lstrip().startswith("+") else None
        if table is None:
            i += 1
            continue
        settings = [(row.line, setting, lines[row.line - 1].strip())
                    for row in table[0] if (setting := env_row(row)) is not None]
        if settings:
            found[i] = (settings, table[1])
        i = max(i + 1, table[1])
    return found
