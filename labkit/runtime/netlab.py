"""Simulated nodes with a network of their own: one Linux network namespace per node.

``NetLab(n)`` builds, on this machine, what a small cluster looks like from a rank's point of
view: every node is a namespace whose only link is ``lab0`` (the same name on each node, like
``eth0`` on real hosts, so ``GLOO_SOCKET_IFNAME=lab0`` works everywhere), cabled by a veth pair
to a Linux bridge (the "switch") in a namespace of its own. ``cap()`` shapes a node's link with
a token bucket (tbf) in both directions, so a lesson can show what a slow network does to a
collective. Pass the lab as ``network=`` to :func:`labkit.runtime.launch.launch_local`.

The lab subnet exists only inside the lab's namespaces: the root namespace gets no address,
route or interface, and the nodes have no default route, so nothing leaves the lab. Needs root
and ``ip``/``tc`` (iproute2); :func:`available` says whether this machine can run it and why not.
"""

from __future__ import annotations

import atexit
import functools
import ipaddress
import os
import re
import secrets
import select
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from labkit.errors import LabkitError

PREFIX = "lk"  # namespaces are named lk<pid>x<random>-n<i> / -sw: see cleanup_stale()
DEFAULT_SUBNET = "10.213.0.0/24"  # lives only inside the lab's namespaces
TBF_LATENCY_MS = 50  # how long a packet may wait in the shaper's queue before it is dropped
_NAME = re.compile(r"^(?P<prefix>[a-z]+)(?P<pid>\d+)x[0-9a-f]{4}-(sw|n\d+|probe)$")


class NetLabError(LabkitError):
    """A lab network could not be built, used or removed (the message has ip/tc's words)."""


@dataclass(frozen=True)
class NodeLink:
    """One node's link: its namespace, its interface and address, the switch-side peer."""

    node: int
    namespace: str
    ifname: str
    address: str
    peer: str  # the veth end in the switch namespace, attached to the bridge
    rate_mbit: float | None  # the cap in both directions, None when uncapped


def _run(*cmd: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise NetLabError(f"`{' '.join(cmd)}` failed: {proc.stderr.strip() or proc.returncode}")
    return proc


def tbf_args(rate_mbit: float) -> list[str]:
    """tc arguments for a token bucket at ``rate_mbit``. The bucket (burst) must hold at least
    one timer tick of traffic (rate/HZ, HZ >= 250) and a few full packets (4 KiB minimum), or
    the shaper cannot reach its rate; latency bounds the queue at 50 ms worth of traffic."""
    if rate_mbit <= 0:
        raise NetLabError(f"rate must be positive, got {rate_mbit} Mbit/s")
    burst = max(4096, int(rate_mbit * 1e6 / 8 / 250))
    return ["tbf", "rate", f"{rate_mbit:g}mbit", "burst", str(burst),
            "latency", f"{TBF_LATENCY_MS}ms"]


def _namespaces() -> list[str]:
    out = _run("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _delete_namespace(name: str) -> None:
    """End what still runs in the namespace (a lab's own agents), then delete it; its veth
    ends, bridge and qdiscs go with it."""
    pids = _run("ip", "netns", "pids", name, check=False).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    _run("ip", "netns", "delete", name)


def stale_namespaces(prefix: str = PREFIX) -> list[str]:
    """Namespaces left by labs whose process is gone (``<prefix><pid>x....``, no such pid)."""
    return [name for name in _namespaces()
            if (match := _NAME.match(name)) and match["prefix"] == prefix
            and not Path(f"/proc/{match['pid']}").exists()]


def cleanup_stale(prefix: str = PREFIX) -> list[str]:
    """Delete namespaces left by crashed labs (``<prefix><pid>x....`` whose process is gone);
    labs of live processes are left alone. Returns the names deleted."""
    removed = stale_namespaces(prefix)
    for name in removed:
        _delete_namespace(name)
    return removed


@functools.cache
def available() -> tuple[bool, str]:
    """(True, "") when this machine can build a lab, else (False, why): needs Linux, root,
    iproute2, and a kernel that allows namespaces, veth, bridges and tbf (probed once, by
    building and deleting a small namespace; the answer is cached)."""
    if not sys.platform.startswith("linux"):
        return False, f"network namespaces need Linux, this is {sys.platform}"
    if os.geteuid() != 0:
        return False, "network namespaces need root (run as root or use loopback nodes)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return False, f"`{tool}` not found: install iproute2"
    probe = f"{PREFIX}{os.getpid()}x{secrets.token_hex(2)}-probe"
    try:
        _run("ip", "netns", "add", probe)
        try:
            _run("ip", "-n", probe, "link", "add", "br0", "type", "bridge")
            _run("ip", "-n", probe, "link", "add", "a0", "type", "veth", "peer", "name", "b0")
            _run("tc", "-n", probe, "qdisc", "replace", "dev", "a0", "root", *tbf_args(10))
        finally:
            _delete_namespace(probe)
    except (NetLabError, OSError, subprocess.TimeoutExpired) as exc:
        return False, f"cannot build a lab network here: {exc}"
    return True, ""


_OPEN: set[NetLab] = set()  # labs not closed yet, for the atexit safety net


@atexit.register
def _close_open_labs() -> None:  # safety net for labs a notebook never closed
    for lab in list(_OPEN):
        try:
            lab.close()
        except NetLabError:
            pass


class NetLab:
    """``nnodes`` simulated nodes, each in its own network namespace, on one bridged subnet.

    Node i has address ``subnet[i + 1]`` on interface ``ifname``. Use as a context manager
    (or call :meth:`close`): the namespaces, links and qdiscs are built here and removed on
    exit, also after an exception or Ctrl-C; an atexit hook closes labs left open.
    """

    def __init__(self, nnodes: int, rate_mbit: float | None = None,
                 subnet: str = DEFAULT_SUBNET, ifname: str = "lab0") -> None:
        net = ipaddress.ip_network(subnet)
        if nnodes < 1 or nnodes > net.num_addresses - 2:
            raise NetLabError(f"{subnet} holds 1 to {net.num_addresses - 2} nodes, not {nnodes}")
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,14}", ifname):
            raise NetLabError(f"bad interface name {ifname!r} (letters/digits, max 15)")
        self.nnodes, self.subnet, self.ifname = nnodes, net, ifname
        taken = _namespaces()
        while True:  # unique among the labs on this machine, also of this process
            self.id = f"{PREFIX}{os.getpid()}x{secrets.token_hex(2)}"
            if not any(name.startswith(f"{self.id}-") for name in taken):
                break
        self.switch = f"{self.id}-sw"
        self._rates: dict[int, float | None] = {}
        self._made: list[str] = []
        self._closed = False
        _OPEN.add(self)
        try:
            self._build()
            for node in range(nnodes if rate_mbit else 0):
                self.cap(node, rate_mbit)
        except BaseException:
            self.close()
            raise

    def _build(self) -> None:
        self._add_namespace(self.switch)
        _run("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", self.switch, "link", "set", "br0", "up")
        for node in range(self.nnodes):
            ns, peer = self.namespace(node), self._peer(node)
            self._add_namespace(ns)
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            # Create both ends directly in their namespaces: the root namespace never sees them.
            _run("ip", "link", "add", self.ifname, "netns", ns, "type", "veth",
                 "peer", "name", peer, "netns", self.switch)
            _run("ip", "-n", self.switch, "link", "set", peer, "master", "br0", "up")
            _run("ip", "-n", ns, "addr", "add",
                 f"{self.address(node)}/{self.subnet.prefixlen}", "dev", self.ifname)
            _run("ip", "-n", ns, "link", "set", self.ifname, "up")

    def _add_namespace(self, name: str) -> None:
        _run("ip", "netns", "add", name)
        self._made.append(name)

    def _peer(self, node: int) -> str:
        return f"n{node}"

    def _check(self, node: int) -> None:
        if self._closed:
            raise NetLabError(f"lab {self.id} is closed")
        if not 0 <= node < self.nnodes:
            raise NetLabError(f"node {node} is not in this lab of {self.nnodes} nodes")

    # --- NodeNetwork ---------------------------------------------------------------------

    def address(self, node: int) -> str:
        """Node ``node``'s address on the lab subnet (first node: .1)."""
        if not 0 <= node < self.nnodes:
            raise NetLabError(f"node {node} is not in this lab of {self.nnodes} nodes")
        return str(self.subnet[node + 1])

    def command_prefix(self, node: int) -> list[str]:
        """Prefix that runs a command inside the node's namespace."""
        self._check(node)
        return ["ip", "netns", "exec", self.namespace(node)]

    def namespace(self, node: int) -> str:
        return f"{self.id}-n{node}"

    @property
    def namespaces(self) -> list[str]:
        """Every namespace of the lab: the nodes', then the switch's."""
        return [self.namespace(i) for i in range(self.nnodes)] + [self.switch]

    @property
    def interfaces(self) -> list[NodeLink]:
        return [NodeLink(i, self.namespace(i), self.ifname, self.address(i), self._peer(i),
                         self._rates.get(i)) for i in range(self.nnodes)]

    # --- shaping -------------------------------------------------------------------------

    def cap(self, node: int, rate_mbit: float) -> None:
        """Limit node's link to ``rate_mbit`` each way: tbf on its end (what it sends) and on
        the switch-side peer (what it receives). Replaces an earlier cap."""
        self._check(node)
        args = tbf_args(rate_mbit)
        _run("tc", "-n", self.namespace(node), "qdisc", "replace", "dev", self.ifname, "root",
             *args)
        _run("tc", "-n", self.switch, "qdisc", "replace", "dev", self._peer(node), "root", *args)
        self._rates[node] = rate_mbit

    def uncap(self, node: int) -> None:
        """Remove the node's cap (both directions); no error when it had none."""
        self._check(node)
        for ns, dev in ((self.namespace(node), self.ifname), (self.switch, self._peer(node))):
            proc = _run("tc", "-n", ns, "qdisc", "del", "dev", dev, "root", check=False)
            if proc.returncode != 0 and "No such file" not in proc.stderr \
                    and "Cannot delete qdisc with handle of zero" not in proc.stderr:
                raise NetLabError(f"uncap node {node}: {proc.stderr.strip()}")
        self._rates[node] = None

    # --- checks --------------------------------------------------------------------------

    def _transfer(self, src: int, dst: int, seconds: float, wait_s: float) -> str:
        """Run the receiver in dst's namespace and the sender in src's; receiver's report."""
        self._check(src)
        self._check(dst)
        server = subprocess.Popen(
            [*self.command_prefix(dst), sys.executable, "-c", _RECEIVER,
             self.address(dst), str(seconds), str(wait_s)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            ready, _, _ = select.select([server.stdout], [], [], wait_s)
            port = server.stdout.readline().strip() if ready else ""
            if not port.isdigit():
                server.kill()
                err = server.communicate()[1].strip()
                raise NetLabError(f"receiver in node {dst} did not start: {err[-300:]}")
            _run(*self.command_prefix(src), sys.executable, "-c", _SENDER,
                 self.address(dst), port, str(seconds), str(wait_s), check=False,
                 timeout=seconds + 2 * wait_s)
            out, err = server.communicate(timeout=seconds + 2 * wait_s)
            if server.returncode != 0:
                raise NetLabError(f"node {src} -> node {dst}: {err.strip().splitlines()[-1:]}")
            return out.strip()
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()

    def ping(self, src: int, dst: int, timeout_s: float = 3.0) -> bool:
        """Whether node ``src`` reaches node ``dst`` over TCP (a short echo; no ping binary)."""
        try:
            return self._transfer(src, dst, 0, timeout_s) == "ping"
        except (NetLabError, subprocess.TimeoutExpired):
            return False

    def measure_throughput(self, src: int, dst: int, seconds: float = 2.0) -> float:
        """TCP throughput from node ``src`` to node ``dst`` in Mbit/s, measured by the receiver
        over ``seconds`` of one stream."""
        if seconds <= 0:
            raise NetLabError(f"seconds must be positive, got {seconds}")
        return float(self._transfer(src, dst, seconds, 5.0))

    # --- cleanup -------------------------------------------------------------------------

    def close(self) -> None:
        """Delete every namespace of the lab (and whatever still runs in them). Idempotent;
        tries everything, then raises one error listing what failed."""
        if self._closed:
            return
        self._closed = True
        _OPEN.discard(self)
        errors = []
        for name in reversed(self._made):
            try:
                _delete_namespace(name)
            except (NetLabError, OSError, subprocess.TimeoutExpired) as exc:
                errors.append(f"{name}: {exc}")
        self._made.clear()
        if errors:
            raise NetLabError("lab cleanup left something behind:\n" + "\n".join(errors))

    def __enter__(self) -> NetLab:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"NetLab({self.id}: {'closed' if self._closed else self.subnet})"


# Receiver: prints its port, then either echoes one message (seconds == 0) or counts bytes
# for `seconds` after the first one arrives and prints Mbit/s. Sender: the other end.
_RECEIVER = """\
import socket, sys, time
addr, secs, wait = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
srv = socket.create_server((addr, 0))
srv.settimeout(wait)
print(srv.getsockname()[1], flush=True)
conn, _ = srv.accept()
conn.settimeout(wait)
first = conn.recv(1 << 16)
if secs <= 0:  # ping: echo it back
    conn.sendall(first)
    print(first.decode())
    sys.exit()
start = now = time.monotonic()
total = 0
while now - start < secs:
    data = conn.recv(1 << 20)
    now = time.monotonic()
    if not data:
        break
    total += len(data)
print(total * 8 / max(now - start, 1e-9) / 1e6)
"""

_SENDER = """\
import socket, sys, time
addr, port, secs, wait = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
sock = socket.create_connection((addr, port), timeout=wait)
if secs <= 0:
    sock.sendall(b"ping")
    sys.exit(sock.recv(16) != b"ping")
chunk, end = bytes(1 << 16), time.monotonic() + secs + wait
try:
    while time.monotonic() < end:
        sock.sendall(chunk)
except OSError:
    pass  # the receiver closed: measurement done
"""
