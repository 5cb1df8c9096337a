"""labkit.nccl: check_env's findings per variable, host facts, env files in and out, the CLI.

Registry and version facts: tests/test_nccl_registry.py; rules across variables and plugins:
tests/test_nccl_rules.py. ``HOST`` describes a node (interfaces known, no RDMA devices), so node
facts are checked; without it they are infos.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from labkit.errors import ParameterError
from labkit.nccl import REGISTRY, check_env, parse_env_file, render_exports
from labkit.nccl.check import Host, local_interfaces
from labkit.nccl.cli import add_arguments, run
from labkit.nccl.names import is_relevant

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "data" / "guide_nccl_env.sh"
HOST = dict(interfaces={"lo", "eth0"}, hcas=set())


def pairs(findings) -> set[tuple[str, str]]:
    return {(f.severity, f.variable) for f in findings}


def guide_env() -> dict[str, str]:
    return parse_env_file(GUIDE.read_text())


# --- the guide's config -----------------------------------------------------------------------

def test_guide_config_for_another_node_has_no_errors_and_says_how_to_check_the_node():
    assert guide_env() == {
        "NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": "mlx5_0:1,mlx5_1:1", "NCCL_SOCKET_IFNAME": "eth0",
        "NCCL_DEBUG": "INFO", "NCCL_TOPO_FILE": "/etc/nccl/topo.xml", "NCCL_P2P_DISABLE": "0",
        "NCCL_P2P_LEVEL": "5"}
    findings = check_env(guide_env())
    assert pairs(findings) == {
        ("info", "NCCL_IB_DISABLE"),  # no-op
        ("warning", "NCCL_IB_HCA"),  # prefix: mlx5_1 also selects mlx5_10..19
        ("info", "NCCL_IB_HCA"),  # node fact: check with ibv_devinfo there
        ("info", "NCCL_SOCKET_IFNAME"),  # node fact
        ("warning", "NCCL_DEBUG"),  # INFO is for bring-up
        ("info", "NCCL_TOPO_FILE"),  # a file on the node
        ("info", "NCCL_P2P_DISABLE"),  # no-op
        ("warning", "NCCL_P2P_LEVEL"),  # debug-only; 5 reads as SYS
    }
    text = " ".join(f.message + " " + f.fix for f in findings)
    assert "mlx5_10 to mlx5_19" in text and "labkit nccl check` on the node" in text
    assert "no-op: the default; only =1 acts" in text
    assert "reads as SYS" in text and "does not turn it on" in text and "guide" not in text
    assert all(f.source.startswith("https://") for f in findings)


def test_guide_config_on_a_known_node_and_on_this_machine():
    findings = check_env(guide_env(), **HOST)
    assert ("info", "NCCL_SOCKET_IFNAME") in pairs(findings)
    assert "no InfiniBand devices visible" in " ".join(f.message for f in findings)
    here = check_env(guide_env(), host=Host.local())
    assert ("warning", "NCCL_TOPO_FILE") in pairs(here)  # /etc/nccl/topo.xml: ignored by NCCL
    has_eth0 = any(name.startswith("eth0") for name in local_interfaces())
    assert (("error", "NCCL_SOCKET_IFNAME") in pairs(here)) is not has_eth0


# --- one config each --------------------------------------------------------------------------

BAD = [
    ({"NCCL_SOCKET_IFNAME": "eth1"}, "error", "NCCL_SOCKET_IFNAME", "bootstrap fails"),
    ({"NCCL_SOCKET_IFNAME": "^lo,eth"}, "error", "NCCL_SOCKET_IFNAME", "selects no interface"),
    ({"NCCL_SOCKET_IFNAME": "=^eth0"}, "error", "NCCL_SOCKET_IFNAME", "'^' before '='"),
    ({"NCCL_SOCKET_IFNAME": "eth0, lo"}, "warning", "NCCL_SOCKET_IFNAME", "blank"),
    ({"NCCL_SOCKET_IFNAME": "lo"}, "info", "NCCL_SOCKET_IFNAME", "loopback only"),
    ({"NCCL_SOCKET_IFNAME": "eth0:1"}, "warning", "NCCL_SOCKET_IFNAME", "cuts the name"),
    ({"NCCL_SOCKET_IFNAME": "^lo,docker*"}, "warning", "NCCL_SOCKET_IFNAME", "excludes nothing"),
    ({"NCCL_SOCKET_IFNAME": "eth*"}, "error", "NCCL_SOCKET_IFNAME", "on any host"),
    ({"NCCL_IB_HCA": "mlx5_*"}, "error", "NCCL_IB_HCA", "falls back to TCP sockets"),
    ({"MASTER_ADDR": "[::1]", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1"}, "warning",
     "MASTER_ADDR", "loopback"),
    ({"NCCL_IB_HCA": "=mlx5_0:x"}, "error", "NCCL_IB_HCA", "port"),
    ({"GLOO_SOCKET_IFNAME": "eth9"}, "error", "GLOO_SOCKET_IFNAME", "Unable to find address"),
    ({"GLOO_SOCKET_IFNAME": "^lo"}, "error", "GLOO_SOCKET_IFNAME", "exact interface names"),
    ({"GLOO_SOCKET_IFNAME": "eth0,lo"}, "info", "GLOO_SOCKET_IFNAME", "same number"),
    ({"NCCL_P2P_LEVEL": "5"}, "warning", "NCCL_P2P_LEVEL", "reads as SYS"),
    ({"NCCL_P2P_LEVEL": "2"}, "warning", "NCCL_P2P_LEVEL", "as PXB"),
    ({"NCCL_P2P_LEVEL": "sys"}, "error", "NCCL_P2P_LEVEL", "case-sensitively"),
    ({"NCCL_P2P_LEVEL": "NVLINK"}, "error", "NCCL_P2P_LEVEL", "not a level"),
    ({"NCCL_P2P_LEVEL": "PXN"}, "info", "NCCL_P2P_LEVEL", "not documented"),
    ({"NCCL_NET_GDR_LEVEL": "NVL"}, "info", "NCCL_NET_GDR_LEVEL", "not documented"),
    ({"NCCL_ALGO": "Ring"}, "warning", "NCCL_ALGO", "debug-only"),
    ({"NCCL_ALGO": "ring,bogus"}, "error", "NCCL_ALGO", "unknown token 'bogus'"),
    ({"NCCL_ALGO": "tree;ring"}, "error", "NCCL_ALGO", "needs 'function:'"),
    ({"NCCL_ALGO": "allgather:collnet"}, "error", "NCCL_ALGO", "CollnetDirect"),
    ({"NCCL_ALGO": "alltoall:ring"}, "error", "NCCL_ALGO", "unknown function"),
    ({"NCCL_ALGO": "Tree"}, "error", "NCCL_ALGO", "no fallback"),
    ({"NCCL_PROTO": "LL256"}, "error", "NCCL_PROTO", "unknown token"),
    ({"NCCL_PROTO": "^LL128"}, "warning", "NCCL_PROTO", "debug-only"),
    ({"NCCL_SHM_DISABLE": "0"}, "info", "NCCL_SHM_DISABLE", "only =1 acts"),
    ({"NCCL_IB_DISABLE": "true"}, "error", "NCCL_IB_DISABLE", "reads 0"),
    ({"NCCL_IB_DISABLE": "1"}, "warning", "NCCL_IB_DISABLE", "debug-only"),
    ({"NCCL_BUFFSIZE": "4194304"}, "info", "NCCL_BUFFSIZE", "no-op"),
    ({"NCCL_BUFFSIZE": "3000000"}, "info", "NCCL_BUFFSIZE", "power of 2"),
    ({"NCCL_NTHREADS": "100"}, "warning", "NCCL_NTHREADS", "multiple of 32"),
    ({"NCCL_SOCKET_FAMILY": "af_inet6"}, "error", "NCCL_SOCKET_FAMILY", "case-sensitively"),
    ({"NCCL_BLOCKING_WAIT": "1"}, "warning", "NCCL_BLOCKING_WAIT", "renamed to TORCH_"),
    ({"NCCL_BLOCKING_WAIT": "1"}, "info", "NCCL_BLOCKING_WAIT", "no watchdog thread"),
    ({"NCCL_ASYNC_ERROR_HANDLING": "1"}, "warning", "NCCL_ASYNC_ERROR_HANDLING", "is deprecated"),
    ({"TORCH_NCCL_BLOCKING_WAIT": "1"}, "info", "TORCH_NCCL_BLOCKING_WAIT", "not fast"),
    ({"TORCH_NCCL_BLOCKING_WAIT": "maybe"}, "error", "TORCH_NCCL_BLOCKING_WAIT", "not a boolean"),
    ({"TORCH_NCCL_ASYNC_ERROR_HANDLING": "4"}, "error", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "0, 1"),
    ({"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"}, "warning", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
     "hang"),
    ({"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"}, "info", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "no-op"),
    ({"TORCH_NCCL_TRACE_BUFFER_SIZE": "100"}, "warning", "TORCH_NCCL_TRACE_BUFFER_SIZE",
     "TORCH_FR_BUFFER_SIZE"),
    ({"TORCH_FR_BUFFER_SIZE": "0"}, "info", "TORCH_FR_BUFFER_SIZE", "flight recorder off"),
    ({"TORCH_FR_BUFFER_SIZE": "lots"}, "error", "TORCH_FR_BUFFER_SIZE", "Invalid value"),
    ({"TORCH_DISTRIBUTED_DEBUG": "verbose"}, "error", "TORCH_DISTRIBUTED_DEBUG", "ValueError"),
    ({"TORCH_DISTRIBUTED_DEBUG": "detail"}, "warning", "TORCH_DISTRIBUTED_DEBUG", "performance"),
    ({"TORCH_CPP_LOG_LEVEL": "loud"}, "warning", "TORCH_CPP_LOG_LEVEL", "keeps WARNING"),
    ({"NCCL_DEBUG": "verbose"}, "error", "NCCL_DEBUG", "logs nothing"),
    ({"NCCL_DEBUG": "trace"}, "warning", "NCCL_DEBUG", "bring-up"),
    ({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,FOO"}, "error", "NCCL_DEBUG_SUBSYS",
     "rejects the whole list"),
    ({"NCCL_DEBUG_SUBSYS": "[INIT|COLL|NET]"}, "warning", "NCCL_DEBUG_SUBSYS", "usage pattern"),
    ({"NCCL_DEBUG_SUBSYS": "^COLL"}, "info", "NCCL_DEBUG_SUBSYS", "without NCCL_DEBUG=INFO"),
    ({"NCCL_DEBUG_FILE": "~/nccl.log"}, "error", "NCCL_DEBUG_FILE", "'~'"),
    ({"NCCL_DEBUG_FILE": "/tmp/nccl.log"}, "warning", "NCCL_DEBUG_FILE", "%h.%p"),
    ({"NCCL_DEBUG_FILE": "/tmp/nccl.%r.log"}, "warning", "NCCL_DEBUG_FILE",
     "'%r' is not a conversion NCCL expands"),
    ({"NCCL_MIN_NCHANNELS": "4"}, "warning", "NCCL_MIN_NCHANNELS", "NCCL_MIN_CTAS"),
    ({"NCCL_MIN_CTAS": "8", "NCCL_MAX_CTAS": "4"}, "warning", "NCCL_MIN_CTAS", "above"),
    ({"NCCL_CROSS_NIC": "3"}, "warning", "NCCL_CROSS_NIC", "documented"),
    ({"NCCL_IB_RETRY_CNT": "9"}, "error", "NCCL_IB_RETRY_CNT", "out of range"),
    ({"RANK": "8", "WORLD_SIZE": "8"}, "error", "RANK", "ranks go 0 to 7"),
    ({"WORLD_SIZE": "eight"}, "error", "WORLD_SIZE", "not an integer"),
    ({"MASTER_PORT": "70000"}, "error", "MASTER_PORT", "not a TCP port"),
    ({"MASTER_PORT": "80"}, "info", "MASTER_PORT", "privileged"),
    ({"LOCAL_WORLD_SIZE": "16", "WORLD_SIZE": "8"}, "error", "LOCAL_WORLD_SIZE", "above"),
    ({"LOCAL_RANK": "4", "LOCAL_WORLD_SIZE": "4"}, "error", "LOCAL_RANK", "LOCAL_RANK=4"),
    ({"WORLD_SIZE": "10", "LOCAL_WORLD_SIZE": "4"}, "info", "WORLD_SIZE", "not a multiple"),
    ({"RANK": "$NODE_RANK", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"}, "warning", "RANK",
     "do not set RANK yourself"),
    ({"RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"}, "warning", "RANK",
     "torchrun sets RANK"),
    ({"MASTER_ADDR": "node1"}, "info", "MASTER_ADDR", "host name"),
    ({"MASTER_ADDR": "node_1!"}, "error", "MASTER_ADDR", "neither an IP address"),
    ({"MASTER_ADDR": "127.0.0.1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"}, "warning",
     "MASTER_ADDR", "loopback"),
    ({"PET_RDZV_BACKEND": "etcd"}, "warning", "PET_RDZV_BACKEND", "legacy"),
    ({"PET_RDZV_BACKEND": "etcd-v2"}, "info", "PET_RDZV_BACKEND", "v2 API"),
    ({"PET_RDZV_BACKEND": "zookeeper"}, "warning", "PET_RDZV_BACKEND", "not a built-in"),
    ({"PET_RDZV_ENDPOINT": "10.0.0.1:port"}, "error", "PET_RDZV_ENDPOINT", "not a number"),
    ({"PET_NNODES": "4:2"}, "error", "PET_NNODES", "MIN:MAX"),
    ({"TORCHELASTIC_RESTART_COUNT": "0"}, "warning", "TORCHELASTIC_RESTART_COUNT",
     "torchrun sets it"),
    ({"NCCL_FOO_BAR": "1"}, "warning", "NCCL_FOO_BAR", "not a variable NCCL reads"),
    ({"NCCL_SOCKET_IFNAM": "eth0"}, "warning", "NCCL_SOCKET_IFNAM", "did you mean"),
    ({"NCCL_DEBUG": ""}, "info", "NCCL_DEBUG", "empty"),
]


@pytest.mark.parametrize("env,severity,variable,text", BAD,
                         ids=[f"{i:02d}-{row[2]}" for i, row in enumerate(BAD)])
def test_bad_config_yields_its_finding(env, severity, variable, text):
    findings = check_env(env, **HOST)
    matching = [f for f in findings if (f.severity, f.variable) == (severity, variable)]
    assert matching, f"no {severity} on {variable} in {[f.to_dict() for f in findings]}"
    assert any(text in f.message + " " + f.fix for f in matching), [f.message for f in matching]
    assert all(f.source.startswith("https://") for f in findings), [f.to_dict() for f in findings]


GOOD = {"NCCL_SOCKET_IFNAME": "=eth0", "GLOO_SOCKET_IFNAME": "eth0", "NCCL_DEBUG": "WARN",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "29500", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4",
        "PET_RDZV_BACKEND": "c10d", "PET_RDZV_ENDPOINT": "10.0.0.1:29400",
        "PET_NNODES": "2", "PET_NPROC_PER_NODE": "gpu", "TORCH_CPP_LOG_LEVEL": "info"}


@pytest.mark.parametrize("env", [row[0] for row in BAD] + [GOOD, {}],
                         ids=[f"{i:02d}" for i in range(len(BAD) + 2)])
def test_fix_output_passes_its_own_check(env):
    fixed = parse_env_file(render_exports(env, check_env(env, **HOST)))
    again = [f.to_dict() for f in check_env(fixed, **HOST) if f.severity == "error"]
    assert not again, (env, fixed, again)


def test_an_unknown_subsystem_rejects_the_whole_list_only_from_nccl_2_30_3():
    env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET,VERSION"}
    [new] = [f for f in check_env(env) if f.variable == "NCCL_DEBUG_SUBSYS"]
    assert new.severity == "error" and "INIT, BOOTSTRAP, ENV" in new.message
    assert "parser_bitset.h" in new.source
    [old] = [f for f in check_env(env, nccl_version="2.29.7") if f.variable == "NCCL_DEBUG_SUBSYS"]
    assert old.severity == "warning" and "skips it" in old.message


def test_socket_transport_settings_are_not_for_efa_but_kept_for_tcpx():
    efa = {"FI_PROVIDER": "efa", "NCCL_SOCKET_NTHREADS": "8", "NCCL_NSOCKS_PERTHREAD": "8"}
    found = [f for f in check_env(efa) if "Not applicable for EFA" in f.message]
    assert sorted((f.severity, f.variable) for f in found) == [
        ("warning", "NCCL_NSOCKS_PERTHREAD"), ("warning", "NCCL_SOCKET_NTHREADS")]
    tcpx = {"NCCL_GPUDIRECTTCPX_SOCKET_IFNAME": "eth1", "NCCL_SOCKET_NTHREADS": "1",
            "NCCL_NSOCKS_PERTHREAD": "4"}
    assert not [f for f in check_env(tcpx) if "EFA" in f.message]


def test_node_facts_are_errors_only_where_the_node_is_known():
    for value in ("=ens1f0", "bond0", "ib0", "hsn0", "enp0s12"):  # NVIDIA's docs use =ens1f0
        other = check_env({"NCCL_SOCKET_IFNAME": value, "GLOO_SOCKET_IFNAME": value.strip("=")})
        assert {f.severity for f in other} == {"info"}, [f.to_dict() for f in other]
        known = check_env({"NCCL_SOCKET_IFNAME": value}, interfaces={"lo", "eth0"})
        assert ("error", "NCCL_SOCKET_IFNAME") in pairs(known)
    assert pairs(check_env({"NCCL_IB_HCA": "=mlx5_9"})) == {("info", "NCCL_IB_HCA")}
    assert pairs(check_env({"NCCL_TOPO_FILE": "/no/such/topo.xml"})) == {("info", "NCCL_TOPO_FILE")}


def test_prefix_lists_match_like_nccl():
    findings = check_env({"NCCL_SOCKET_IFNAME": "eth"}, interfaces={"lo", "eth0", "eth1"},
                         hcas=set())
    assert [f.message for f in findings if "selects eth0, eth1" in f.message]
    findings = check_env({"NCCL_IB_HCA": "mlx5_1:1"}, interfaces={"lo"},
                         hcas={"mlx5_1", "mlx5_10"})
    assert pairs(findings) == {("warning", "NCCL_IB_HCA")}
    findings = check_env({"NCCL_IB_HCA": "mlx5"}, interfaces={"lo"}, hcas={"mlx5_0", "mlx5_1"})
    assert [f.message for f in findings] == ["prefix 'mlx5' selects mlx5_0, mlx5_1 here"]
    findings = check_env({"NCCL_IB_HCA": "=mlx5_9"}, interfaces={"lo"}, hcas={"mlx5_0"})
    assert pairs(findings) == {("warning", "NCCL_IB_HCA")}
    assert "No device found" in findings[0].message
    assert check_env({"NCCL_IB_HCA": "^=mlx5_1,mlx5_4"}, interfaces={"lo"},
                     hcas={"mlx5_0", "mlx5_1"}) == []
    assert check_env({"NCCL_SOCKET_IFNAME": "^docker,lo"}, **HOST) == []
    assert check_env({"NCCL_SOCKET_IFNAME": "=eth0"}, **HOST) == []


def test_good_settings_are_quiet():
    assert check_env(GOOD, **HOST) == []


def test_inside_a_torchrun_worker_rank_variables_are_fine():
    worker = {"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4",
              "GROUP_RANK": "1", "TORCHELASTIC_RUN_ID": "job", "TORCHELASTIC_RESTART_COUNT": "0",
              "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
    assert [f for f in check_env(worker, **HOST) if f.severity != "info"] == []


def test_unknown_variables_are_never_errors_and_typo_hints_are_for_typos_only():
    env = {f"NCCL_MADE_UP_{i}": "x" for i in range(5)} | {"TORCH_NCCL_NEW_THING": "1",
                                                           "GLOO_DEVICE_TRANSPRT": "TCP"}
    findings = check_env(env, **HOST)
    assert len(findings) == 7 and {(f.variable.split("_")[0], f.severity) for f in findings} == {
        ("NCCL", "warning"), ("TORCH", "warning"), ("GLOO", "info")}  # a line that does nothing
    assert check_env({"PATH": "/usr/bin", "HOME": "/root"}, **HOST) == []
    timeout = check_env({"NCCL_TIMEOUT": "1800"})  # read by frameworks, not NCCL_IB_TIMEOUT
    assert len(timeout) == 1 and "did you mean" not in timeout[0].fix
    assert "NCCL_IB_TIMEOUT" not in timeout[0].fix
    fabric = check_env({"FI_EFA_FOO": "1", "OFI_NCCL_BAR": "1"})
    assert all("did you mean" not in f.fix and "NCCL reads" not in f.message for f in fabric)
    assert "did you mean TORCH_FR_BUFFER_SIZE?" in check_env({"TORCH_FR_BUFER_SIZE": "1"})[0].fix
    (lost,) = check_env({"CCL_NET_GDR_LEVEL": "PHB"})  # its first word lost a letter
    assert lost.severity == "warning" and "did you mean NCCL_NET_GDR_LEVEL?" in lost.fix
    other_tools = {"OMPI_MCA_btl": "tcp", "CUDA_VISIBLE_DEVICES": "0,1", "UCX_NET_DEVICES": "x",
                   "HF_HUB_DISABLE_XET": "1", "VLLM_LOGGING_LEVEL": "INFO"}
    assert check_env(other_tools) == []


@pytest.mark.parametrize("name,meant", [
    ("NCL_DEBUG", "NCCL_DEBUG"),  # a C lost: shorter than the one-edit search looks at
    ("NCLL_ALGO", "NCCL_ALGO"), ("NNCL_PROTO", "NCCL_PROTO"), ("NCCCL_DEBUG", "NCCL_DEBUG"),
    ("nccl_socket_ifname", "NCCL_SOCKET_IFNAME"),  # getenv: another name in lower case
    ("Ncl_Debug", "NCCL_DEBUG"), ("NCL_IBEXT_DISABLE", "NCCL_IBEXT_DISABLE"),  # a plugin's
])
def test_a_mangled_nccl_prefix_is_a_typo_warning_with_its_source(name, meant):
    (found,) = check_env({name: "1"})
    assert found.severity == "warning" and found.variable == name
    assert f"did you mean {meant}?" in found.fix and found.source == REGISTRY[meant].link
    assert found.edit is not None and found.edit.value == meant
    assert is_relevant(name)  # a live environment's mangled name is looked at too


def test_a_mangled_prefix_is_dead_even_where_the_meant_variable_is_set():
    findings = check_env({"CCL_NET_GDR_LEVEL": "PHB", "NCCL_NET_GDR_LEVEL": "PHB"})
    (lost,) = [f for f in findings if f.variable == "CCL_NET_GDR_LEVEL"]
    assert lost.severity == "warning" and "did you mean NCCL_NET_GDR_LEVEL?" in lost.fix
    assert "only that one is applied" in lost.message and lost.edit.action == "drop"
    assert "did you mean NCCL_DEBUG?" in check_env({"NCCL_debug": "INFO"})[0].fix


def test_other_libraries_prefixes_are_not_nccl_typos():
    oneccl = {"CCL_WORKER_COUNT": "4", "CCL_ATL_TRANSPORT": "ofi", "CCL_LOG_LEVEL": "info"}
    xccl = {"HCCL_BUFFSIZE": "200", "HCCL_SOCKET_IFNAME": "eth0"}  # Huawei's own (mangled.HCCL_DOC)
    assert check_env(oneccl) == [] and check_env(xccl) == []
    assert [f.severity for f in check_env({"RCCL_MSCCL_ENABLE": "1"})] == ["info"]  # RCCL's own
    assert not any(is_relevant(name) for name in {**oneccl, **xccl})


def test_a_oneccl_name_is_never_taken_for_a_lost_n(monkeypatch):
    from labkit.nccl import mangled
    from labkit.nccl.registry_oneccl import ONECCL_NAMES

    assert not [n for n in ONECCL_NAMES if "N" + n in REGISTRY]  # registry_oneccl's claim
    monkeypatch.setitem(REGISTRY, "NCCL_WORKER_COUNT", REGISTRY["NCCL_DEBUG"])  # were it NCCL's
    assert mangled.intended("CCL_WORKER_COUNT") is None
    assert mangled.intended("NCL_WORKER_COUNT") == "NCCL_WORKER_COUNT"


def test_real_variables_are_known_and_their_prefixes_watched():
    real = {"NCCL_IB_SL": "3", "NCCL_IB_TC": "106", "NCCL_NET_PLUGIN": "aws-ofi",
            "TORCH_NCCL_HIGH_PRIORITY": "1", "TORCH_FR_BUFFER_SIZE": "4000",
            "TORCH_FR_DUMP_TEMP_FILE": "/tmp/fr_", "NCCL_IBEXT_DISABLE": "1",
            "NCCL_P2P_PXN_LEVEL": "0", "NCCL_NVLS_ENABLE": "0", "OFI_NCCL_PROTOCOL": "RDMA"}
    assert all(name in REGISTRY and is_relevant(name) for name in real)
    assert not [f for f in check_env(real) if "not a variable" in f.message]
    assert is_relevant("TORCH_FR_SOMETHING_NEW") and is_relevant("FI_PROVIDER")


def test_topo_file_must_exist_and_be_xml_on_this_machine(tmp_path):
    here = Host.local()
    missing = check_env({"NCCL_TOPO_FILE": str(tmp_path / "none.xml")}, host=here)
    assert pairs(missing) == {("warning", "NCCL_TOPO_FILE")}
    assert "silently ignored" in missing[0].message
    junk = tmp_path / "junk.xml"
    junk.write_text("not xml at all")
    assert pairs(check_env({"NCCL_TOPO_FILE": str(junk)}, host=here)) == \
        {("error", "NCCL_TOPO_FILE")}
    other = tmp_path / "other.xml"
    other.write_text("<topology/>")
    assert pairs(check_env({"NCCL_TOPO_FILE": str(other)}, host=here)) == \
        {("warning", "NCCL_TOPO_FILE")}
    good = tmp_path / "topo.xml"
    good.write_text('<system version="1"><cpu numaid="0"><pci busid="0000:1b:00.0"/></cpu>'
                    "</system>")
    assert check_env({"NCCL_TOPO_FILE": str(good)}, host=here) == []
    assert check_env({"NCCL_TOPO_FILE": "~/topo.xml"})[0].severity == "error"


def test_finding_to_dict_keys_and_source():
    finding = check_env({"NCCL_P2P_LEVEL": "5"}, **HOST)[0]
    assert set(finding.to_dict()) == {"severity", "variable", "message", "fix", "source"}
    assert finding.to_dict()["source"].startswith("https://docs.nvidia.com/")


# --- env files --------------------------------------------------------------------------------

def test_parse_env_file_reads_what_bash_would_assign():
    text = "\n".join([
        "```bash", "bash", "#!/bin/bash", "# On every node, set these environment variables", "",
        "export A=1", 'B="two words"  # trailing comment', "export C='single # not a comment'",
        "D=x#y", "E=", 'export F="a\\"b"', "export  G=spaced   # Enables GPU-to-GPU",
        "not an assignment line", 'ssh $node "torchrun --nnodes=2"', "export H=1; echo hi",
        "I=$NODE_RANK          # 0 for master, 1, 2, ... for workers", "J=first", "J=second",
        "K=v\r", "export", "```",
    ])
    assert parse_env_file(text) == {
        "A": "1", "B": "two words", "C": "single # not a comment", "D": "x#y", "E": "",
        "F": 'a"b', "G": "spaced", "H": "1", "I": "$NODE_RANK", "J": "second", "K": "v"}


def test_render_exports_round_trip_leaves_no_errors_noops_or_old_names():
    env = guide_env() | {"NCCL_BLOCKING_WAIT": "1", "NCCL_ASYNC_ERROR_HANDLING": "3",
                         "NCCL_ALGO": "Ring", "NCCL_MIN_NCHANNELS": "4"}
    block = render_exports(env, check_env(env, **HOST))
    assert "# dropped NCCL_IB_DISABLE=0: no-op" in block
    assert "export NCCL_IB_HCA==mlx5_0:1,mlx5_1:1" in block
    assert "export NCCL_SOCKET_IFNAME==eth0" in block
    assert "# export NCCL_P2P_LEVEL=SYS  # debug-only; '5' reads as SYS" in block
    assert "export TORCH_NCCL_BLOCKING_WAIT=1" in block
    assert "# export NCCL_ALGO=Ring  # debug-only" in block
    fixed = parse_env_file(block)
    assert fixed == {"NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1", "NCCL_SOCKET_IFNAME": "=eth0",
                     "NCCL_DEBUG": "WARN", "TORCH_NCCL_BLOCKING_WAIT": "1",
                     "NCCL_TOPO_FILE": "/etc/nccl/topo.xml"}  # a file of the node: kept
    again = check_env(fixed, **HOST)
    assert not [f for f in again if f.severity == "error"]
    assert not [f for f in again if "no-op" in f.message]
    assert not [name for name in fixed if REGISTRY[name].deprecated_by]


def test_render_exports_keeps_shell_expansions_expanding():
    env = {"MASTER_ADDR": "$HEAD_NODE", "NCCL_DEBUG_FILE": "/tmp/nccl log.%h.%p"}
    block = render_exports(env, [])
    assert 'export MASTER_ADDR="$HEAD_NODE"' in block
    assert "export NCCL_DEBUG_FILE='/tmp/nccl log.%h.%p'" in block
    assert parse_env_file(block) == env


# --- CLI --------------------------------------------------------------------------------------

def parse_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def test_run_check_exit_codes_and_json_keys(tmp_path, capsys):
    broken = tmp_path / "broken.sh"
    broken.write_text("export NCCL_ALGO=Tree\nexport NCCL_SOCKET_IFNAME=ens1f0\n")
    assert run(parse_args("--env-file", str(broken), "--json")) == 1  # Tree alone, NCCL >= 2.24
    rows = json.loads(capsys.readouterr().out)
    keys = {"severity", "variable", "message", "fix", "source"}
    assert rows and all(set(row) == keys for row in rows)
    assert {(r["severity"], r["variable"]) for r in rows if r["severity"] == "error"} == \
        {("error", "NCCL_ALGO")}  # the interface is a fact of another node: an info
    assert run(parse_args("--env-file", str(broken), "--nccl-version", "2.23.4")) == 0
    assert "falls back" in capsys.readouterr().out
    fine = tmp_path / "fine.sh"
    fine.write_text("export NCCL_DEBUG=WARN\nexport TORCH_NCCL_ASYNC_ERROR_HANDLING=1\n")
    assert run(parse_args("--env-file", str(fine))) == 0
    assert "no findings" in capsys.readouterr().out
    with pytest.raises(ParameterError, match="--nccl-version"):
        run(parse_args("--env-file", str(fine), "--nccl-version", "latest"))


def test_run_check_this_host_checks_interfaces_here(tmp_path, capsys):
    path = tmp_path / "env.sh"
    path.write_text("export NCCL_SOCKET_IFNAME==no-such-if0\n")
    assert run(parse_args("--env-file", str(path))) == 0
    assert run(parse_args("--env-file", str(path), "--this-host")) == 1
    assert "selects no interface on this host" in capsys.readouterr().out


def test_run_check_table_and_fix(capsys):
    assert run(parse_args("--env-file", str(GUIDE))) == 0
    table = capsys.readouterr().out
    assert "WARNING  NCCL_P2P_LEVEL" in table and "fix:" in table
    run(parse_args("--env-file", str(GUIDE), "--fix"))
    out, err = capsys.readouterr()
    assert out.startswith("# Corrected by labkit nccl check") and "NCCL_TOPO_FILE" in err
    assert parse_env_file(out)["NCCL_DEBUG"] == "WARN"


def test_run_check_reads_only_relevant_variables_from_the_environment(monkeypatch, capsys):
    import os
    for name in list(os.environ):
        if is_relevant(name):
            monkeypatch.delenv(name)
    monkeypatch.setenv("NCCL_P2P_LEVEL", "NVLINK")
    monkeypatch.setenv("SOME_OTHER_THING", "x")
    assert run(parse_args("--json")) == 1
    rows = json.loads(capsys.readouterr().out)
    assert {r["variable"] for r in rows} == {"NCCL_P2P_LEVEL"}


def test_run_check_missing_file_is_a_parameter_error(tmp_path):
    with pytest.raises(ParameterError, match="cannot read"):
        run(parse_args("--env-file", str(tmp_path / "nope.sh")))


def test_yaml_null_and_nccl_conf_lines_reach_the_checker_as_the_launcher_and_nccl_see_them():
    assert parse_env_file("env_vars:\n  NCCL_DEBUG: null\n  NCCL_ALGO: ~\n") == {}
    env = parse_env_file("echo NCCL_SOCKET_IFNAME=^docker0 >> /etc/nccl.conf\n")
    assert env == {"NCCL_SOCKET_IFNAME": "^docker0"}
    assert any("lo" in f.message and f.severity == "warning" for f in check_env(env))


# --- values that are not literals yet: computed, placeholders, '~' ----------------------------

def test_a_computed_value_is_not_checked_as_a_literal():
    for value in ("`hostname`", "$(hostname -s)", "$MASTER"):
        findings = check_env({"MASTER_ADDR": value})
        assert pairs(findings) == {("info", "MASTER_ADDR")}, findings
        assert "not checked here" in findings[0].message
    assert "command substitution" in check_env({"MASTER_ADDR": "`hostname`"})[0].message


@pytest.mark.parametrize("env,name", [
    ({"MASTER_ADDR": "<IP_address_of_node_1>"}, "MASTER_ADDR"),
    ({"NCCL_IB_HCA": "<your-hca>"}, "NCCL_IB_HCA"),
    ({"NCCL_SOCKET_IFNAME": "^<iface>"}, "NCCL_SOCKET_IFNAME"),
    ({"NCCL_ALGO": "<algo>"}, "NCCL_ALGO"),
    ({"MASTER_PORT": "<port of node 0>"}, "MASTER_PORT"),
])
def test_a_placeholder_is_a_warning_that_says_so_never_an_error(env, name):
    findings = check_env(env)
    assert not [f for f in findings if f.severity == "error"], findings
    assert [f for f in findings if f.variable == name and f.severity == "warning"
            and "placeholder" in f.message]


def test_a_tilde_nccl_keeps_is_an_error_with_its_source_and_one_the_shell_expands_is_not():
    cases = {"NCCL_TOPO_FILE": "src/graph/xml.cc", "NCCL_DEBUG_FILE": "src/debug.cc",
             "NCCL_CONF_FILE": "#nccl-conf-file", "NCCL_TOPO_DUMP_FILE": "src/graph/xml.cc"}
    for name, source in cases.items():
        env = {name: "~/x.xml"}
        error = next(f for f in check_env(env) if f.severity == "error")
        assert error.variable == name and source in error.source
        assert "fopen" in error.message or "does not accept the ~" in error.message
        expanded = check_env(env, tilde={name})
        assert not [f for f in expanded if f.severity == "error"], expanded
        assert any("shell expands" in f.message and "Tilde-Expansion" in f.source
                   for f in expanded)


def test_an_expanded_tilde_is_checked_as_the_path_it_becomes(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "t.xml").write_text('<system version="1"></system>')
    env = {"NCCL_TOPO_FILE": "~/t.xml"}
    host = Host.described({"lo"}, files=True)
    assert not [f for f in check_env(env, host=host, tilde={"NCCL_TOPO_FILE"})
                if f.severity != "info"]


def test_ib_retry_count_zero_is_a_warning_with_its_source():
    finding = next(f for f in check_env({"NCCL_IB_RETRY_CNT": "0"})
                   if f.variable == "NCCL_IB_RETRY_CNT")
    assert finding.severity == "warning" and "no retransmission" in finding.message
    assert finding.source.endswith("src/transport/net_ib/connect.cc#L16")
    assert pairs(check_env({"NCCL_IB_RETRY_CNT": "7"})) == {("info", "NCCL_IB_RETRY_CNT")}
    timeout = next(f for f in check_env({"NCCL_IB_TIMEOUT": "1", "NCCL_IB_RETRY_CNT": "0"})
                   if f.variable == "NCCL_IB_TIMEOUT")
    assert "no retry" in timeout.message and "x 7 retries" not in timeout.message
