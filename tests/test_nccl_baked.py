"""labkit.nccl.baked: an interface or HCA name that Python source sets as a default for its users
is a warning (right only on some of their hosts); a host's own config stays an info."""

from __future__ import annotations

import pytest

from labkit.nccl import check_env
from labkit.nccl.baked import baked_defaults
from labkit.nccl.paste import parse_env

GUARDED = '''def _set_envs_and_config(server_args):
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    if "GLOO_SOCKET_IFNAME" not in os.environ:
        os.environ["GLOO_SOCKET_IFNAME"] = "eth0"
'''


def findings_on(text: str, variable: str):
    parsed = parse_env(text)
    return [f for f in check_env(parsed.env, **parsed.job) if f.variable == variable]


def test_a_guarded_default_interface_is_a_warning_that_says_what_to_do():
    found = findings_on(GUARDED, "GLOO_SOCKET_IFNAME")
    assert [f.severity for f in found] == ["warning"]
    assert "default baked into code (line 4, set only where the environment lacks it, under " \
        "the 'if' on line 3)" in found[0].message
    assert "Unable to find address for: eth0" in found[0].message
    assert "leave GLOO_SOCKET_IFNAME unset" in found[0].fix and found[0].edit is None
    assert found[0].source.startswith("https://docs.pytorch.org/")


@pytest.mark.parametrize("code,name,value,how", [
    ('os.environ.setdefault("NCCL_SOCKET_IFNAME", "ens5")', "NCCL_SOCKET_IFNAME", "ens5",
     "os.environ.setdefault"),
    ('os.environ["NCCL_IB_HCA"] = os.environ.get("NCCL_IB_HCA", "mlx5_0")', "NCCL_IB_HCA",
     "mlx5_0", "the default of an os.environ.get that is set back"),
    ('def setup(ifname: str = "eth0", rank=0):\n    x = 1\n'
     '    os.environ["GLOO_SOCKET_IFNAME"] = ifname\n', "GLOO_SOCKET_IFNAME", "eth0",
     "the default of argument 'ifname' of setup()"),
    ('if not os.environ.get("NCCL_SOCKET_IFNAME"): os.environ["NCCL_SOCKET_IFNAME"] = "ib0"',
     "NCCL_SOCKET_IFNAME", "ib0", "set only where the environment lacks it, under the 'if' on "
     "line 1"),
])
def test_each_baked_form_is_found(code, name, value, how):
    assert [(b.name, b.value, b.how) for b in baked_defaults(code)] == [(name, value, how)]
    found = findings_on(code, name)
    assert [f.severity for f in found] == ["warning"] and "baked into code" in found[0].message


@pytest.mark.parametrize("text,variable", [
    ('os.environ["GLOO_SOCKET_IFNAME"] = "eth0"', "GLOO_SOCKET_IFNAME"),  # a script's own
    ("export NCCL_SOCKET_IFNAME=ens5", "NCCL_SOCKET_IFNAME"),  # a job script for one cluster
    ("env:\n  - name: NCCL_IB_HCA\n    value: =mlx5_0", "NCCL_IB_HCA"),
])
def test_a_hosts_own_config_stays_an_info(text, variable):
    assert not parse_env(text).baked
    assert [f.severity for f in findings_on(text, variable)] == ["info"]


@pytest.mark.parametrize("code", [
    'os.environ.setdefault("NCCL_SOCKET_IFNAME", "^docker0,lo")',  # an exclusion suits all
    'os.environ.setdefault("NCCL_P2P_DISABLE", "1")',  # not a host's name
    'def f(ifname="eth0"):\n    return ifname\nos.environ["GLOO_SOCKET_IFNAME"] = ifname',
])
def test_exclusions_other_variables_and_unrelated_defaults_are_not_baked_hosts(code):
    parsed = parse_env(code)
    assert not any("baked" in f.message for f in check_env(parsed.env, **parsed.job))


def test_a_known_host_still_checks_the_name_there():
    parsed = parse_env(GUARDED)
    found = [f for f in check_env(parsed.env, interfaces={"lo", "ens5"}, **parsed.job)
             if f.variable == "GLOO_SOCKET_IFNAME"]
    assert sorted(f.severity for f in found) == ["error", "warning"]
