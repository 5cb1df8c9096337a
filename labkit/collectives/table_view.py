"""The nccl-tests table as a notebook shows it: an HTML table that wraps and scrolls inside the
output area, with the same columns and numbers as the text one (``report.format_table``), which
is nccl-tests' own layout and 124 to 214 characters wide: too wide for a notebook beside a file
browser, where its lines break mid-row.

    from IPython.display import display
    display(CollectivesTable(report.rows))   # HTML in JupyterLab, the nccl-tests text elsewhere
    print(skipped_text(report.skipped))       # "not run: ..." as sentences
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from labkit.collectives.formulas import CollectiveRow
from labkit.collectives.report import ITER_COLUMNS, avg_busbw, format_table, measured_cells

_CELL = "padding:1px 6px;text-align:right;font-family:monospace"
_HEAD = _CELL + ";border-bottom:1px solid #999"


@dataclass
class CollectivesTable:
    """Rows of one run: ``_repr_html_`` for notebooks, ``str`` for the nccl-tests text."""

    rows: Sequence[CollectiveRow]

    def __str__(self) -> str:
        return format_table(list(self.rows))

    __repr__ = __str__

    def _repr_html_(self) -> str:
        return html_table(self.rows)


def html_table(rows: Sequence[CollectiveRow]) -> str:
    """One HTML table per op: size, count, type, redop, root, then out-of-place and in-place
    (time us, algbw and busbw GB/s, #wrong, and the per-iteration columns when measured), and
    nccl-tests' two footer lines."""
    per_iter = any(r.iter_times_us for r in rows)
    units = ("us",) * (len(ITER_COLUMNS) - 1) + ("%",)
    measured = ["time (us)", "algbw (GB/s)", "busbw (GB/s)", "#wrong"] + (
        [f"{c.rstrip('%')} ({u})" for c, u in zip(ITER_COLUMNS, units, strict=True)]
        if per_iter else [])
    blocks = []
    for op in dict.fromkeys(r.op for r in rows):
        mine = [r for r in rows if r.op == op]
        head = "".join(f'<th style="{_HEAD}">{html.escape(h)}</th>' for h in
                       ["size (B)", "count", "type", "redop", "root"] + measured * 2)
        span = len(measured)
        top = (f'<tr><th colspan="5"></th><th colspan="{span}" style="{_HEAD}">out-of-place</th>'
               f'<th colspan="{span}" style="{_HEAD}">in-place</th></tr>')
        body = []
        for key in dict.fromkeys((r.cycle, r.size) for r in mine):
            pair = {r.in_place: r for r in mine if (r.cycle, r.size) == key}
            first = next(iter(pair.values()))
            cells = [str(first.size), str(first.count), first.type, first.redop, str(first.root)]
            cells += (measured_cells(pair.get(False), per_iter)
                      + measured_cells(pair.get(True), per_iter))
            body.append("<tr>" + "".join(f'<td style="{_CELL}">{html.escape(c)}</td>'
                                         for c in cells) + "</tr>")
        bad = sum(r.wrong > 0 for r in mine)
        foot = (f"Out of bounds values: {bad} {'FAILED' if bad else 'OK'} &middot; "
                f"Avg bus bandwidth: {avg_busbw(mine):g} GB/s")
        blocks.append(f"<p><b>{html.escape(op)}</b>, {mine[0].nranks} ranks</p>"
                      f'<div style="overflow-x:auto"><table style="border-collapse:collapse">'
                      f"{top}<tr>{head}</tr>{''.join(body)}</table></div><p>{foot}</p>")
    return "".join(blocks)


def skipped_text(skipped: Sequence[dict[str, Any]]) -> str:
    """What a run did not measure, one sentence a line ("" when it measured everything)."""
    return "\n".join(f"not run: {s.get('op')} {s.get('placement', '')}: {s.get('reason', '')}"
                     .replace("  ", " ") for s in skipped)


__all__ = ["CollectivesTable", "html_table", "skipped_text"]
