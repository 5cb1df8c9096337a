"""Tables and numbers as the notebooks print them: one column printer, seconds and bytes in words.

    print_table(rows, [("ranks", "world_size"), ("mode", "mode"),
                       ("extra MB per rank (max)", "rss_extra_mb_max", ".1f")])

A column is ``(header, key, format)``: ``key`` picks the cell from a row (a dict key, an attribute
name, or a function of the row), ``format`` is a format spec for numbers (default ``g``-like:
ints as they are, floats with ``.3g``). Numbers are right-aligned, text left-aligned, and a
missing value (None) prints as ``-``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

Column = tuple[str, Any] | tuple[str, Any, str]


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


def format_table(rows: Iterable[Any], columns: Sequence[Column], *, gap: int = 2) -> str:
    """``rows`` under ``columns`` as aligned text (a header line, then one line per row)."""
    specs = [(c[0], c[1], c[2] if len(c) > 2 else "") for c in columns]
    values = [[_cell(row, key) for _, key, _ in specs] for row in rows]
    cells = [[_text(v, spec) for v, (_, _, spec) in zip(line, specs, strict=True)]
             for line in values]
    right = [bool(values) and all(_is_number(line[i]) or line[i] is None for line in values)
             for i in range(len(specs))]
    widths = [max([len(header), *(len(line[i]) for line in cells)])
              for i, (header, _, _) in enumerate(specs)]

    def line(texts: Sequence[str]) -> str:
        parts = [t.rjust(w) if r else t.ljust(w)
                 for t, w, r in zip(texts, widths, right, strict=True)]
        return (" " * gap).join(parts).rstrip()

    return "\n".join([line([h for h, _, _ in specs]), *(line(c) for c in cells)])


def print_table(rows: Iterable[Any], columns: Sequence[Column], *, gap: int = 2,
                printer: Callable[[str], None] = print) -> None:
    """Prints :func:`format_table`."""
    printer(format_table(rows, columns, gap=gap))


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
