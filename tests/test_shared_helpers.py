"""The helpers every lesson shares: config dataclasses as flags and JSON, the column printer, the
number formats and the figure helpers."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import pytest

from labkit.course import plots
from labkit.course.tables import fmt_bytes, fmt_seconds, format_table
from labkit.errors import ParameterError
from labkit.runtime.config import (
    add_config_arguments,
    config_from_args,
    field_docs,
    from_json,
    to_json,
)


@dataclass
class Inner:
    rate: float = 0.5  # how fast it goes
    fancy: bool = False  # turn the fancy part on


@dataclass
class Outer:
    nodes: int = 3  # simulated nodes
    limit_s: float | None = None  # give up after this long
    name: str = "lab"
    inner: Inner = field(default_factory=lambda: Inner(rate=2.0))


def _parser(**options) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_config_arguments(parser, Outer, **options)
    return parser


def test_field_comments_become_help_and_defaults_come_from_the_dataclass() -> None:
    assert field_docs(Outer) == {"nodes": "simulated nodes", "limit_s": "give up after this long"}
    text = _parser().format_help()
    assert "simulated nodes (default 3)" in text and "how fast it goes (default 2.0)" in text
    cfg = config_from_args(Outer, _parser().parse_args([]))
    assert cfg == Outer()  # the nested default (rate 2.0) is the factory's, not Inner's


def test_flags_parse_into_the_dataclass_with_renames_and_aliases() -> None:
    parser = _parser(flags={"nodes": "--nnodes", "limit_s": "--timeout"},
                     aliases={"nodes": ["--nodes"]})
    cfg = config_from_args(Outer, parser.parse_args(["--nodes", "5", "--timeout", "2.5",
                                                     "--rate", "9", "--fancy"]))
    assert cfg == Outer(nodes=5, limit_s=2.5, inner=Inner(rate=9.0, fancy=True))
    assert config_from_args(Outer, parser.parse_args(["--nnodes", "4"]), name="given").name == "given"
    with pytest.raises(SystemExit):
        parser.parse_args(["--nodes", "many"])


def test_skipped_fields_keep_their_defaults() -> None:
    parser = _parser(skip=("name",))
    assert "--name" not in parser.format_help()
    assert config_from_args(Outer, parser.parse_args([])).name == "lab"


def test_json_round_trip_rebuilds_nested_configs_and_refuses_unknown_keys() -> None:
    cfg = Outer(nodes=2, inner=Inner(fancy=True))
    again = from_json(Outer, to_json(cfg))
    assert again == cfg and isinstance(again.inner, Inner)
    with pytest.raises(ParameterError, match="no field nodez"):
        from_json(Outer, '{"nodez": 1}')


def test_the_column_printer_aligns_numbers_right_and_text_left() -> None:
    rows = [{"n": 2, "mode": "sharded", "mb": 8.123}, {"n": 16, "mode": "replicated", "mb": None}]
    text = format_table(rows, [("ranks", "n"), ("mode", "mode"), ("MB", "mb", ".1f"),
                               ("twice", lambda r: 2 * r["n"])])
    assert text.splitlines() == ["ranks  mode         MB  twice",
                                 "    2  sharded     8.1      4",
                                 "   16  replicated    -     32"]


def test_seconds_and_bytes_read_in_their_unit() -> None:
    assert [fmt_seconds(s) for s in (8.5e-7, 1.25e-5, 0.0032, 4.1, 150, 9000, None)] == [
        "850 ns", "12.5 us", "3.2 ms", "4.1 s", "2.5 min", "2.5 h", "-"]
    assert [fmt_bytes(n) for n in (512, 4096, 1.5 * 2**20, 2**31)] == [
        "512 B", "4 KiB", "1.5 MiB", "2 GiB"]


def test_the_figure_helpers_draw_on_a_figure_of_their_own() -> None:
    fig, (curves, heat, bars, lines) = plots.figure(4, width=12)
    curve = [{"env_steps": s, "seconds": s / 10, "mean_return": s / 2} for s in (0, 10, 20)]
    plots.learning_curves(curves, {"sync": curve}, solved=400)
    plots.heatmap(heat, [[None, 2e-5], [3e-3, None]], log=True, mark=lambda v: v > 1e-3)
    plots.bars(bars, ["a", "b"], [1.0, 2.0])
    plots.lines(lines, {"x": ([1, 2, 4], [1.0, 0.5, 0.25])}, xlog=2)
    assert len(curves.get_lines()) == 2  # the curve and the solved line
    assert len(heat.patches) == 1  # one cell above the mark
    fig.canvas.draw()  # renders without pyplot
