"""labkit.nccl.dialects: the set commands of other shells and tools (fish ``set -x``, csh
``set``/``unsetenv``, cmd.exe ``set``, ``setx``, ``launchctl``, ``systemctl``, ``conda``,
``kubectl set env``, ``env -S``, ``export -n``), read as each one sets the environment, in the
structured reader and, where no shape is certain, in the loose net."""

from __future__ import annotations

import pytest

from labkit.nccl.check import check_env
from labkit.nccl.dialects import CMD, CSH, dialect
from labkit.nccl.paste import parse_env


def shapes(text: str) -> dict[str, str]:
    return {a.name: a.shape for a in parse_env(text).assignments}


@pytest.mark.parametrize("text", [
    "set -gx NCCL_DEBUG WARN", "set -x NCCL_DEBUG WARN", "set -Ux NCCL_DEBUG WARN",
    "set --export NCCL_DEBUG WARN", "set --global --export NCCL_DEBUG 'WARN'",
    "if not set -q NCCL_DEBUG\n    set -gx NCCL_DEBUG WARN\nend",
])
def test_fish_exports_are_read(text):
    parsed = parse_env(text)
    assert parsed.env == {"NCCL_DEBUG": "WARN"} and not parsed.unparsed
    assert shapes(text) == {"NCCL_DEBUG": "fish set -x"}


def test_fish_lists_join_as_fish_exports_them_and_substitutions_give_no_value():
    assert parse_env("set -gx LD_LIBRARY_PATH /a /b").env == {"LD_LIBRARY_PATH": "/a:/b"}
    assert parse_env("set -gx NCCL_SOCKET_IFNAME eth0 eth1").env == \
        {"NCCL_SOCKET_IFNAME": "eth0 eth1"}
    parsed = parse_env("set -gx NCCL_SOCKET_IFNAME (ip route | awk '{print $5}')")
    assert parsed.env == {} and parsed.named == ["NCCL_SOCKET_IFNAME"]
    assert parse_env("set -gx NCCL_DEBUG_FILE ~/nccl.%h.%p").tilde == {"NCCL_DEBUG_FILE"}


def test_fish_without_export_and_bash_set_options_set_nothing():
    parsed = parse_env("set -g NCCL_DEBUG WARN")
    assert parsed.env == {} and any("not see it" in note for _, note in parsed.notes)
    for text in ("set -euxo pipefail", "set -x", "set -- NCCL_DEBUG WARN", "set -e",
                 "set -q NCCL_DEBUG"):
        assert parse_env(text).env == {}, text
    erased = parse_env("export NCCL_DEBUG=INFO\nset -ge NCCL_DEBUG")
    assert erased.env == {} and erased.assignments[-1].shape == "unset"


@pytest.mark.parametrize("text,env", [
    ("setx NCCL_DEBUG WARN", {"NCCL_DEBUG": "WARN"}),
    ('setx GLOO_SOCKET_IFNAME "Ethernet 2" /M', {"GLOO_SOCKET_IFNAME": "Ethernet 2"}),
    ("launchctl setenv NCCL_DEBUG WARN", {"NCCL_DEBUG": "WARN"}),
    ("systemctl --user set-environment NCCL_DEBUG=WARN NCCL_IB_DISABLE=1",
     {"NCCL_DEBUG": "WARN", "NCCL_IB_DISABLE": "1"}),
    ("sudo systemctl set-environment NCCL_DEBUG=WARN", {"NCCL_DEBUG": "WARN"}),
    ("conda env config vars set NCCL_DEBUG=WARN NCCL_P2P_DISABLE=1",
     {"NCCL_DEBUG": "WARN", "NCCL_P2P_DISABLE": "1"}),
    ("kubectl set env deployment/trainer NCCL_DEBUG=WARN", {"NCCL_DEBUG": "WARN"}),
    ("set-env NCCL_DEBUG WARN", {"NCCL_DEBUG": "WARN"}),
    ("$env.NCCL_DEBUG = 'WARN'", {"NCCL_DEBUG": "WARN"}),
    ("env -S 'NCCL_DEBUG=WARN NCCL_IB_DISABLE=1 python train.py'",
     {"NCCL_DEBUG": "WARN", "NCCL_IB_DISABLE": "1"}),
    ("#!/usr/bin/env -S NCCL_DEBUG=WARN python3\nimport torch", {"NCCL_DEBUG": "WARN"}),
])
def test_other_tools_set_commands(text, env):
    parsed = parse_env(text)
    assert parsed.env == env and not parsed.unparsed


@pytest.mark.parametrize("text", [
    "export NCCL_DEBUG=INFO\nexport -n NCCL_DEBUG", "export NCCL_DEBUG=INFO\ndeclare +x NCCL_DEBUG",
    "setenv NCCL_DEBUG INFO\nunsetenv NCCL_DEBUG", "export NCCL_DEBUG=INFO\nunset-env NCCL_DEBUG",
    "launchctl setenv NCCL_DEBUG INFO\nlaunchctl unsetenv NCCL_DEBUG",
    "systemctl set-environment NCCL_DEBUG=INFO\nsystemctl unset-environment NCCL_DEBUG",
    "kubectl set env deploy/x NCCL_DEBUG=INFO\nkubectl set env deploy/x NCCL_DEBUG-",
])
def test_commands_that_take_a_variable_out_of_the_environment(text):
    parsed = parse_env(text)
    assert parsed.env == {} and parsed.assignments[-1].shape == "unset"


def test_unset_of_a_function_removes_no_variable():
    assert parse_env("export NCCL_X=1\nunset -f NCCL_X").env == {"NCCL_X": "1"}


def test_set_name_equals_value_is_read_by_the_shell_the_text_shows():
    assert dialect("@echo off\nset NCCL_DEBUG=WARN") == CMD
    assert dialect("#!/bin/tcsh\nset NCCL_DEBUG=WARN") == CSH
    assert dialect("set NCCL_DEBUG=WARN") == ""
    cmd = parse_env('@echo off\nREM the job\nset NCCL_DEBUG=WARN\nset "GLOO_SOCKET_IFNAME=Eth 2"'
                    '\nset NCCL_SOCKET_IFNAME="eth0"')
    assert cmd.env == {"NCCL_DEBUG": "WARN", "GLOO_SOCKET_IFNAME": "Eth 2",
                       "NCCL_SOCKET_IFNAME": '"eth0"'}  # cmd.exe keeps quotes in the value
    csh = parse_env("#!/bin/csh\nsetenv NCCL_DEBUG WARN\nset NCCL_SOCKET_IFNAME = eth0")
    assert csh.env == {"NCCL_DEBUG": "WARN"}
    assert any("shell variable" in note for _, note in csh.notes)
    assert parse_env("set NCCL_DEBUG=WARN").env == {"NCCL_DEBUG": "WARN"}  # as before: a setting


def test_loose_net_reads_set_commands_in_prose_and_skips_unexported_or_commented_ones():
    parsed = parse_env("Before the run I typed set -gx NCCL_DEBUG DEBUG (fish) on each node.")
    assert [(p.name, p.value) for p in parsed.loose] == [("NCCL_DEBUG", "DEBUG")]
    found = [f for f in check_env(parsed.env, **parsed.job) if f.variable == "NCCL_DEBUG"]
    assert found and all(f.severity == "warning" for f in found)
    assert "set command" in found[0].message
    for text in ("They said set -g NCCL_DEBUG DEBUG there.", "# set -gx NCCL_DEBUG DEBUG",
                 "REM set NCCL_DEBUG=DEBUG", ":: setx NCCL_DEBUG DEBUG"):
        assert not parse_env(text).loose, text


@pytest.mark.timeout(120)  # a bound on a hang, not a speed
def test_many_set_lines_read_in_one_pass():
    text = "\n".join(f"set -gx NCCL_X{i} {i}" for i in range(5000))
    assert len(parse_env(text).env) == 5000
