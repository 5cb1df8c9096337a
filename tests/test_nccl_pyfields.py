"""labkit.nccl.pyfields: Python annotated assignments (``NCCL_DEBUG: str = "INFO"``) are Python,
never a YAML ``NAME: value`` line; the fields of a class whose fields are all variable names are
settings, a typed variable elsewhere is read loosely."""

from __future__ import annotations

import pytest

from labkit.nccl import check_env
from labkit.nccl.paste import parse_env
from labkit.nccl.pyfields import SHAPE, annotated

ENV_CLASS = '''@dataclass
class EnvironmentArgs:
    # a comment above a field
    OMP_NUM_THREADS: str = "1"
    NCCL_IB_TIMEOUT: str = "22"
    NCCL_DEBUG: str = field(default="INFO")
    NCCL_ALGO: Annotated[str, "which algorithms"] = Field("Ring", description="x")
    NCCL_SOCKET_IFNAME: str | None = None
    NCCL_IB_HCA: Optional[str] = os.environ.get("HCA")
    NCCL_MIN_NCHANNELS: int = 4
    NCCL_PROTO: str

    def export(self):
        os.environ.update(asdict(self))
'''


@pytest.mark.parametrize("line,read", [
    ('NCCL_DEBUG: str = "INFO"', ("NCCL_DEBUG", "INFO", True)),
    ("NCCL_IB_TIMEOUT: int = 22", ("NCCL_IB_TIMEOUT", "22", True)),
    ('NCCL_ALGO: str = "Ri" "ng"', ("NCCL_ALGO", "Ring", True)),
    ("NCCL_DEBUG: str | None = None", ("NCCL_DEBUG", None, True)),
    ("NCCL_P2P_DISABLE: bool = True", ("NCCL_P2P_DISABLE", None, True)),  # str(True)? its own
    ('NCCL_DEBUG: str = field(default="WARN")', ("NCCL_DEBUG", "WARN", True)),
    ("NCCL_DEBUG: list = field(default_factory=list)", ("NCCL_DEBUG", None, True)),
    ('NCCL_DEBUG: str = Field(default="WARN", description="d")', ("NCCL_DEBUG", "WARN", True)),
    ('NCCL_DEBUG: Annotated[str, "x"] = "WARN"', ("NCCL_DEBUG", "WARN", True)),
    ('NCCL_DEBUG: str = f"{level}"', ("NCCL_DEBUG", None, True)),
    ("NCCL_DEBUG: str = LEVEL", ("NCCL_DEBUG", None, True)),
    ("NCCL_DEBUG: INFO", None),  # YAML unless a class says otherwise
    ("NCCL_IB_HCA: =mlx5_0", None),
    ('"NCCL_DEBUG": "INFO"', None),
    ('nccl_debug: str = "INFO"', None),  # not a variable's name
])
def test_an_annotated_assignment_gives_its_literal_default(line, read):
    assert annotated(line) == read


def test_a_class_whose_fields_are_all_variable_names_is_a_block_of_settings():
    parsed = parse_env(ENV_CLASS)
    assert parsed.env == {"OMP_NUM_THREADS": "1", "NCCL_IB_TIMEOUT": "22", "NCCL_DEBUG": "INFO",
                          "NCCL_ALGO": "Ring", "NCCL_MIN_NCHANNELS": "4"}
    assert parsed.named == ["NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_PROTO"]
    assert {a.shape for a in parsed.assignments} == {SHAPE}
    assert not parsed.loose and not parsed.unparsed  # no "NCCL_PROTO: str" read as YAML


def test_an_invalid_default_in_such_a_class_is_an_error_and_the_type_never_a_value():
    fine = parse_env(ENV_CLASS)
    found = check_env(fine.env, **fine.job)
    assert found and not [f for f in found if f.severity == "error" or "'str" in f.message]
    wrong = parse_env('class Env:\n    NCCL_DEBUG: str = "DEBUG"\n')
    errors = [f for f in check_env(wrong.env, **wrong.job) if f.severity == "error"]
    assert [(f.variable, "'DEBUG' is not a level" in f.message) for f in errors] == [
        ("NCCL_DEBUG", True)]


@pytest.mark.parametrize("text", [
    'NCCL_DEBUG: str = "DEBUG"\n',  # a module's typed variable
    'class Config:\n    lr: float = 0.1\n    NCCL_DEBUG: str = "DEBUG"\n',  # a mixed class
    '    NCCL_DEBUG: str = "DEBUG"\n',  # a field pasted without its class
])
def test_a_typed_variable_outside_an_environment_class_is_read_loosely(text):
    parsed = parse_env(text)
    assert parsed.env == {} and [(p.name, p.value) for p in parsed.loose] == [
        ("NCCL_DEBUG", "DEBUG")]
    found = check_env(parsed.env, **parsed.job)
    assert {f.severity for f in found} == {"warning"}
    assert "Python typed variable" in found[0].message


def test_yaml_lines_next_to_a_class_stay_yaml():
    parsed = parse_env("class A:\n    x: int = 1\nenv:\n  NCCL_DEBUG: WARN\nNCCL_ALGO: Ring\n")
    assert parsed.env == {"NCCL_DEBUG": "WARN", "NCCL_ALGO": "Ring"}
