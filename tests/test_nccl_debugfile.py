"""labkit.nccl.debugfile: NCCL_DEBUG_FILE's name as NCCL builds it (src/debug.cc expands only
%h, %p and %%, and copies any other '%x' as it is): a conversion it does not expand is a warning,
which says that without %p the processes of a node share one file opened with fopen "w"."""

from __future__ import annotations

import pytest

from labkit.nccl.check import check_env
from labkit.nccl.debugfile import DEBUG_CC, conversions
from labkit.nccl.paste import parse_env


def debug_file(value: str):
    return [f for f in check_env({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": value})
            if f.variable == "NCCL_DEBUG_FILE"]


@pytest.mark.parametrize("value,codes", [
    ("/tmp/nccl.%h.%p", ["h", "p"]), ("/tmp/a%%r.log", ["%"]), ("/tmp/%r_%Y", ["r", "Y"]),
    ("/tmp/x%", []), ("/tmp/plain.log", []),
])
def test_conversions_are_read_as_nccl_reads_them(value, codes):
    assert [c for _, c in conversions(value)] == codes


@pytest.mark.parametrize("value,shared,fixed", [
    ("/tmp/nccl_rank_%r.log", "'/tmp/nccl_rank_%r.log'", "/tmp/nccl_rank_%h.%p.log"),
    ("/logs/nccl.%h.%r", "'/logs/nccl.<host>.%r'", "/logs/nccl.%h.%p"),
    ("/logs/%Y%m%d_%r.log", "'/logs/%Y%m%d_%r.log'", "/logs/%h.%p_.log"),  # one in place
])
def test_a_conversion_nccl_copies_is_a_warning_saying_the_file_is_shared(value, shared, fixed):
    [found] = debug_file(value)
    assert found.severity == "warning" and found.source == DEBUG_CC
    assert "replaces only %h (the host name), %p (the process id) and %%" in found.message
    assert "copies any other '%x' into the name as it is" in found.message
    assert f"the same file {shared} with fopen(..., \"w\")" in found.message
    assert "overwrite one another's log" in found.message
    assert found.edit is not None and found.edit.value == fixed


def test_with_p_the_names_differ_and_only_the_copied_conversion_is_told():
    [found] = debug_file("/logs/nccl.%h.%p.%r")
    assert found.severity == "warning" and found.message.startswith("'%r' is not a conversion")
    assert "same file" not in found.message and found.edit is None


@pytest.mark.parametrize("value", ["/tmp/nccl.%h.%p", "/tmp/nccl.%p.log", "/dev/stderr"])
def test_names_nccl_makes_per_process_give_no_finding(value):
    assert debug_file(value) == []


@pytest.mark.parametrize("value,fix", [
    ("/tmp/nccl.log", "/tmp/nccl.log.%h.%p"), ("/tmp/nccl.%h", "/tmp/nccl.%h.%p"),
    ("/tmp/100%%.log", "/tmp/100%%.log.%h.%p"),  # %% is one '%', not a conversion left as is
])
def test_one_name_for_every_process_is_a_warning(value, fix):
    [found] = debug_file(value)
    assert found.severity == "warning" and "no %p in the name" in found.message
    assert "truncates" in found.message and "one process per node" in found.message
    assert found.fix == fix


def test_the_percent_r_of_an_export_is_read_and_warned():
    parsed = parse_env('export NCCL_DEBUG=INFO\nexport NCCL_DEBUG_FILE="/tmp/nccl_%r.log"')
    found = [f for f in check_env(parsed.env, **parsed.job) if f.variable == "NCCL_DEBUG_FILE"]
    assert [f.severity for f in found] == ["warning"] and "'%r'" in found[0].message
