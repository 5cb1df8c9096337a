"""labkit.nccl.mdtable: Markdown and RST grid tables that list environment variables with their
values are read as settings; every other table is left to the loose reading."""

from __future__ import annotations

import pytest

from labkit.nccl import check_env
from labkit.nccl.mdtable import cell_value, split_cells
from labkit.nccl.paste import parse_env

BEAKER = """### Default environment variables

| Variable | Value | Why |
|----------|-------|-----|
| `VLLM_USE_V1` | `1` | Use the v1 engine |
| `VLLM_ATTENTION_BACKEND` | `FLASH_ATTN` | override via `--env VLLM_ATTENTION_BACKEND=...` |
| `NCCL_DEBUG` | `ERROR` | Minimal logging (set to `INFO` or `WARN` when debugging) |
| **NCCL_IB_HCA** | mlx5_0 | |
| `NCCL_ALGO` | `Ring` or `Tree` | two values: not read |
"""


def test_a_table_of_variables_and_values_is_read_as_settings():
    parsed = parse_env(BEAKER)
    assert parsed.env == {"VLLM_USE_V1": "1", "VLLM_ATTENTION_BACKEND": "FLASH_ATTN",
                          "NCCL_DEBUG": "ERROR", "NCCL_IB_HCA": "mlx5_0"}
    assert {a.shape for a in parsed.assignments} == {"markdown table"}
    assert [a.line for a in parsed.assignments] == [5, 6, 7, 8]
    assert not parsed.unparsed


def test_what_is_wrong_in_a_settings_table_is_an_error():
    parsed = parse_env(BEAKER)
    errors = [f for f in check_env(parsed.env, **parsed.job) if f.severity == "error"]
    assert [(f.variable, "not a level" in f.message) for f in errors] == [("NCCL_DEBUG", True)]


def test_an_rst_grid_table_with_a_header_is_read_too():
    text = ("+------------+-------+\n| Name       | Value |\n+============+=======+\n"
            "| NCCL_DEBUG | WARN  |\n+------------+-------+\n| NCCL_PROTO | ^LL128 |\n"
            "+------------+-------+\n")
    assert parse_env(text).env == {"NCCL_DEBUG": "WARN", "NCCL_PROTO": "^LL128"}


def test_tables_without_outer_pipes_and_with_other_header_words():
    text = "Environment variable | Setting\n--- | ---\nNCCL_DEBUG | WARN\nNCCL_P2P_LEVEL | NVL\n"
    assert parse_env(text).env == {"NCCL_DEBUG": "WARN", "NCCL_P2P_LEVEL": "NVL"}


@pytest.mark.parametrize("header", ["| Variable | Default | Meaning |", "| Name | Example |",
                                    "| date | content |"])
def test_defaults_examples_and_other_tables_are_only_read_loosely(header):
    text = f"{header}\n|---|---|---|\n| NCCL_DEBUG | ERROR | x |\n"
    parsed = parse_env(text)
    assert parsed.env == {}
    assert [(p.name, p.value) for p in parsed.loose] == [("NCCL_DEBUG", "ERROR")]
    findings = check_env(parsed.env, **parsed.job)
    assert [(f.severity, f.variable) for f in findings] == [("warning", "NCCL_DEBUG")]


def test_cells_split_outside_code_spans_and_escapes():
    assert [c.strip() for c in split_cells("| `a|b` | c\\|d | e |")] == ["`a|b`", "c|d", "e"]
    assert split_cells("no pipes here") is None
    assert split_cells("| one |") is None
    assert [cell_value(c) for c in (" `x y` ", " eth0 ", " two words ", " - ", " <iface> ")] == [
        "x y", "eth0", None, None, None]
