"""Tables and numbers as the notebooks print them: one column printer, seconds and bytes in words.

    print_table(rows, [("ranks", "world_size"), ("mode", "mode"),
                       ("extra MB per rank (max)", "rss_extra_mb_max", ".1f")])

In a notebook a table wider than ``NOTEBOOK_COLUMNS`` characters is shown as an HTML table
instead: text that wide breaks mid-row in JupyterLab beside its file browser. Anything with a
``_repr_html_`` and a text ``str`` (a :class:`Table`, the collectives table) goes through
:func:`show` the same way; outside a notebook everything prints as text.

A column is ``(header, key, format)``: ``key`` picks the cell from a row (a dict key, an attribute
name, or a function of the row), ``format`` is a format spec for numbers (default ``g``-like:
ints as they are, floats with ``.3g``). Numbers are right-aligned, text left-aligned, and a
missing value (None) prints as ``-``.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

Column = tuple[str, Any] | tuple[str, Any, str]
NOTEBOOK_COLUMNS = 100
_CELL = "padding:1px 8px;font-family:monospace;text-align:"


def _cell(row: Any, key: Any) -> Any:
    if callable(key):
        return key(row)
    if isinstance(row, dict):
        return row.get(key)
    return getattr(row, key, None)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _text(value: Any, spec: str) -> str:
    if value is None:
        return "-"
    if not _is_number(value):
        return str(value)
    if spec:
        return format(value, spec)
    return str(value) if isinstance(value, int) else format(value, ".3g")


@dataclass(frozen=True)
class Table:
    """Cells as text, a header and which columns are right-aligned: ``str`` is the aligned
    text, ``_repr_html_`` the same table in HTML."""

    header: tuple[str, ...]
    cells: tuple[tuple[str, ...], ...]
    right: tuple[bool, ...]
    gap: int = 2

    def __str__(self) -> str:
        widths = [max([len(h), *(len(line[i]) for line in self.cells)])
                  for i, h in enumerate(self.header)]

        def line(texts: Sequence[str]) -> str:
            parts = [t.rjust(w) if r else t.ljust(w)
                     for t, w, r in zip(texts, widths, self.right, strict=True)]
            return (" " * self.gap).join(parts).rstrip()

        return "\n".join([line(self.header), *(line(c) for c in self.cells)])

    def _repr_html_(self) -> str:
        def row(tag: str, texts: Sequence[str]) -> str:
            return "<tr>" + "".join(
                f'<{tag} style="{_CELL}{"right" if r else "left"}">{html.escape(t)}</{tag}>'
                for t, r in zip(texts, self.right, strict=True)) + "</tr>"

        return ('<div style="overflow-x:auto"><table style="border-collapse:collapse">'
                + row("th", self.header) + "".join(row("td", c) for c in self.cells)
                + "</table></div>")


def make_table(rows: Iterable[Any], columns: Sequence[Column], *, gap: int = 2) -> Table:
    """``rows`` under ``columns`` (see the module docstring) as a :class:`Table`."""
    specs = [(c[0], c[1], c[2] if len(c) > 2 else "") for c in columns]
    values = [[_cell(row, key) for _, key, _ in specs] for row in rows]
    cells = tuple(tuple(_text(v, spec) for v, (_, _, spec) in zip(line, specs, strict=True))
                  for line in values)
    right = tuple(bool(values) and all(_is_number(line[i]) or line[i] is None for line in values)
                  for i in range(len(specs)))
    return Table(tuple(h for h, _, _ in specs), cells, right, gap)


def format_table(rows: Iterable[Any], columns: Sequence[Column], *, gap: int = 2) -> str:
    """``rows`` under ``columns`` as aligned text (a header line, then one line per row)."""
    return str(make_table(rows, columns, gap=gap))


def in_notebook() -> bool:
    """Whether this runs in a Jupyter kernel (JupyterLab, papermill), which shows HTML."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def show(table: Any, printer: Callable[[str], None] = print) -> None:
    """Prints ``table``'s text, unless this is a notebook and a line of it is wider than
    ``NOTEBOOK_COLUMNS``: then its HTML (``_repr_html_``) is displayed."""
    text = str(table)
    wide = max((len(line) for line in text.splitlines()), default=0) > NOTEBOOK_COLUMNS
    if wide and printer is print and hasattr(table, "_repr_html_") and in_notebook():
        from IPython.display import display

        display(table)
    else:
        printer(text)


def print_table(rows: Iterable[Any], columns: Sequence[Column], *, gap: int = 2,
                printer: Callable[[str], None] = print) -> None:
    """Shows :func:`make_table` (:func:`show`: text, or HTML in a notebook when too wide)."""
    show(make_table(rows, columns, gap=gap), printer)


def fmt_seconds(seconds: float | None) -> str:
    """A duration in the unit that reads best: ``850 ns``, ``12.5 us``, ``3.2 ms``, ``4.1 s``,
    ``2.5 min``, ``1.2 h``."""
    if seconds is None:
        return "-"
    s = abs(seconds)
    for limit, scale, unit in ((1e-6, 1e9, "ns"), (1e-3, 1e6, "us"), (1.0, 1e3, "ms"),
                               (120.0, 1.0, "s"), (7200.0, 1 / 60, "min")):
        if s < limit:
            return f"{seconds * scale:.3g} {unit}"
    return f"{seconds / 3600:.3g} h"


def fmt_bytes(n: float | None) -> str:
    """A size in binary units: ``512 B``, ``4 KiB``, ``1.5 MiB``, ``2 GiB``."""
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.4g} {unit}"
        n /= 1024
    return f"{n:.4g} TiB"
