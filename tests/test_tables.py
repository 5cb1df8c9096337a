"""Tables as the notebooks show them: aligned text, and HTML for the wide ones in a notebook."""

from __future__ import annotations

from pathlib import Path

from labkit.collectives import CollectivesTable, format_table, read_nccl_tests_json, skipped_text
from labkit.course.tables import NOTEBOOK_COLUMNS, Table, make_table, print_table, show

SAMPLE = Path(__file__).resolve().parent / "data" / "nccl_tests_json" / "all_reduce_perf_t4_2gpu.json"


def test_text_and_html_hold_the_same_cells():
    table = make_table([{"op": "a<b", "n": 3, "x": 0.5}, {"op": "c", "n": None, "x": 12.25}],
                       [("op", "op"), ("n", "n"), ("x", "x", ".1f")])
    assert str(table).splitlines() == ["op   n     x", "a<b  3   0.5", "c    -  12.2"]
    page = table._repr_html_()
    assert "a&lt;b" in page and "12.2" in page and page.count("<tr>") == 3
    assert table.right == (False, True, True)


def test_outside_a_notebook_every_table_prints_as_text(capsys):
    wide = Table(("h",), (("x" * (NOTEBOOK_COLUMNS + 1),),), (False,))
    show(wide)
    print_table([{"a": 1}], [("a", "a")])
    assert capsys.readouterr().out == f"h\n{'x' * (NOTEBOOK_COLUMNS + 1)}\na\n1\n"


def test_the_collectives_table_is_nccl_tests_text_and_an_html_table():
    rows = read_nccl_tests_json(SAMPLE).rows
    table = CollectivesTable(rows)
    assert str(table) == format_table(rows)
    page = table._repr_html_()
    assert "out-of-place" in page and "in-place" in page and "Avg bus bandwidth" in page
    assert max(len(line) for line in str(table).splitlines()) > NOTEBOOK_COLUMNS  # why HTML
    said = skipped_text([{"op": "all_reduce", "placement": "out-of-place",
                          "reason": "only the in-place form"}])
    assert said == "not run: all_reduce out-of-place: only the in-place form"
    assert skipped_text([]) == ""
