"""labkit.nccl's rules across variables (``RULES``, each with its source) and plugin configs."""

from __future__ import annotations

import pytest

from labkit.nccl import check_env, parse_env_file, render_exports
from labkit.nccl.paste import parse_env
from labkit.nccl.rules import RULES


def found(env, severity, variable, text, **options):
    findings = check_env(env, **options)
    hits = [f for f in findings if (f.severity, f.variable) == (severity, variable)
            and text in f.message]
    assert hits, [f.to_dict() for f in findings]
    return hits[0]


def errors(env, **options):
    return [f.to_dict() for f in check_env(env, **options) if f.severity == "error"]


def test_every_rule_is_data_with_a_source():
    assert len({rule.name for rule in RULES}) == len(RULES) >= 12
    assert all(rule.source.startswith("https://") for rule in RULES)


@pytest.mark.parametrize("value,functions", [
    ("Tree", "Broadcast, Reduce, AllGather, ReduceScatter"),
    ("^Ring", "Broadcast, Reduce"),
    ("Tree,PAT", "Broadcast, Reduce"),
    ("allreduce:tree;broadcast:tree", "leaves Broadcast with"),
])
def test_algo_list_without_a_supported_algorithm_fails_since_2_24(value, functions):
    finding = found({"NCCL_ALGO": value}, "error", "NCCL_ALGO", functions)
    assert "no fallback" in finding.message and "nccl-algo" in finding.source
    assert not errors({"NCCL_ALGO": value}, nccl_version="2.23.4")
    found({"NCCL_ALGO": value}, "info", "NCCL_ALGO", "falls back", nccl_version="2.23.4")


def test_a_pasted_benchmark_of_covered_collectives_makes_a_lone_tree_a_warning():
    """all_reduce_perf with NCCL_ALGO=Tree runs; a training job (or an unknown one) fails."""
    found({"NCCL_ALGO": "Tree"}, "warning", "NCCL_ALGO", "benchmark pasted runs only AllReduce",
          runs=frozenset({"AllReduce"}))
    assert not errors({"NCCL_ALGO": "Tree"}, runs=frozenset({"AllReduce"}))
    assert errors({"NCCL_ALGO": "Tree"}, runs=frozenset({"AllReduce", "Broadcast"}))


def test_algo_lists_that_keep_every_collective_running_are_not_errors():
    for value in ("Ring", "Ring,Tree", "allreduce:tree", "^tree", "ring;allreduce:tree,ring"):
        assert not errors({"NCCL_ALGO": value}), value
    found({"NCCL_ALGO": "NVLS,Ring"}, "warning", "NCCL_ALGO", "debug-only")
    # offload benchmarks (CollNet/SHARP, NVLS): a warning, since the other collectives fail
    found({"NCCL_ALGO": "CollnetChain", "NCCL_COLLNET_ENABLE": "1"}, "warning", "NCCL_ALGO",
          "offload algorithms only")
    found({"NCCL_PROTO": "allreduce:^LL,LL128,Simple"}, "error", "NCCL_PROTO", "AllReduce")


def test_blocking_wait_with_async_error_handling_drops_the_watchdog():
    env = {"NCCL_BLOCKING_WAIT": "1", "NCCL_ASYNC_ERROR_HANDLING": "1"}
    finding = found(env, "warning", "NCCL_BLOCKING_WAIT", "no watchdog thread")
    assert "ProcessGroupNCCL.cpp" in finding.source
    found(env, "warning", "NCCL_ASYNC_ERROR_HANDLING", "ignored")
    found({"TORCH_NCCL_BLOCKING_WAIT": "true", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"}, "warning",
          "TORCH_NCCL_ASYNC_ERROR_HANDLING", "ignored")
    assert not [f for f in check_env({"TORCH_NCCL_BLOCKING_WAIT": "0",
                                      "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"})
                if f.severity != "info"]


@pytest.mark.parametrize("value,severity,text", [
    ("2", "warning", "4.096 us x 2^2 = 16 us per attempt, x 7 retries = 115 us"),
    ("10", "warning", "far too short"),
    ("16", "info", "shorter than NCCL's default"),
    ("0", "warning", "infinite"),
    ("22", None, ""),
])
def test_ib_timeout_arithmetic(value, severity, text):
    if severity is None:
        assert check_env({"NCCL_IB_TIMEOUT": value}) == []
        return
    found({"NCCL_IB_TIMEOUT": value}, severity, "NCCL_IB_TIMEOUT", text)
    assert "x 3 retries" in found({"NCCL_IB_TIMEOUT": "4", "NCCL_IB_RETRY_CNT": "3"}, "warning",
                                  "NCCL_IB_TIMEOUT", "far too short").message


def test_wildcards_are_literal_in_interface_and_hca_lists():
    finding = found({"NCCL_SOCKET_IFNAME": "^lo,docker*"}, "warning", "NCCL_SOCKET_IFNAME",
                    "'docker*' excludes nothing")
    assert finding.edit.value == "^lo,docker"
    found({"NCCL_SOCKET_IFNAME": "eth*,en*"}, "error", "NCCL_SOCKET_IFNAME", "on any host")
    found({"NCCL_IB_HCA": "mlx5_*"}, "error", "NCCL_IB_HCA", "no HCA matches on any host")
    found({"NCCL_SOCKET_IFNAME": "eth0,eth*"}, "warning", "NCCL_SOCKET_IFNAME", "matches nothing")
    found({"NCCL_IB_HCA": "^=mlx5_8,^=mlx5_14"}, "warning", "NCCL_IB_HCA", "start of the whole")


def test_ib_disable_with_an_external_ib_plugin_does_not_force_sockets():
    found({"NCCL_IB_DISABLE": "1", "NCCL_NET_PLUGIN": "libnccl-net-ibext.so"}, "warning",
          "NCCL_IB_DISABLE", "NCCL_IBEXT_DISABLE")
    found({"NCCL_IB_DISABLE": "1", "NCCL_IBEXT_DISABLE": "0"}, "warning", "NCCL_IB_DISABLE",
          "its IB transport stays on")
    found({"NCCL_IB_DISABLE": "1", "OFI_NCCL_PROTOCOL": "RDMA"}, "info", "NCCL_IB_DISABLE",
          "internal IB transport only")
    found({"NCCL_IB_DISABLE": "1", "NCCL_NET": "IB"}, "error", "NCCL_NET", "init fails")
    found({"NCCL_IB_DISABLE": "1", "NCCL_IB_HCA": "=mlx5_0"}, "warning", "NCCL_IB_HCA", "ignored")



SHARP_LOG = """NCCL_IB_DISABLE=1 not work
h:1:2 [0] NCCL INFO Plugin Path : /opt/hpcx/nccl_rdma_sharp_plugin/lib/libnccl-net.so
h:1:2 [0] NCCL INFO P2P plugin IBext_v8
h:1:2 [0] NCCL INFO Using network {net}
"""


@pytest.mark.parametrize("net,warns", [("IBext_v8", True), ("IB", False), ("Socket", False)])
def test_ib_disable_with_the_ib_plugin_a_pasted_log_shows_in_use(net, warns):
    parsed = parse_env(SHARP_LOG.format(net=net))
    hits = [f for f in check_env(parsed.env, **parsed.job)
            if f.variable == "NCCL_IB_DISABLE" and "NCCL_IBEXT_DISABLE" in f.message]
    assert bool(hits) == warns
    if warns:  # says what to set, the plugin's source and the maintainer's answer
        assert hits[0].severity == "warning" and f"'Using network {net}'" in hits[0].message
        assert "2f5ac02e" in hits[0].source and "ib_plugin.c#L376" in hits[0].source
        assert "nccl-tests/issues/227" in hits[0].message and "NCCL_IBEXT_DISABLE=1" in hits[0].fix


def test_ib_disable_with_the_plugin_s_ucx_transport_names_its_own_switch():
    parsed = parse_env(SHARP_LOG.format(net="UCX"))
    hit = found(parsed.env, "warning", "NCCL_IB_DISABLE", "NCCL_UCX_DISABLE", **parsed.job)
    assert "ucx_plugin.c#L46" in hit.source and "NCCL_IBEXT_DISABLE" not in hit.message


def test_ib_disable_with_the_ib_plugin_library_on_ld_library_path():
    path = "/opt/hpcx/nccl_rdma_sharp_plugin/lib:$LD_LIBRARY_PATH"
    found({"NCCL_IB_DISABLE": "1", "LD_LIBRARY_PATH": path}, "warning", "NCCL_IB_DISABLE",
          "LD_LIBRARY_PATH holds its nccl_rdma_sharp_plugin directory")
    quiet = check_env({"NCCL_IB_DISABLE": "1", "LD_LIBRARY_PATH": path,
                       "NCCL_NET_PLUGIN": "none"})  # no external net plugin is loaded
    assert not [f for f in quiet if "NCCL_IBEXT_DISABLE" in f.message]


# GCP's TCPX test config (container-engine-accelerators gpudirect-tcpx/nccl-config-latest.yaml).
TCPX = """-x NCCL_GPUDIRECTTCPX_FORCE_ACK=0 -x NCCL_SOCKET_IFNAME=eth0
-x NCCL_DYNAMIC_CHUNK_SIZE=524288 -x NCCL_P2P_NET_CHUNKSIZE=524288 -x NCCL_P2P_PCI_CHUNKSIZE=524288
-x NCCL_P2P_NVL_CHUNKSIZE=1048576 -x NCCL_NSOCKS_PERTHREAD=4 -x NCCL_SOCKET_NTHREADS=1
-x NCCL_MAX_NCHANNELS=8 -x NCCL_MIN_NCHANNELS=8 -x NCCL_GPUDIRECTTCPX_SOCKET_IFNAME=eth1,eth2
-x NCCL_GPUDIRECTTCPX_CTRL_DEV=eth0 -x NCCL_CROSS_NIC=0 -x NCCL_ALGO=Ring -x NCCL_PROTO=Simple
-x NCCL_NET_GDR_LEVEL=PIX -x NCCL_P2P_PXN_LEVEL=0"""


def test_vendor_settings_are_infos_and_fix_keeps_them():
    env = {}
    for word in TCPX.split():
        if "=" in word:
            name, value = word.split("=", 1)
            env[name] = value
    findings = check_env(env)
    assert {f.severity for f in findings} == {"info"}, [f.to_dict() for f in findings]
    for name in ("NCCL_ALGO", "NCCL_PROTO", "NCCL_NET_GDR_LEVEL"):
        finding = next(f for f in findings if f.variable == name)
        assert "documented configuration" in finding.message and finding.edit is None
    assert "remove" not in " ".join(f.message + f.fix for f in findings)
    assert parse_env_file(render_exports(env, findings)) == env


def test_aws_efa_config_hca_selects_nothing_and_efa_guide_advice():
    env = {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "RDMAV_FORK_SAFE": "1",
           "NCCL_IB_HCA": "mlx5", "NCCL_PROTO": "simple", "FI_EFA_NEW_THING": "1"}
    found(env, "info", "NCCL_IB_HCA", "selects nothing")
    found(env, "info", "FI_EFA_USE_DEVICE_RDMA", "not needed")
    found(env, "warning", "RDMAV_FORK_SAFE", "do not use")
    found(env, "info", "NCCL_PROTO", "documented configuration")
    assert not errors(env)


def test_torch_flight_recorder_and_desync_rules():
    found({"TORCH_NCCL_DUMP_ON_TIMEOUT": "1", "TORCH_FR_BUFFER_SIZE": "0"}, "warning",
          "TORCH_NCCL_DUMP_ON_TIMEOUT", "nothing to dump")
    found({"TORCH_NCCL_DUMP_ON_TIMEOUT": "1", "TORCH_NCCL_ENABLE_MONITORING": "0"}, "warning",
          "TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_NCCL_ENABLE_MONITORING=1")
    found({"TORCH_NCCL_DESYNC_DEBUG": "1", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"}, "info",
          "TORCH_NCCL_ASYNC_ERROR_HANDLING", "sets async error handling to 3")


def test_other_documented_contradictions():
    found({"NCCL_MNNVL_ENABLE": "1", "NCCL_CUMEM_ENABLE": "0"}, "error", "NCCL_MNNVL_ENABLE",
          "init fails")
    found({"NCCL_GRAPH_STREAM_ORDERING": "0", "NCCL_GRAPH_MIXING_SUPPORT": "1"}, "warning",
          "NCCL_GRAPH_STREAM_ORDERING", "not supported")
    found({"NCCL_SOCKET_NTHREADS": "16", "NCCL_NSOCKS_PERTHREAD": "8"}, "warning",
          "NCCL_NSOCKS_PERTHREAD", "lowers NCCL_NSOCKS_PERTHREAD to 4")
    found({"NCCL_P2P_DISABLE": "1", "NCCL_P2P_LEVEL": "NVL"}, "warning", "NCCL_P2P_LEVEL",
          "NCCL_P2P_DISABLE=1 wins")
    found({"NCCL_MIN_NCHANNELS": "8", "NCCL_MIN_CTAS": "16"}, "warning", "NCCL_MIN_NCHANNELS",
          "most restrictive")


@pytest.mark.parametrize("value,warns", [
    ("^docker0", True), ("^=docker0,virbr0", True), ("^docker,lo", False), ("^=lo", False),
    ("^l", False), ("eth0", False),
])
def test_an_exclude_list_that_leaves_lo_warns_that_bootstrap_may_pick_it(value, warns):
    findings = [f for f in check_env({"NCCL_SOCKET_IFNAME": value}) if "bootstrap" in f.message]
    assert bool(findings) == warns
    if warns:  # socket.cc: a set list replaces NCCL's order; getifaddrs lists lo first
        assert findings[0].severity == "warning" and "127.0.0.1" in findings[0].message
        assert findings[0].edit.value == value + ",lo" and "socket.cc" in findings[0].source
        assert "horovod/pull/700" in findings[0].message  # NCCL's maintainer said so there
    assert not [f for f in check_env({"NCCL_SOCKET_IFNAME": "^docker0"},
                                     interfaces={"eth0", "docker0"}) if "bootstrap" in f.message]


@pytest.mark.parametrize("name,version,severity,text", [
    ("NCCL_TUNER_PLUGIN", None, "warning", "NCCL_TUNER_PLUGIN=none disables it"),
    ("NCCL_TUNER_PLUGIN", "2.24.3", "warning", "'none' is not special there"),
    ("NCCL_PROFILER_PLUGIN", None, "warning", "NCCL_PROFILER_PLUGIN=none disables it"),
    ("NCCL_ENV_PLUGIN", None, "warning", "libnccl-env.so"),
    ("NCCL_NET_PLUGIN", None, "info", "the same as 'none'"),
    ("NCCL_NET_PLUGIN", "2.26.6", "warning", "still loads libnccl-net.so"),
    ("NCCL_TUNER_PLUGIN", "2.20.5", "info", "empty: treated as unset"),  # no default plugin yet
])
def test_an_empty_plugin_name_is_not_none(name, version, severity, text):
    found({name: ""}, severity, name, text, nccl_version=version)


def test_messages_say_only_what_applies_to_the_value():
    algo = " ".join(f.message for f in check_env({"NCCL_ALGO": "Ring"}))
    assert "fall back" not in algo and "fallback" not in algo
    proto = {v: " ".join(f.message for f in check_env({"NCCL_PROTO": v}))
             for v in ("Simple", "^LL128", "^LL", "LL128,Simple")}
    assert ["corrupt" in text for text in proto.values()] == [False, False, True, True]
    assert "Ring" not in found({"NCCL_PROTO": "allreduce:^LL,LL128,Simple"}, "error",
                               "NCCL_PROTO", "no protocol").fix
    hardware = found({"NCCL_ALGO": "allreduce:nvls"}, "warning", "NCCL_ALGO", "NVSwitch")
    assert "PAT" not in hardware.message and "CollNet" not in hardware.message
    efa = check_env({"NCCL_IB_DISABLE": "1", "FI_PROVIDER": "efa"})
    assert not any("use IP sockets instead" in f.message for f in efa)
    everything = {"NCCL_P2P_LEVEL": "5", "MASTER_ADDR": "node0", "FI_PROVIDER": "efa",
                  "NCCL_ALGO": "Tree", "NCCL_LAUNCH_MODE": "GROUP", "NCCL_IB_TIMEOUT": "3"}
    assert not [f for f in check_env(everything) if "guide" in (f.message + f.fix).lower()]


# --- what the paste shows of the job: the node count ------------------------------------------

@pytest.mark.parametrize("env", [{"NCCL_SOCKET_IFNAME": "lo"}, {"NCCL_SOCKET_IFNAME": "=lo"},
                                 {"GLOO_SOCKET_IFNAME": "lo"}])
def test_loopback_alone_on_several_nodes_is_a_warning(env):
    (name, _), = env.items()
    finding = found(env, "warning", name, "only the loopback interface", nodes=2)
    assert "2 nodes" in finding.message
    assert "nccl/issues/286" in finding.source or "rfc1122" in finding.source
    for nodes in (None, 1):  # one node, or a count the paste does not give: nothing new
        assert not [f for f in check_env(env, nodes=nodes) if f.severity != "info"]


def test_loopback_left_by_an_exclude_list_on_a_known_host_on_several_nodes():
    env = {"NCCL_SOCKET_IFNAME": "^eth"}
    found(env, "warning", "NCCL_SOCKET_IFNAME", "only the loopback", nodes=4,
          interfaces={"lo", "eth0"})
    assert not [f for f in check_env(env, nodes=4, interfaces={"lo", "eth0", "ib0"})
                if "only the loopback" in f.message]
    assert not [f for f in check_env({"NCCL_SOCKET_IFNAME": "lo,eth0"}, nodes=2)
                if f.severity != "info"]


def test_loopback_master_on_several_nodes():
    found({"MASTER_ADDR": "127.0.0.1"}, "warning", "MASTER_ADDR", "2 nodes", nodes=2)
    assert not [f for f in check_env({"MASTER_ADDR": "localhost"}, nodes=1)
                if f.severity != "info"]


def test_the_paste_carries_its_node_count_to_the_check():
    from labkit.nccl import parse_env

    parsed = parse_env("#!/bin/bash\n#SBATCH --nodes 2\nexport NCCL_SOCKET_IFNAME=lo\n"
                       "srun bash ./train.sh\n")
    assert parsed.job["nodes"] == 2
    found(parsed.env, "warning", "NCCL_SOCKET_IFNAME", "2 nodes", **parsed.job)
