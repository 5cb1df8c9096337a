"""labkit.nccl.netnames and labkit.nccl.domains: NCCL_NET against the names networks register,
and the value domains of NCCL's other name- and enum-valued variables, as NCCL's source compares
them (a name nothing registers is a warning: a private plugin may register it)."""

from __future__ import annotations

import pytest

from labkit.nccl.check import check_env
from labkit.nccl.netnames import REGISTERED, registered
from labkit.nccl.registry import REGISTRY
from labkit.nccl.registry_domains import SOURCE_VARIABLES


def on(variable: str, env: dict[str, str], **options) -> list:
    return [f for f in check_env(env, **options) if f.variable == variable]


@pytest.mark.parametrize("value", [
    "IB", "ib", "Socket", "SOCKET", "gIB", "GIB", "Libfabric", "AWS Libfabric", "OFI", "IBext",
    "IBext_v8", "UCX", "UCX-RMA", "GPUDirectTCPX_v7", "FasTrak",
])
def test_registered_names_are_quiet_in_any_case(value):
    assert on("NCCL_NET", {"NCCL_NET": value}) == []


def test_every_registered_name_cites_where_it_is_registered():
    assert all(src.startswith("https://") for _, src in REGISTERED.values())
    assert registered("ibext_v11") == "IBext" and registered("TCP") is None


@pytest.mark.parametrize("value,meant", [
    ("TCP", "Socket"), ("tcp", "Socket"), ("InfiniBand", "IB"), ("RoCE", "IB"),
    ("EFA", "Libfabric"), ("MyNet", None), ("Socket ", "Socket"), ('"Socket"', "Socket"),
])
def test_a_name_nothing_registers_is_a_warning_that_says_how_nccl_matches(value, meant):
    found = on("NCCL_NET", {"NCCL_NET": value})
    assert [f.severity for f in found] == ["warning"]
    assert "strcasecmp" in found[0].message and "Failed to initialize any NET plugin" in \
        found[0].message
    assert (meant is None and found[0].edit is None) or found[0].edit.value == meant


def test_with_no_external_plugin_loaded_only_ib_and_socket_match():
    assert [f.severity for f in on("NCCL_NET", {"NCCL_NET": "gIB", "NCCL_NET_PLUGIN": "none"})] \
        == ["error"]
    assert [f.severity for f in on("NCCL_NET", {"NCCL_NET": "TCP", "NCCL_NET_PLUGIN": "none"})] \
        == ["error"]
    assert on("NCCL_NET", {"NCCL_NET": "socket", "NCCL_NET_PLUGIN": "none"}) == []
    old = on("NCCL_NET", {"NCCL_NET": "gIB", "NCCL_NET_PLUGIN": "none"}, nccl_version="2.27.3")
    assert [f.severity for f in old] == ["warning"]  # "none" is special from 2.28.3


def test_before_2_13_4_the_case_of_the_name_matters():
    found = on("NCCL_NET", {"NCCL_NET": "socket"}, nccl_version="2.12.12")
    assert [f.severity for f in found] == ["error"] and "strcmp" in found[0].message
    assert on("NCCL_NET", {"NCCL_NET": "Socket"}, nccl_version="2.12.12") == []


@pytest.mark.parametrize("name,value,severity,text", [
    ("NCCL_IB_ADDR_FAMILY", "ipv6", "error", "keeps AF_INET"),
    ("NCCL_IB_ADDR_FAMILY", "ipv4", "warning", "by chance"),
    ("NCCL_NVLS_ENABLE", "3", "warning", "forced on"),
    ("NCCL_PAT_ENABLE", "5", "warning", "forced on"),
    ("NCCL_CROSS_NIC", "3", "warning", "searches as with 0"),
    ("NCCL_SHM_LOCALITY", "0", "warning", "uses 2"),
    ("NCCL_NET_MERGE_LEVEL", "sys", "warning", "falls back to LOC"),
    ("NCCL_IB_ROCE_VERSION_NUM", "3", "warning", "no GID matches"),
    ("NCCL_SHM_LOCALITY", "two", "error", "not an integer"),
])
def test_values_outside_a_domain_say_what_nccl_does_with_them(name, value, severity, text):
    found = [f for f in on(name, {name: value}) if not f.advice]
    assert [f.severity for f in found] == [severity] and text in found[0].message
    assert found[0].source.startswith("https://github.com/NVIDIA/nccl/blob/v2.30.7-1/")


@pytest.mark.parametrize("name,value", [
    ("NCCL_IB_ADDR_FAMILY", "AF_INET6"), ("NCCL_NVLS_ENABLE", "0"), ("NCCL_CROSS_NIC", "1"),
    ("NCCL_SHM_LOCALITY", "1"), ("NCCL_NET_MERGE_LEVEL", "PIX"), ("NCCL_PAT_ENABLE", "0"),
    ("NCCL_IB_ROCE_VERSION_NUM", "1"),
])
def test_values_inside_a_domain_are_quiet(name, value):
    assert [f for f in on(name, {name: value}) if f.severity != "info" and not f.advice] == []


def test_undocumented_name_valued_variables_have_kinds_and_sources():
    for name, (kind, _values, choices, _meaning, where) in SOURCE_VARIABLES.items():
        var = REGISTRY[name]
        assert (var.kind, var.choices, var.source) == (kind, choices, where)
        assert not var.documented and "v2.30.7-1/src/" in where
