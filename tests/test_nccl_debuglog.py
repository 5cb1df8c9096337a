"""labkit.nccl.debuglog on real NCCL_DEBUG=INFO excerpts (data/nccl_logs/README.md says where
each comes from); every expected value below can be read in the file."""

from __future__ import annotations

from pathlib import Path

from labkit.nccl import parse_debug_log

LOGS = Path(__file__).resolve().parents[1] / "data" / "nccl_logs"


def read(name: str):
    return parse_debug_log((LOGS / name).read_text())


def test_every_log_file_is_documented_and_parses():
    readme = (LOGS / "README.md").read_text()
    files = sorted(LOGS.glob("*.log"))
    assert 2 <= len(files) <= 4
    for path in files:
        assert path.name in readme
        log = parse_debug_log(path.read_text())
        assert log.parsed_lines > log.ignored_lines
        assert log.parsed_lines + log.ignored_lines == len(path.read_text().splitlines())


def test_single_node_a800_p2p_and_shm():
    log = read("nccl_1027_a800_1node_8gpu.log")
    assert log.version is None  # the excerpt starts after the version line
    assert log.hosts == {"UIBE-DC-GPUSVR-01"}
    assert log.ring_channels == 2 and log.n_channels == 2
    assert log.rings == {0: [0, 1, 2, 3, 4, 5, 6, 7], 1: [0, 1, 2, 3, 4, 5, 6, 7]}
    assert log.transports == ["P2P/direct pointer", "P2P/direct pointer/read",
                              "SHM/direct/direct"]
    assert log.transport_kinds == ["P2P", "SHM"]
    shm = [c for c in log.connections if c.kind == "SHM"]
    assert [(c.channel, c.src, c.dst) for c in shm] == [(0, 3, 4)]  # across the PCIe roots
    assert len(log.connections) == 7 and log.channels == [0, 1]
    assert log.trees[("UIBE-DC-GPUSVR-01", 13313, 0)] == {0: "1/-1/-1->0->-1",
                                                          1: "1/-1/-1->0->-1"}
    assert log.ranks == [] and log.devices == []
    assert (log.parsed_lines, log.ignored_lines) == (11, 4)  # 4 "P2P Chunksize" lines


def test_two_node_roce_init():
    log = read("nccl_tests_133_a800_2node_roce_init.log")
    assert log.version == "2.10.3+cuda11.0"
    assert log.hosts == {"nodea", "nodeb"}
    assert log.networks == ["IB"]
    ib = [(d.host, d.name, d.detail) for d in log.devices if d.net == "IB"]
    assert ib == [("nodea", "mlx5_6", "1/RoCE"), ("nodeb", "mlx5_6", "1/RoCE")]
    boot = [(d.host, d.name) for d in log.devices if d.net == "Bootstrap"]
    assert boot == [("nodea", "xgbe4"), ("nodeb", "xgbe0")]
    assert log.oob == ["xgbe4:nodea_ip<0>", "xgbe0:nodeb_xgbe0_ip<0>"]
    assert log.env == {"NCCL_IB_GID_INDEX": "3"}
    assert log.rings == {0: [0, 7, 6, 5, 12, 11, 10, 9, 8, 15, 14, 13, 4, 3, 2, 1]}
    assert log.n_channels == 2
    assert log.trees[("nodeb", 65671, 4)] == {0: "13/-1/-1->12->4", 1: "13/4/-1->12->-1"}
    assert len(log.trees) == 4
    assert log.connections == []


def test_two_node_ib_gdrdma_transports_and_init():
    log = read("nccl_429_2node_ib_gdrdma.log")
    assert log.hosts == {"machine-1", "machine-2"}
    assert log.transports == ["NET/IB/0/GDRDMA", "P2P/direct pointer"]
    net = [c for c in log.connections if c.kind == "NET"]
    assert [(c.channel, c.src, c.dst, c.direction) for c in net] == \
        [(1, 14, 6, "receive"), (2, 14, 6, "receive"), (3, 14, 6, "receive")]
    assert all(c.host == "machine-2" for c in net)
    assert log.channels == [0, 1, 2, 3]
    assert log.coll_channels == [6, 6] and log.n_channels == 6
    assert [(r.rank, r.nranks, r.host, r.pid, r.cuda_dev, r.bus_id, r.complete)
            for r in log.ranks] == [(5, 16, "machine-2", 41626, 5, "89000", True),
                                    (4, 16, "machine-2", 41626, 4, "88000", True)]
    assert log.ranks[0].comm == "0x7f4ce0006640" and log.ranks[0].nvml_dev is None
    assert log.nranks == 16


def test_socket_on_loopback_with_mpirun_prefixes():
    log = read("nccl_300_socket_lo_4gpu.log")
    assert log.version == "2.5.6+cuda10.2"
    assert log.hosts == {"5873af64cf59"}
    assert log.no_device == ["IB"]
    assert [(d.net, d.name, d.detail) for d in log.devices] == \
        [("Bootstrap", "lo", "127.0.0.1<0>"), ("Socket", "lo", "127.0.0.1<0>")]
    assert log.interfaces == ["lo"]
    assert (log.parsed_lines, log.ignored_lines) == (11, 3)  # 3 "NET/Plugin" lines


def test_unknown_and_partial_lines_are_ignored_not_fatal():
    log = parse_debug_log("garbage\n\nhost:1:2 [0] NCCL INFO something new\n"
                          "host:1:2 [0] NCCL INFO Channel 04/1 : 3[1] -> 0[0] [re\n")
    assert (log.parsed_lines, log.ignored_lines) == (0, 3)
    assert log.version is None and log.connections == []


def test_a_network_plugin_is_named_in_full():
    """A plugin's network name can have a space (aws-ofi-nccl's "AWS Libfabric"): kept whole."""
    text = "\n".join((
        "ip-172-31-3-90:1929:1937 [0] NCCL INFO NET/OFI Selected Provider is efa (found 16 nics)",
        "ip-172-31-3-90:1929:1937 [0] NCCL INFO Using network AWS Libfabric",
        "ip-172-31-3-91:1930:1938 [0] NCCL INFO Using network Libfabric",
    ))
    assert parse_debug_log(text).networks == ["AWS Libfabric", "Libfabric"]


def test_echoed_settings_keep_a_full_stop_only_where_the_format_adds_none():
    """param.cc prints integers as '%lld.' (the stop is the format's); string settings get none."""
    log = parse_debug_log("h:1:2 [0] NCCL INFO NCCL_IB_RETRY_CNT set by environment to 15.\n"
                          "h:1:2 [0] NCCL INFO NCCL_COLLNET_ENABLE set by environment to 1.\n"
                          "h:1:2 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0\n"
                          "h:1:2 [0] NCCL INFO NCCL_TOPO_FILE set by environment to /t/a.\n")
    assert log.env == {"NCCL_IB_RETRY_CNT": "15", "NCCL_COLLNET_ENABLE": "1",
                       "NCCL_SOCKET_IFNAME": "eth0", "NCCL_TOPO_FILE": "/t/a."}
