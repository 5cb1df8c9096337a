"""labkit.nccl.confidence: an error needs a read whose value is a plain scalar for its shape; a
YAML line, a pair in prose or a table cell whose value carries another language's syntax gives
at most a warning, and so does every loose read."""

from __future__ import annotations

import pytest

from labkit.nccl import check_env
from labkit.nccl.confidence import Doubt, at_most_warning, capped, doubts, foreign_syntax
from labkit.nccl.findings import error, info
from labkit.nccl.paste import parse_env


@pytest.mark.parametrize("value,why", [
    ('str = "INFO"', "assignment"),
    ("Optional[str] = None", "assignment"),
    ("1,RAY_FLAG=1,NCCL_X=2", "assignment"),
    ('os.getenv("NCCL_DEBUG", "INFO")', "call"),
    ("int(22)", "call"),
    ('"INFO', "never closes"),
    ("INFO'", "never closes"),
])
def test_another_languages_syntax_is_named(value, why):
    assert why in foreign_syntax(value)


@pytest.mark.parametrize("value", ["INFO", "=mlx5_0,mlx5_1", "^docker0,lo", "mlx5_0:1",
                                   "$(hostname)", "${IFACE}", "/opt/topo (1).xml", "22", ""])
def test_plain_scalars_carry_none(value):
    assert foreign_syntax(value) == ""


def test_an_unsure_read_with_foreign_syntax_is_at_most_a_warning():
    parsed = parse_env('env:\n  NCCL_DEBUG: str = "INFO"\n  NCCL_IB_TIMEOUT: int(22)\n')
    assert [d.name for d in parsed.doubtful] == ["NCCL_DEBUG", "NCCL_IB_TIMEOUT"]
    found = check_env(parsed.env, **parsed.job)
    assert found and {f.severity for f in found} == {"warning"}
    message = next(f.message for f in found if f.variable == "NCCL_DEBUG")
    assert message.startswith("read from line 2 as yaml env") and \
        "as a setting it is an error" in message


def test_a_plain_value_in_the_same_shape_keeps_its_error():
    parsed = parse_env("env:\n  NCCL_DEBUG: DEBUG\n")
    assert not parsed.doubtful
    assert [f.severity for f in check_env(parsed.env, **parsed.job)] == ["error"]


def test_sure_shapes_are_not_doubted_and_a_later_sure_read_settles_it():
    shell = parse_env("export NCCL_IB_HCA='a=b'\n")  # a shell word is exactly what it says
    assert shell.env == {"NCCL_IB_HCA": "a=b"} and not shell.doubtful
    read = [type("A", (), {"name": "NCCL_X", "value": "a=b", "line": n, "shape": shape})()
            for n, shape in ((1, "yaml env"), (2, "export"))]
    assert doubts(read, {"NCCL_X": "a=b"}) == ()
    assert doubts(read[:1], {"NCCL_X": "a=b"})[0].why.startswith("an assignment")
    assert doubts(read[:1], {"NCCL_X": "other"}) == ()  # not the value the process gets


def test_capping_lowers_only_errors_on_doubtful_variables():
    doubt = Doubt("NCCL_DEBUG", "x = 1", 3, "yaml env", "an assignment")
    found = [error("NCCL_DEBUG", "bad", "fix"), error("NCCL_ALGO", "bad", "fix"),
             info("NCCL_DEBUG", "note")]
    assert [f.severity for f in capped(found, [doubt])] == ["warning", "error", "info"]
    lowered = at_most_warning(error("NCCL_X", "bad", "fix", source="s"), "read here", "check")
    assert (lowered.severity, lowered.message, lowered.source) == (
        "warning", "read here (check; as a setting it is an error): bad", "s")
