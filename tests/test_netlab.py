"""NetLab: nodes in network namespaces on a bridged veth network, shaped with tbf.

Needs root and iproute2: the module is skipped with ``available()``'s reason elsewhere. Every
test checks that it left no namespace of this process and no new link in the root namespace;
the network tests send traffic only between the lab's own namespaces.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from labkit.runtime import netlab
from labkit.runtime.failures import RankFailedError
from labkit.runtime.launch import launch_local
from labkit.runtime.netlab import PREFIX, NetLab, NetLabError, cleanup_stale, tbf_args

OK, WHY = netlab.available()
pytestmark = pytest.mark.skipif(not OK, reason=f"no lab network here: {WHY}")


def netns() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def ip(*args: str) -> str:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=True).stdout


def root_links() -> set[str]:
    return {line.split()[1].rstrip(":").split("@")[0] for line in ip("-o", "link").splitlines()}


def qdiscs(namespace: str, dev: str) -> str:
    return subprocess.run(["tc", "-n", namespace, "qdisc", "show", "dev", dev],
                          capture_output=True, text=True, check=True).stdout


@pytest.fixture(autouse=True)
def leaves_nothing():
    links = root_links()
    yield
    assert [n for n in netns() if n.startswith(f"{PREFIX}{os.getpid()}x")] == []
    assert root_links() == links


def test_tbf_args_burst_holds_a_timer_tick():
    assert tbf_args(50) == ["tbf", "rate", "50mbit", "burst", "25000", "latency", "50ms"]
    assert tbf_args(1)[4] == "4096"  # never below a few packets
    with pytest.raises(NetLabError):
        tbf_args(0)


def test_build_and_close_leave_nothing():
    lab = NetLab(3)
    try:
        assert set(lab.namespaces) <= set(netns())
        assert len(set(lab.namespaces)) == 4 and lab.switch in lab.namespaces
        for link in lab.interfaces:
            assert link.ifname == "lab0" and link.rate_mbit is None
            assert lab.command_prefix(link.node) == ["ip", "netns", "exec", link.namespace]
            assert link.address == lab.address(link.node) == f"10.213.0.{link.node + 1}"
            addrs = ip("-n", link.namespace, "-br", "addr")
            assert f"{link.address}/24" in addrs and "lab0" in addrs
            assert ip("-n", link.namespace, "-br", "link").split()[0] == "lo"  # lo, lab0 only
        ports = ip("-n", lab.switch, "-o", "link", "show", "master", "br0")
        assert sorted(line.split()[1].split("@")[0] for line in ports.splitlines()) == [
            "n0", "n1", "n2"]
    finally:
        lab.close()
    lab.close()  # idempotent
    assert not set(lab.namespaces) & set(netns())
    with pytest.raises(NetLabError, match="closed"):
        lab.command_prefix(0)


@pytest.mark.slow
def test_nodes_reach_each_other_and_the_root_namespace_gets_nothing():
    with NetLab(3, subnet="10.213.7.0/28", ifname="eth0") as lab:
        assert lab.ping(0, 1) and lab.ping(1, 2) and lab.ping(2, 0)
        subnet = ipaddress.ip_network("10.213.7.0/28")
        assert lab.address(2) == "10.213.7.3"
        assert "10.213.7." not in ip("-o", "addr")
        for line in ip("route", "show", "table", "all").splitlines():
            dst = line.split()[0]
            if dst[0].isdigit():
                assert not ipaddress.ip_network(dst, strict=False).overlaps(subnet), line
        assert not root_links() & {"br0", "n0", "n1", "n2"}
        # A node knows only its own subnet: nothing it sends can leave the lab.
        assert ip("-n", lab.namespace(0), "route").split()[0] == "10.213.7.0/28"
        assert "default" not in ip("-n", lab.namespace(0), "route")
        ip("-n", lab.namespace(2), "link", "set", "eth0", "down")  # unplug node 2
        assert not lab.ping(0, 2, timeout_s=1) and lab.ping(0, 1)


@pytest.mark.slow
def test_cap_limits_both_directions_and_uncap_removes_it():
    with NetLab(2) as lab:
        uncapped = lab.measure_throughput(0, 1, seconds=1)
        lab.cap(1, 50)
        assert lab.interfaces[1].rate_mbit == 50
        assert "tbf" in qdiscs(lab.namespace(1), "lab0") and "tbf" in qdiscs(lab.switch, "n1")
        to_node1 = lab.measure_throughput(0, 1, seconds=1)
        from_node1 = lab.measure_throughput(1, 0, seconds=1)
        print(f"uncapped {uncapped:.0f}, capped to/from node 1: {to_node1:.1f}/"
              f"{from_node1:.1f} Mbit/s")
        for capped in (to_node1, from_node1):
            assert 0 < capped < 1.5 * 50 and capped < 0.5 * uncapped
        lab.uncap(1)
        lab.uncap(1)  # no cap: nothing to remove, no error
        assert lab.interfaces[1].rate_mbit is None
        assert "tbf" not in qdiscs(lab.namespace(1), "lab0") + qdiscs(lab.switch, "n1")
    with NetLab(2, rate_mbit=20) as lab:
        assert [link.rate_mbit for link in lab.interfaces] == [20, 20]
        assert "rate 20Mbit" in qdiscs(lab.namespace(0), "lab0")


def test_exceptions_clean_up(monkeypatch):
    with pytest.raises(RuntimeError, match="boom"):
        with NetLab(2) as lab:
            assert set(lab.namespaces) <= set(netns())
            raise RuntimeError("boom")
    assert not set(lab.namespaces) & set(netns())
    # A failure half-way through building removes what was built so far.
    real = netlab._run

    def fail_on_node1_address(*cmd: str, **kw):
        if "addr" in cmd and any(c.endswith("-n1") for c in cmd):
            raise NetLabError("simulated failure")
        return real(*cmd, **kw)

    monkeypatch.setattr(netlab, "_run", fail_on_node1_address)
    with pytest.raises(NetLabError, match="simulated"):
        NetLab(3)


LINGERING = """\
import signal, sys, time
from labkit.runtime.netlab import NetLab
signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started with SIGINT ignored
lab = NetLab(2)
print(" ".join(lab.namespaces), flush=True)
if sys.argv[1] == "exit":
    sys.exit(0)  # never closed: the atexit hook removes it
with lab:
    time.sleep(60)  # Ctrl-C arrives here
"""


@pytest.mark.parametrize("how", ["exit", "sigint"])
def test_lab_left_open_is_removed_at_exit_and_on_ctrl_c(how):
    proc = subprocess.Popen([sys.executable, "-c", LINGERING, how], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        names = proc.stdout.readline().split()
        assert len(names) == 3
        if how == "sigint":
            assert set(names) <= set(netns())
            proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        leftovers = set(names) & set(netns())
        for name in leftovers:
            subprocess.run(["ip", "netns", "delete", name])
    assert not leftovers


def test_cleanup_stale_removes_only_labs_of_dead_processes():
    dead = int(Path("/proc/sys/kernel/pid_max").read_text()) - 1  # never a live pid here
    while Path(f"/proc/{dead}").exists():
        dead -= 1
    stale = f"{PREFIX}{dead}x0bad-n0"
    subprocess.run(["ip", "netns", "add", stale], check=True)
    try:
        with NetLab(1) as lab:
            assert stale in cleanup_stale()
            assert stale not in netns()
            assert set(lab.namespaces) <= set(netns())  # a live lab is not stale
    finally:
        if stale in netns():
            subprocess.run(["ip", "netns", "delete", stale])


ALL_REDUCE = """\
import os, socket, time
from pathlib import Path

import torch
import torch.distributed as dist

from labkit.runtime import dist as ldist
from labkit.runtime import publish


def tcp_peers():  # remote addresses of this namespace's established TCP connections
    rows = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return sorted({socket.inet_ntoa(bytes.fromhex(r.split()[2][:8])[::-1])
                   for r in rows if r.split()[3] == "01"})


def seconds_per_all_reduce(x, n):
    dist.barrier()
    start = time.perf_counter()
    for _ in range(n):
        dist.all_reduce(x)
    return (time.perf_counter() - start) / n


info = ldist.setup("gloo")
total = torch.tensor([float(info.rank + 1)])
dist.all_reduce(total)
x = torch.ones(1 << 20)  # 4 MB of float32
dist.all_reduce(x)  # warm-up
uncapped = seconds_per_all_reduce(x, 5)
run_dir = Path(os.environ["LABKIT_RUN_DIR"])
dist.barrier()
if info.rank == 0:
    (run_dir / "uncapped.done").touch()
deadline = time.monotonic() + 30
while not (run_dir / "capped").exists():  # the test caps the links meanwhile
    assert time.monotonic() < deadline, "no cap came"
    time.sleep(0.05)
capped = seconds_per_all_reduce(x, 3)
facts = {"rank": info.rank, "master": os.environ["MASTER_ADDR"], "peers": tcp_peers(),
         "netns": os.stat("/proc/self/ns/net").st_ino}
everyone = [None] * info.world_size
dist.all_gather_object(everyone, facts)
publish({"sum": total.item(), "facts": everyone, "uncapped_s": uncapped, "capped_s": capped})
ldist.teardown()
"""


@pytest.mark.slow
def test_two_nodes_all_reduce_across_namespaces(tmp_path, leftover_processes):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(ALL_REDUCE))
    run_dir = tmp_path / "run"
    errors: list[BaseException] = []

    with NetLab(2) as lab:
        def cap_when_asked() -> None:
            try:
                deadline = time.monotonic() + 90
                while not (run_dir / "uncapped.done").exists() and time.monotonic() < deadline:
                    time.sleep(0.05)
                for node in (0, 1):
                    lab.cap(node, 100)
                (run_dir / "capped").touch()
            except BaseException as exc:  # reported by the test below
                errors.append(exc)

        capper = threading.Thread(target=cap_when_asked, daemon=True)
        capper.start()
        result = launch_local(script, nnodes=2, nproc_per_node=1, network=lab, echo=None,
                              env={"GLOO_SOCKET_IFNAME": "lab0"}, timeout_s=90,
                              run_dir=run_dir)
        capper.join(timeout=5)
        assert errors == []
        assert result.ok, "\n".join(result.output[-30:])
        assert all(cmd[:4] == lab.command_prefix(i) for i, cmd in enumerate(result.commands))
        node_of = {os.stat(f"/run/netns/{lab.namespace(i)}").st_ino: i for i in (0, 1)}
        assert leftover_processes(run_dir) == []

    out = result.published
    assert out["sum"] == 3.0
    facts = out["facts"]
    assert sorted(node_of.get(f["netns"]) for f in facts) == [0, 1]  # one rank per node
    for f in facts:
        assert f["master"] == "10.213.0.1"  # torchrun's --local-addr of node 0
        other = f"10.213.0.{2 - node_of[f['netns']]}"
        assert other in f["peers"], f  # gloo's connections cross the lab link
        assert set(f["peers"]) <= {"10.213.0.1", "10.213.0.2", "127.0.0.1"}, f
    # Each rank must receive the other's 4 MB: >= 0.32 s at 100 Mbit/s, whatever the machine.
    print(f"4 MB all_reduce: uncapped {out['uncapped_s'] * 1e3:.1f} ms, "
          f"capped at 100 Mbit/s {out['capped_s'] * 1e3:.1f} ms")
    assert out["capped_s"] > 2 * out["uncapped_s"]
    assert out["capped_s"] > 4e6 * 8 / 100e6 / 1.5


@pytest.mark.slow
def test_wrong_socket_interface_fails_fast_with_gloos_message(tmp_path, leftover_processes):
    script = tmp_path / "job.py"
    script.write_text("from labkit.runtime import dist\ndist.setup('gloo')\n")
    run_dir = tmp_path / "run"
    with NetLab(2) as lab:
        started = time.monotonic()
        result = launch_local(script, nnodes=2, nproc_per_node=1, network=lab, echo=None,
                              env={"GLOO_SOCKET_IFNAME": "eth9",
                                   "LABKIT_COLLECTIVE_TIMEOUT": "10"},
                              timeout_s=40, run_dir=run_dir)
        took = time.monotonic() - started
        assert leftover_processes(run_dir) == []
    assert not result.ok and not result.timed_out and took < 40
    assert result.failures, "\n".join(result.output[-30:])
    assert "Unable to find address for: eth9" in result.failures[0].error
    with pytest.raises(RankFailedError, match="eth9"):
        result.check()
