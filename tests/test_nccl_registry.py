"""labkit.nccl's registry: every variable its sources name, with versions, ranges and links.

The lists below are copied from the sources (NCCL's env page, 2.30; torch 2.13's headers, read
from the installed torch when it is there), so a registry that drops a name fails here.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from labkit.errors import ParameterError
from labkit.nccl import REGISTRY, check_env
from labkit.nccl.registry import NEWEST_NCCL, plugin_prefix, source_default
from labkit.nccl.registry_nccl_source import READS, RELEASES
from labkit.nccl.variable import version_tuple
from labkit.nccl.versions import NcclTarget

# NCCL's env page (docs/env.rst, NCCL 2.30): "System configuration" and "Debugging" sections.
SYSTEM = """SOCKET_IFNAME SOCKET_FAMILY SOCKET_MAGIC SOCKET_RETRY_CNT SOCKET_RETRY_SLEEP_MSEC
SOCKET_POLL_TIMEOUT_MSEC SOCKET_NTHREADS NSOCKS_PERTHREAD CROSS_NIC IB_HCA IB_TIMEOUT IB_RETRY_CNT
IB_GID_INDEX IB_ADDR_FAMILY IB_ADDR_RANGE IB_ROCE_VERSION_NUM IB_SL IB_TC IB_FIFO_TC
IB_RETURN_ASYNC_EVENTS OOB_NET_ENABLE OOB_NET_IFNAME UID_STAGGER_THRESHOLD UID_STAGGER_RATE NET
NET_PLUGIN TUNER_PLUGIN PROFILER_PLUGIN ENV_PLUGIN IGNORE_CPU_AFFINITY CONF_FILE DEBUG DEBUG_FILE
DEBUG_SUBSYS DEBUG_TIMESTAMP_FORMAT DEBUG_TIMESTAMP_LEVELS COLLNET_ENABLE COLLNET_NODE_THRESHOLD
CTA_POLICY NETDEVS_POLICY MULTI_RANK_GPU_ENABLE TOPO_FILE TOPO_DUMP_FILE SET_THREAD_NAME"""
DEBUGGING = """P2P_DISABLE P2P_LEVEL P2P_DIRECT_DISABLE SHM_DISABLE BUFFSIZE NTHREADS MAX_NCHANNELS
MIN_NCHANNELS CHECKS_DISABLE CHECK_POINTERS CHECK_MODE LAUNCH_MODE IB_DISABLE IB_AR_THRESHOLD
IB_OOO_RQ IB_QPS_PER_CONNECTION IB_SPLIT_DATA_ON_QPS IB_CUDA_SUPPORT IB_PCI_RELAXED_ORDERING
IB_ADAPTIVE_ROUTING IB_ECE_ENABLE MEM_SYNC_DOMAIN CUMEM_ENABLE CUMEM_HOST_ENABLE NET_GDR_LEVEL
IB_GDR_LEVEL NET_GDR_C2C NET_GDR_READ GDRCOPY_ENABLE GDRCOPY_FIFO_ENABLE GDRCOPY_SYNC_ENABLE
GDRCOPY_FLUSH_ENABLE NET_SHARED_BUFFERS NET_SHARED_COMMS IGNORE_NET_MISMATCH
IGNORE_COLLNET_MISMATCH SINGLE_RING_THRESHOLD LL_THRESHOLD TREE_THRESHOLD ALGO PROTO NVB_DISABLE
PXN_DISABLE P2P_PXN_LEVEL PXN_C2C RUNTIME_CONNECT GRAPH_REGISTER LOCAL_REGISTER
LEGACY_CUDA_REGISTER WIN_ENABLE SET_STACK_SIZE GRAPH_MIXING_SUPPORT GRAPH_STREAM_ORDERING
DMABUF_ENABLE P2P_NET_CHUNKSIZE P2P_LL_THRESHOLD ALLOC_P2P_NET_LL_BUFFERS COMM_BLOCKING
CGA_CLUSTER_SIZE MAX_CTAS MIN_CTAS NVLS_ENABLE IB_MERGE_NICS NET_MERGE_POLICY MNNVL_ENABLE
MNNVL_UUID MNNVL_CLIQUE_ID RAS_ENABLE RAS_ADDR RAS_TIMEOUT_FACTOR LAUNCH_ORDER_IMPLICIT
LAUNCH_RACE_FATAL IPC_USE_ABSTRACT_SOCKET SYM_GIN_KERNELS_ENABLE"""
TORCH_SPEC = importlib.util.find_spec("torch")
C10D = Path(TORCH_SPEC.origin).parent / "include/torch/csrc/distributed/c10d" \
    if TORCH_SPEC and TORCH_SPEC.origin else None


def names(block: str) -> list[str]:
    return ["NCCL_" + word for word in block.split()]


def test_every_documented_nccl_variable_is_known_and_in_its_section():
    for name in names(SYSTEM):
        assert name in REGISTRY and not REGISTRY[name].debug_only, name
        assert REGISTRY[name].documented and REGISTRY[name].doc.startswith("https://docs.nvidia")
    for name in names(DEBUGGING):
        assert name in REGISTRY and REGISTRY[name].debug_only, name


def test_every_name_nccl_source_reads_is_known_with_its_link():
    assert RELEASES[0] == "2.3.5" and RELEASES[-1] == NEWEST_NCCL
    assert len(READS) > 250
    for name, (first, removed, kind, _default, where) in READS.items():
        var = REGISTRY[name]
        assert var.owner == "nccl" and kind in ("int", "str")
        assert var.link.startswith("https://"), name
        assert re.fullmatch(r"v2\.\d+\.\d+-\d+/src/\S+#L\d+", where), where
        assert removed == "" or version_tuple(removed) > version_tuple(first)


def test_registry_entries_have_owner_kind_doc_and_a_known_replacement():
    for name, var in REGISTRY.items():
        assert var.name == name
        assert var.owner in ("nccl", "pytorch", "gloo", "torchrun", "plugin")
        assert var.doc.startswith("https://") and var.link.startswith("https://"), name
        assert var.meaning and var.kind and var.values
        if var.deprecated_by:
            assert var.deprecated_by in REGISTRY, name


def test_version_facts_come_from_the_source():
    assert REGISTRY["NCCL_IB_GDR_LEVEL"].removed == "2.4.2"  # renamed NCCL_NET_GDR_LEVEL in 2.4
    assert REGISTRY["NCCL_IB_CUDA_SUPPORT"].removed == "2.4.2"
    assert REGISTRY["NCCL_TREE_THRESHOLD"].removed == "2.5.6"
    assert REGISTRY["NCCL_LL_THRESHOLD"].removed == "2.5.6"
    launch = REGISTRY["NCCL_LAUNCH_MODE"]
    assert launch.deprecated == "2.9" and launch.removed is None  # deprecated, still read
    assert REGISTRY["NCCL_MIN_CTAS"].introduced == "2.17.1"
    assert REGISTRY["NCCL_IB_RETURN_ASYNC_EVENTS"].introduced == "2.23.4"
    assert [source_default("NCCL_IB_TIMEOUT", v) for v in ((2, 13, 4), (2, 18, 1), (2, 30, 7))] \
        == ["14", "18", "20"]


@pytest.mark.parametrize("name,version,text", [
    ("NCCL_IB_CUDA_SUPPORT", None, "no longer reads it: not read since 2.4.2"),
    ("NCCL_IB_GDR_LEVEL", None, "use NCCL_NET_GDR_LEVEL"),
    ("NCCL_TREE_THRESHOLD", None, "not read since 2.5.6"),
    ("NCCL_IB_RETURN_ASYNC_EVENTS", "2.18.1", "does not read it yet: NCCL reads it from 2.23.4"),
    ("NCCL_SHM_USE_CUDA_MEMCPY", "2.30.7", "not read since 2.30.7"),
    ("NCCL_LAUNCH_MODE", None, "deprecated since 2.9"),
])
def test_versions_give_warnings_naming_the_release(name, version, text):
    findings = check_env({name: "GROUP" if name == "NCCL_LAUNCH_MODE" else "1"},
                         nccl_version=version)
    assert any(f.severity == "warning" and text in f.message for f in findings), \
        [f.message for f in findings]
    assert check_env({"NCCL_IB_RETURN_ASYNC_EVENTS": "0"}, nccl_version="2.24.3") == []


def test_removed_name_is_renamed_by_fix_when_the_new_one_is_read():
    finding = next(f for f in check_env({"NCCL_IB_GDR_LEVEL": "PHB"}) if "no longer" in f.message)
    assert (finding.edit.action, finding.edit.value) == ("rename", "NCCL_NET_GDR_LEVEL")


def test_target_release_parsing():
    assert NcclTarget.parse("v2.21.5-1", "x").text == "2.21.5"
    assert NcclTarget.parse("2.21.5+cuda12.4", "x").text == "2.21.5"
    assert NcclTarget.parse(21805, "x").text == "2.18.5"  # NCCL_VERSION_CODE since 2.9
    assert NcclTarget.parse(2708, "x").text == "2.7.8"  # before 2.9
    assert NcclTarget.parse((2, 19, 3), "x").at_least("2.19")
    assert NcclTarget.newest().text == NEWEST_NCCL
    with pytest.raises(ParameterError):
        NcclTarget.parse("newest", "--nccl-version")


@pytest.mark.parametrize("env,version,severity,text", [
    ({"NCCL_MIN_NCHANNELS": "40"}, "2.21.5", "info", "clamps it to 32"),
    ({"NCCL_MAX_CTAS": "100"}, None, "info", "clamps it to 64"),
    ({"NCCL_SOCKET_NTHREADS": "32"}, None, "warning", "clamps it to 16"),
    ({"NCCL_MAX_NCHANNELS": "0"}, None, "info", "clamps it to 1"),
    ({"NCCL_MIN_CTAS": "0"}, None, "warning", "keeps its default"),
    ({"NCCL_IB_TIMEOUT": "32"}, None, "warning", "infinite"),
    ({"NCCL_NTHREADS": "1024"}, None, "warning", "uses 512"),
])
def test_ranges_follow_nccl_parsing(env, version, severity, text):
    findings = check_env(env, nccl_version=version)
    assert not [f for f in findings if f.severity == "error"], [f.to_dict() for f in findings]
    assert any(f.severity == severity and text in f.message for f in findings), \
        [f.to_dict() for f in findings]
    assert not [f for f in check_env({"NCCL_MIN_NCHANNELS": "40"}) if "clamp" in f.message]


@pytest.mark.skipif(C10D is None or not C10D.is_dir(), reason="torch's headers are not installed")
def test_every_torch_variable_in_torch_headers_is_known():
    text = " ".join(path.read_text() for path in C10D.glob("*.hpp"))
    found = set(re.findall(r'"((?:TORCH_NCCL|TORCH_FR|NCCL)_[A-Z0-9_]+)"', text))
    assert found and {"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_HIGH_PRIORITY"} <= found
    assert sorted(found - set(REGISTRY)) == []
    for name in ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
                 "TORCH_NCCL_USE_COMM_NONBLOCKING", "TORCH_FR_DUMP_DYNAMIC_FILE_NAME"):
        assert name in REGISTRY, name
    assert REGISTRY["TORCH_NCCL_TRACE_BUFFER_SIZE"].deprecated_by == "TORCH_FR_BUFFER_SIZE"
    assert REGISTRY["NCCL_BLOCKING_WAIT"].deprecated_by == "TORCH_NCCL_BLOCKING_WAIT"
    assert REGISTRY["TORCH_NCCL_ASYNC_ERROR_HANDLING"].default == "3"


def test_plugin_variables_and_prefixes():
    for name in ("OFI_NCCL_PROTOCOL", "OFI_NCCL_DISABLE_DMABUF", "FI_PROVIDER",
                 "FI_EFA_USE_DEVICE_RDMA", "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME",
                 "NCCL_FASTRAK_IFNAME", "NCCL_IBEXT_DISABLE", "NCCL_SHARP_DISABLE"):
        assert REGISTRY[name].owner == "plugin" and REGISTRY[name].plugin, name
    assert plugin_prefix("FI_CXI_ANYTHING")[0] == "libfabric"
    assert plugin_prefix("NCCL_FASTRAK_NEW")[0].startswith("GCP GPUDirect-TCPXO")
    assert plugin_prefix("NCCL_IB_HCA") is None
    removed = check_env({"OFI_NCCL_ENDPOINT_PER_COMM": "1"})
    assert removed[0].severity == "warning" and "ignored" in removed[0].message


def test_only_the_deprecated_value_of_launch_mode_is_deprecated():
    assert REGISTRY["NCCL_LAUNCH_MODE"].deprecated_values == ("GROUP",)
    group = [f.message for f in check_env({"NCCL_LAUNCH_MODE": "group"})]
    assert any(m.startswith("GROUP is deprecated since 2.9") for m in group)
    assert [(f.severity, f.message) for f in check_env({"NCCL_LAUNCH_MODE": "parallel"})] == [
        ("info", "no-op: the default")]


@pytest.mark.parametrize("env,new,action", [
    ({"NCCL_AVOID_RECORD_STREAMS": "1"}, "TORCH_NCCL_AVOID_RECORD_STREAMS", "rename"),
    ({"NCCL_AVOID_RECORD_STREAMS": "1", "TORCH_NCCL_AVOID_RECORD_STREAMS": "1"},
     "TORCH_NCCL_AVOID_RECORD_STREAMS", "drop"),
    ({"NCCL_NAN_CHECK": "1"}, "TORCH_NCCL_NAN_CHECK", "rename"),
    ({"NCCL_TRACE_BUFFER_SIZE": "100"}, "TORCH_FR_BUFFER_SIZE", "rename"),  # via the old name
])
def test_nccl_name_of_a_torch_only_variable_does_nothing(env, new, action):
    name = next(iter(env))
    finding = next(f for f in check_env(env) if f.variable == name)
    assert finding.severity == "warning" and "does nothing" in finding.message
    assert f"PyTorch reads TORCH_{name}" in finding.message and finding.fix == f"use {new}"
    assert finding.edit.action == action
    legacy = [f for f in check_env({"NCCL_BLOCKING_WAIT": "1"}) if "does nothing" in f.message]
    assert legacy == []  # a legacy name torch still reads keeps its rename finding
