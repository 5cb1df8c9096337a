"""labkit.nccl.pasted: a Markdown link, a URL, HTML, typographic quotes or dashes, invisible
characters or an ellipsis pasted into a file or library name: a warning that says what was
pasted and what NCCL (or the dynamic loader) does with that name."""

from __future__ import annotations

import pytest

from labkit.nccl.check import check_env
from labkit.nccl.paste import parse_env
from labkit.nccl.pasted import damage


@pytest.mark.parametrize("value,what,fixed", [
    ("/opt/lib/[libnccl-net.so](http://libnccl-net.so).0", "Markdown link",
     "/opt/lib/libnccl-net.so.0"),
    ("<code>/opt/topo.xml</code>", "HTML", "/opt/topo.xml"),
    ("/opt/a&amp;b/topo.xml", "HTML", "/opt/a&b/topo.xml"),
    ("file:///etc/nccl.conf", "URL", "/etc/nccl.conf"),
    ("https://example.com/topo.xml", "URL", None), ("s3://bucket/topo.xml", "URL", None),
    ("\u201c/etc/topo.xml\u201d", "typographic quotes", "/etc/topo.xml"),
    ("libnccl\u2013net.so", "dash", "libnccl-net.so"),
    ("/opt/\u200bnccl/topo.xml", "invisible", "/opt/nccl/topo.xml"),
    ("/opt/\u2026/topo.xml", "ellipsis", None), ("/opt/.../lib", "ellipsis", None),
])
def test_what_was_pasted_is_named_and_undone_where_it_shows(value, what, fixed):
    found = damage(value)
    assert found is not None and what in found[0] and found[2] == fixed


@pytest.mark.parametrize("value", [
    "/opt/hpcx/nccl_rdma_sharp_plugin/lib/libnccl-net.so.0", "libnccl-net-ofi.so", "none",
    "/opt/../lib/x.so", "$HOME/lib/x.so", "a,b",
])
def test_ordinary_names_are_not_damage(value):
    assert damage(value) is None


@pytest.mark.parametrize("name,how", [
    ("NCCL_NET_PLUGIN", "internal IB and Socket"), ("NCCL_TUNER_PLUGIN", "tuner"),
    ("NCCL_PROFILER_PLUGIN", "no profiler"), ("NCCL_TOPO_FILE", "fopen"),
    ("NCCL_CONF_FILE", "fopen"), ("NCCL_DEBUG_FILE", "stdout"),
    ("NCCL_GRAPH_FILE", "init fails"), ("NCCL_IBVERBS_LIB", "libibverbs.so"),
    ("LD_LIBRARY_PATH", "dynamic loader"), ("LD_PRELOAD", "dynamic loader"),
])
def test_a_damaged_name_is_a_warning_that_says_what_its_reader_does(name, how):
    found = [f for f in check_env({name: "/opt/[x.so](http://x.so)"}) if f.variable == name]
    assert [f.severity for f in found] == ["warning"]
    assert "Markdown link" in found[0].message and how in found[0].message
    assert found[0].source.startswith("https://")


def test_a_markdown_link_in_a_launcher_option_is_read_whole_and_fixed():
    text = ("mpirun --np 2\n        -x NCCL_NET_PLUGIN=/opt/lib/[libnccl-net.so]"
            "(http://libnccl-net.so).0\n        -x NCCL_DEBUG=WARN ./all_reduce_perf")
    parsed = parse_env(text)
    assert parsed.env["NCCL_NET_PLUGIN"] == "/opt/lib/[libnccl-net.so](http://libnccl-net.so).0"
    found = [f for f in check_env(parsed.env, **parsed.job) if f.variable == "NCCL_NET_PLUGIN"]
    assert [f.severity for f in found] == ["warning"]
    assert found[0].edit is not None and found[0].edit.value == "/opt/lib/libnccl-net.so.0"


def test_damage_in_values_that_are_not_names_is_left_to_their_own_checks():
    assert [f for f in check_env({"NCCL_SOCKET_IFNAME": "eth0", "OMP_NUM_THREADS": "[1](x)"})
            if "pasted" in f.message or "Markdown" in f.message] == []
