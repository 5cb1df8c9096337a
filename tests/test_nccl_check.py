"""labkit.nccl: the registry, check_env's rules, env files in and out, and the check CLI."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from labkit.errors import ParameterError
from labkit.nccl import REGISTRY, check_env, parse_env_file, render_exports
from labkit.nccl.check import local_interfaces
from labkit.nccl.cli import add_arguments, run
from labkit.nccl.registry import is_relevant

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "data" / "guide_nccl_env.sh"
HOST = dict(interfaces={"lo", "eth0"}, hcas=set())


def pairs(findings) -> set[tuple[str, str]]:
    return {(f.severity, f.variable) for f in findings}


def guide_env() -> dict[str, str]:
    return parse_env_file(GUIDE.read_text())


# --- registry ---------------------------------------------------------------------------------

def test_registry_entries_have_owner_kind_and_doc_link():
    for name, var in REGISTRY.items():
        assert var.name == name
        assert var.owner in ("nccl", "pytorch", "gloo", "torchrun")
        assert var.doc.startswith("https://"), name
        assert var.meaning and var.kind and var.values
        if var.deprecated_by:
            assert var.deprecated_by in REGISTRY, name


def test_registry_marks_nccl_debugging_variables_debug_only():
    for name in ("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_IB_DISABLE", "NCCL_ALGO",
                 "NCCL_PROTO", "NCCL_SHM_DISABLE", "NCCL_NET_GDR_LEVEL", "NCCL_BUFFSIZE"):
        assert REGISTRY[name].debug_only, name
    for name in ("NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_DEBUG", "NCCL_TOPO_FILE"):
        assert not REGISTRY[name].debug_only, name
    assert REGISTRY["NCCL_BLOCKING_WAIT"].deprecated_by == "TORCH_NCCL_BLOCKING_WAIT"
    assert REGISTRY["NCCL_ASYNC_ERROR_HANDLING"].choices == ("0", "1", "2", "3")
    assert REGISTRY["TORCH_NCCL_ASYNC_ERROR_HANDLING"].default == "3"


# --- the guide's config -----------------------------------------------------------------------

def test_guide_config_yields_exactly_the_expected_findings():
    assert guide_env() == {
        "NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": "mlx5_0:1,mlx5_1:1", "NCCL_SOCKET_IFNAME": "eth0",
        "NCCL_DEBUG": "INFO", "NCCL_TOPO_FILE": "/etc/nccl/topo.xml", "NCCL_P2P_DISABLE": "0",
        "NCCL_P2P_LEVEL": "5"}
    findings = check_env(guide_env(), **HOST)
    assert pairs(findings) == {
        ("info", "NCCL_IB_DISABLE"),  # no-op
        ("warning", "NCCL_IB_HCA"),  # prefix: mlx5_1 also selects mlx5_10..19
        ("info", "NCCL_IB_HCA"),  # no InfiniBand devices visible on this host
        ("info", "NCCL_SOCKET_IFNAME"),  # prefix match, '=eth0' for exact
        ("warning", "NCCL_DEBUG"),  # INFO is for bring-up
        ("error", "NCCL_TOPO_FILE"),  # /etc/nccl/topo.xml does not exist here
        ("info", "NCCL_P2P_DISABLE"),  # no-op
        ("warning", "NCCL_P2P_LEVEL"),  # debug-only; 5 reads as SYS
    }
    text = " ".join(f.message for f in findings)
    assert "mlx5_10 to mlx5_19" in text
    assert "no InfiniBand devices visible on this host" in text
    assert "no-op: the default; only =1 acts" in text
    assert "reads as SYS" in text and "enables GPU-to-GPU direct transfers" in text


def test_guide_config_on_this_hosts_real_interfaces():
    here = local_interfaces()
    findings = check_env(guide_env(), hcas=set())
    assert ("error", "NCCL_TOPO_FILE") in pairs(findings)
    has_eth0 = any(name.startswith("eth0") for name in here)
    assert (("error", "NCCL_SOCKET_IFNAME") in pairs(findings)) is not has_eth0


# --- rules, one bad config each ---------------------------------------------------------------

BAD = [
    ({"NCCL_SOCKET_IFNAME": "eth1"}, "error", "NCCL_SOCKET_IFNAME", "bootstrap fails"),
    ({"NCCL_SOCKET_IFNAME": "^lo,eth"}, "error", "NCCL_SOCKET_IFNAME", "selects no interface"),
    ({"NCCL_SOCKET_IFNAME": "=^eth0"}, "error", "NCCL_SOCKET_IFNAME", "'^' before '='"),
    ({"NCCL_SOCKET_IFNAME": "eth0, lo"}, "error", "NCCL_SOCKET_IFNAME", "spaces"),
    ({"NCCL_SOCKET_IFNAME": "lo"}, "info", "NCCL_SOCKET_IFNAME", "loopback only"),
    ({"NCCL_SOCKET_IFNAME": "eth0:1"}, "warning", "NCCL_SOCKET_IFNAME", "cuts the name"),
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
    ({"NCCL_ALGO": "Ring"}, "warning", "NCCL_ALGO", "raw bandwidth"),
    ({"NCCL_ALGO": "ring,bogus"}, "error", "NCCL_ALGO", "unknown token 'bogus'"),
    ({"NCCL_ALGO": "tree;ring"}, "error", "NCCL_ALGO", "needs 'function:'"),
    ({"NCCL_ALGO": "allgather:collnet"}, "error", "NCCL_ALGO", "CollnetDirect"),
    ({"NCCL_ALGO": "alltoall:ring"}, "error", "NCCL_ALGO", "unknown function"),
    ({"NCCL_ALGO": "allreduce:tree;broadcast:ring"}, "info", "NCCL_ALGO", "NCCL >= 2.24"),
    ({"NCCL_PROTO": "LL256"}, "error", "NCCL_PROTO", "unknown token"),
    ({"NCCL_PROTO": "^LL128"}, "warning", "NCCL_PROTO", "debug-only"),
    ({"NCCL_SHM_DISABLE": "0"}, "info", "NCCL_SHM_DISABLE", "only =1 acts"),
    ({"NCCL_IB_DISABLE": "true"}, "error", "NCCL_IB_DISABLE", "NCCL reads an integer"),
    ({"NCCL_IB_DISABLE": "1"}, "warning", "NCCL_IB_DISABLE", "debug-only"),
    ({"NCCL_BUFFSIZE": "4194304"}, "info", "NCCL_BUFFSIZE", "no-op"),
    ({"NCCL_BLOCKING_WAIT": "1"}, "warning", "NCCL_BLOCKING_WAIT", "renamed to TORCH_"),
    ({"NCCL_BLOCKING_WAIT": "1"}, "info", "NCCL_BLOCKING_WAIT", "10 min by default"),
    ({"NCCL_ASYNC_ERROR_HANDLING": "1"}, "warning", "NCCL_ASYNC_ERROR_HANDLING", "legacy alias"),
    ({"TORCH_NCCL_BLOCKING_WAIT": "1"}, "info", "TORCH_NCCL_BLOCKING_WAIT", "not fast"),
    ({"TORCH_NCCL_BLOCKING_WAIT": "maybe"}, "error", "TORCH_NCCL_BLOCKING_WAIT", "not a boolean"),
    ({"TORCH_NCCL_ASYNC_ERROR_HANDLING": "4"}, "error", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "0, 1"),
    ({"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"}, "warning", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
     "hang"),
    ({"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"}, "info", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "no-op"),
    ({"TORCH_NCCL_DUMP_ON_TIMEOUT": "1", "TORCH_NCCL_TRACE_BUFFER_SIZE": "0"}, "warning",
     "TORCH_NCCL_DUMP_ON_TIMEOUT", "nothing to dump"),
    ({"TORCH_DISTRIBUTED_DEBUG": "verbose"}, "error", "TORCH_DISTRIBUTED_DEBUG", "ValueError"),
    ({"TORCH_DISTRIBUTED_DEBUG": "detail"}, "warning", "TORCH_DISTRIBUTED_DEBUG", "performance"),
    ({"TORCH_CPP_LOG_LEVEL": "loud"}, "warning", "TORCH_CPP_LOG_LEVEL", "keeps WARNING"),
    ({"NCCL_DEBUG": "verbose"}, "error", "NCCL_DEBUG", "logs nothing"),
    ({"NCCL_DEBUG": "trace"}, "warning", "NCCL_DEBUG", "bring-up"),
    ({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,FOO"}, "warning", "NCCL_DEBUG_SUBSYS",
     "'FOO'"),
    ({"NCCL_DEBUG_SUBSYS": "^COLL"}, "info", "NCCL_DEBUG_SUBSYS", "without NCCL_DEBUG=INFO"),
    ({"NCCL_DEBUG_FILE": "~/nccl.log"}, "error", "NCCL_DEBUG_FILE", "'~'"),
    ({"NCCL_DEBUG_FILE": "/tmp/nccl.log"}, "info", "NCCL_DEBUG_FILE", "%h.%p"),
    ({"NCCL_IB_DISABLE": "1", "NCCL_IB_HCA": "=mlx5_0"}, "warning", "NCCL_IB_HCA",
     "NCCL_IB_DISABLE=1"),
    ({"NCCL_IB_DISABLE": "1", "NCCL_NET": "IB"}, "error", "NCCL_NET", "init fails"),
    ({"NCCL_P2P_DISABLE": "1", "NCCL_P2P_LEVEL": "NVL"}, "warning", "NCCL_P2P_LEVEL",
     "NCCL_P2P_DISABLE=1 wins"),
    ({"NCCL_SOCKET_NTHREADS": "16", "NCCL_NSOCKS_PERTHREAD": "8"}, "error",
     "NCCL_NSOCKS_PERTHREAD", "at most 64"),
    ({"NCCL_SOCKET_NTHREADS": "32"}, "error", "NCCL_SOCKET_NTHREADS", "out of range"),
    ({"NCCL_MIN_NCHANNELS": "4"}, "warning", "NCCL_MIN_NCHANNELS", "NCCL_MIN_CTAS"),
    ({"NCCL_MIN_CTAS": "8", "NCCL_MAX_CTAS": "4"}, "warning", "NCCL_MIN_CTAS", "above"),
    ({"NCCL_CROSS_NIC": "3"}, "error", "NCCL_CROSS_NIC", "not one of"),
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
    ({"NCCL_FOO_BAR": "1"}, "info", "NCCL_FOO_BAR", "not a variable this checker knows"),
    ({"NCCL_SOCKET_IFNAM": "eth0"}, "info", "NCCL_SOCKET_IFNAM", "did you mean"),
    ({"NCCL_DEBUG": ""}, "info", "NCCL_DEBUG", "empty"),
]


@pytest.mark.parametrize("env,severity,variable,text", BAD,
                         ids=[f"{i:02d}-{row[2]}" for i, row in enumerate(BAD)])
def test_bad_config_yields_its_finding(env, severity, variable, text):
    findings = check_env(env, **HOST)
    matching = [f for f in findings if (f.severity, f.variable) == (severity, variable)]
    assert matching, f"no {severity} on {variable} in {[f.to_dict() for f in findings]}"
    assert any(text in f.message + " " + f.fix for f in matching), [f.message for f in matching]


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
    good = {"NCCL_SOCKET_IFNAME": "=eth0", "GLOO_SOCKET_IFNAME": "eth0", "NCCL_DEBUG": "WARN",
            "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "MASTER_ADDR": "10.0.0.1",
            "MASTER_PORT": "29500", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4",
            "PET_RDZV_BACKEND": "c10d", "PET_RDZV_ENDPOINT": "10.0.0.1:29400",
            "PET_NNODES": "2", "PET_NPROC_PER_NODE": "gpu", "TORCH_CPP_LOG_LEVEL": "info"}
    assert check_env(good, **HOST) == []


def test_inside_a_torchrun_worker_rank_variables_are_fine():
    worker = {"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4",
              "GROUP_RANK": "1", "TORCHELASTIC_RUN_ID": "job", "TORCHELASTIC_RESTART_COUNT": "0",
              "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
    assert [f for f in check_env(worker, **HOST) if f.severity != "info"] == []


def test_unknown_variables_are_never_errors():
    env = {f"NCCL_MADE_UP_{i}": "x" for i in range(5)} | {"TORCH_NCCL_NEW_THING": "1",
                                                           "GLOO_DEVICE_TRANSPORT": "TCP"}
    findings = check_env(env, **HOST)
    assert {f.severity for f in findings} == {"info"} and len(findings) == 7
    assert check_env({"PATH": "/usr/bin", "HOME": "/root"}, **HOST) == []


def test_topo_file_must_exist_and_be_xml(tmp_path):
    missing = check_env({"NCCL_TOPO_FILE": str(tmp_path / "none.xml")}, **HOST)
    assert pairs(missing) == {("error", "NCCL_TOPO_FILE")}
    assert "silently ignored" in missing[0].message
    junk = tmp_path / "junk.xml"
    junk.write_text("not xml at all")
    assert pairs(check_env({"NCCL_TOPO_FILE": str(junk)}, **HOST)) == {("error", "NCCL_TOPO_FILE")}
    other = tmp_path / "other.xml"
    other.write_text("<topology/>")
    assert pairs(check_env({"NCCL_TOPO_FILE": str(other)}, **HOST)) == \
        {("warning", "NCCL_TOPO_FILE")}
    good = tmp_path / "topo.xml"
    good.write_text('<system version="1"><cpu numaid="0"><pci busid="0000:1b:00.0"/></cpu>'
                    "</system>")
    assert check_env({"NCCL_TOPO_FILE": str(good)}, **HOST) == []


def test_finding_to_dict_has_exactly_four_keys():
    finding = check_env({"NCCL_P2P_LEVEL": "5"}, **HOST)[0]
    assert set(finding.to_dict()) == {"severity", "variable", "message", "fix"}


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


def test_parse_env_file_reads_the_guides_launch_block_verbatim():
    guide = (ROOT.parent / "shared" / "seed" / "distributed-ai-agents-on-gpu-clusters.txt")
    if not guide.exists():
        pytest.skip("the seed guide is not in this checkout")
    lines = guide.read_text().splitlines()
    start = lines.index("Step 1: Environment Configuration")
    env = parse_env_file("\n".join(lines[start + 1:start + 10]))
    assert env == {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "8",
                   "RANK": "$NODE_RANK", "LOCAL_WORLD_SIZE": "4"}
    assert ("warning", "RANK") in pairs(check_env(env, **HOST))


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
                     "NCCL_DEBUG": "WARN", "TORCH_NCCL_BLOCKING_WAIT": "1"}
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
    assert run(parse_args("--env-file", str(GUIDE), "--json")) == 1  # topo.xml missing
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(set(row) == {"severity", "variable", "message", "fix"} for row in rows)
    assert {"severity": "error", "variable": "NCCL_TOPO_FILE"}.items() <= \
        next(r for r in rows if r["severity"] == "error").items()
    fine = tmp_path / "fine.sh"
    fine.write_text("export NCCL_DEBUG=WARN\nexport TORCH_NCCL_ASYNC_ERROR_HANDLING=1\n")
    assert run(parse_args("--env-file", str(fine))) == 0
    assert "no findings" in capsys.readouterr().out


def test_run_check_table_and_fix(capsys):
    assert run(parse_args("--env-file", str(GUIDE))) == 1
    table = capsys.readouterr().out
    assert "ERROR    NCCL_TOPO_FILE" in table and "fix:" in table
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
