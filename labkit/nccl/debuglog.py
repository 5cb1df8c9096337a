"""Read an ``NCCL_DEBUG=INFO`` log: version, ranks, transports, interfaces, rings and trees.

NCCL prints ``host:pid:tid [cudaDev] NCCL INFO <message>`` (``src/debug.cc``); launchers often
prefix lines (``[1,0]<stdout>:``, timestamps), so the prefix is searched for, not anchored.
Lines the reader does not know are counted and ignored.

    log = parse_debug_log(Path("data/nccl_logs/nccl_1027_a800_1node_8gpu.log").read_text())
    log.version, log.transports, log.n_channels, log.rings[0]
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from labkit.nccl.nccllog import echoed_value

_PREFIX = re.compile(r"([A-Za-z0-9_.\-]+):(\d+):(\d+) \[(\d+)\] NCCL INFO (.*)$")
_VERSION = re.compile(r"NCCL version (\S+)")
_CONNECTION = re.compile(r"(?:Channel|Ring) (\d+)(?:/\d+)? : (\d+)(?:\[([0-9a-fA-Fx]+)\])? -> "
                         r"(\d+)(?:\[([0-9a-fA-Fx]+)\])?(?: \[(send|receive)\])? via (.+)$")
_RING = re.compile(r"Channel (\d+)/(\d+) :((?:\s+\d+)+)\s*$")
_TREES = re.compile(r"Trees (\[.*)$")
_TREE_ENTRY = re.compile(r"\[(\d+)\] (\S+)")
_INIT = re.compile(r"comm (0x[0-9a-f]+) rank (\d+) nranks (\d+) cudaDev (\d+)(?: nvmlDev (\d+))?"
                   r"(?: busId ([0-9a-f]+))?(?: commId (0x[0-9a-f]+))?(?: localSize \d+)? - "
                   r"Init (COMPLETE|START)")
_TOPOLOGY = re.compile(r"comm (0x[0-9a-f]+) rank (\d+) nRanks (\d+) nNodes (\d+) "
                       r"localRanks (\d+) localRank (\d+)")
_BOOTSTRAP = re.compile(r"Bootstrap ?: Using (.+)$")
_NET = re.compile(r"NET/(Socket|IB) ?: Using (.*?)(?: ?; OOB (\S+))?\s*$")
_NET_ENTRY = re.compile(r"\[(\d+)\]([^:\s]+):(\S+)")
_NO_DEVICE = re.compile(r"NET/(IB|Socket) ?: No device found")
_NETWORK = re.compile(r"Using network (\S.*?)\s*$")  # IB, Socket, or a plugin: "Libfabric", "AWS Libfabric"
_COLL_CHANNELS = re.compile(r"(\d+) coll channels")
_ENV = re.compile(r"(NCCL_\w+) set by environment to (.+?)\s*$")


@dataclass
class RankRecord:
    """One rank as a communicator-init line reports it."""

    rank: int
    nranks: int
    host: str
    pid: int
    cuda_dev: int | None = None
    nvml_dev: int | None = None
    bus_id: str | None = None
    comm: str | None = None
    comm_id: str | None = None
    nnodes: int | None = None
    local_rank: int | None = None
    local_ranks: int | None = None
    complete: bool = False


@dataclass
class Connection:
    """One peer connection: ``Channel 00/0 : 0[0] -> 1[1] via P2P/IPC``."""

    channel: int
    src: int
    dst: int
    transport: str  # as printed after "via": P2P/IPC/read, NET/IB/0/GDRDMA, SHM/direct/direct
    direction: str | None = None  # send / receive (network connections), else None
    host: str | None = None

    @property
    def kind(self) -> str:
        """The transport family: P2P, SHM, NET, ... (old logs' 'direct shared memory' is SHM)."""
        return "SHM" if "shared memory" in self.transport else re.split(r"[/ ]", self.transport)[0]


@dataclass
class NetDevice:
    """A network device NCCL picked: ``[0]eth0:10.0.0.1<0>`` or ``[0]mlx5_0:1/IB``."""

    net: str  # Socket, IB or Bootstrap
    name: str
    detail: str  # address (sockets) or port/link layer (IB)
    host: str | None = None


@dataclass
class DebugLog:
    """What a debug log says; fields stay empty when the log does not say it."""

    version: str | None = None
    ranks: list[RankRecord] = field(default_factory=list)
    connections: list[Connection] = field(default_factory=list)
    devices: list[NetDevice] = field(default_factory=list)
    oob: list[str] = field(default_factory=list)  # NET/IB's out-of-band interfaces
    networks: list[str] = field(default_factory=list)  # "Using network IB"
    no_device: list[str] = field(default_factory=list)  # "NET/IB : No device found"
    rings: dict[int, list[int]] = field(default_factory=dict)  # channel -> ranks in ring order
    ring_channels: int | None = None  # the N of "Channel xx/N"
    coll_channels: list[int] = field(default_factory=list)  # "N coll channels" per rank
    trees: dict[tuple[str, int, int], dict[int, str]] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # "NCCL_X set by environment to Y" (nccllog)
    hosts: set[str] = field(default_factory=set)
    parsed_lines: int = 0
    ignored_lines: int = 0

    @property
    def transports(self) -> list[str]:
        """Distinct transports, as printed after 'via'."""
        return sorted({c.transport for c in self.connections})

    @property
    def transport_kinds(self) -> list[str]:
        return sorted({c.kind for c in self.connections})

    @property
    def channels(self) -> list[int]:
        """Channel ids that carry at least one connection."""
        return sorted({c.channel for c in self.connections})

    @property
    def n_channels(self) -> int | None:
        """Channels per communicator: from the ring header, else 'N coll channels'."""
        if self.ring_channels is not None:
            return self.ring_channels
        return max(self.coll_channels) if self.coll_channels else None

    @property
    def interfaces(self) -> list[str]:
        """Names of the devices NCCL uses (sockets, HCAs, bootstrap)."""
        return sorted({d.name for d in self.devices})

    @property
    def nranks(self) -> int | None:
        return max((r.nranks for r in self.ranks), default=None)


def parse_debug_log(text: str) -> DebugLog:
    """Parse an ``NCCL_DEBUG=INFO`` log (or excerpt); unknown lines are counted, not fatal."""
    log = DebugLog()
    for line in text.splitlines():
        if not line.strip():
            continue
        if _parse_line(log, line):
            log.parsed_lines += 1
        else:
            log.ignored_lines += 1
    return log


def _parse_line(log: DebugLog, line: str) -> bool:
    version = _VERSION.search(line)
    if version:
        log.version = log.version or version.group(1)
        return True
    prefix = _PREFIX.search(line)
    if not prefix:
        return False
    host, pid, dev, message = prefix.group(1), int(prefix.group(2)), int(prefix.group(4)), \
        prefix.group(5)
    log.hosts.add(host)
    for pattern, handler in _HANDLERS:
        match = pattern.search(message)
        if match:
            handler(log, match, host, pid, dev)
            return True
    return False


def _connection(log: DebugLog, m: re.Match, host: str, pid: int, dev: int) -> None:
    log.connections.append(Connection(int(m.group(1)), int(m.group(2)), int(m.group(4)),
                                      m.group(7).strip(), m.group(6), host))


def _ring(log: DebugLog, m: re.Match, host: str, pid: int, dev: int) -> None:
    log.rings[int(m.group(1))] = [int(r) for r in m.group(3).split()]
    log.ring_channels = int(m.group(2))


def _trees(log: DebugLog, m: re.Match, host: str, pid: int, dev: int) -> None:
    entries = {int(c): tree for c, tree in _TREE_ENTRY.findall(m.group(1))}
    if entries:
        log.trees[(host, pid, dev)] = entries


def _init(log: DebugLog, m: re.Match, host: str, pid: int, dev: int) -> None:
    record = _record(log, host, int(m.group(2)), int(m.group(3)), pid)
    record.comm, record.cuda_dev = m.group(1), int(m.group(4))
    record.nvml_dev = int(m.group(5)) if m.group(5) else None
    record.bus_id, record.comm_id = m.group(6), m.group(7)
    record.complete = record.complete or m.group(8) == "COMPLETE"


def _topology(log: DebugLog, m: re.Match, host: str, pid: int, dev: int) -> None:
    record = _record(log, host, int(m.group(2)), int(m.group(3)), pid)
    record.comm, record.cuda_dev = m.group(1), dev
    record.nnodes, record.local_ranks, record.local_rank = \
        int(m.group(4)), int(m.group(5)), int(m.group(6))


def _record(log: DebugLog, host: str, rank: int, nranks: int, pid: int) -> RankRecord:
    for record in log.ranks:
        if (record.host, record.pid, record.rank, record.nranks) == (host, pid, rank, nranks):
            return record
    log.ranks.append(RankRecord(rank, nranks, host, pid))
    return log.ranks[-1]


def _bootstrap(log: DebugLog, m: re.Match, host: str, pid: int, dev: int) -> None:
    name, _, detail = m.group(1).strip().removeprefix("[0]").partition(":")
    _add_device(log, NetDevice("Bootstrap", name, detail, host))


def _net(log: DebugLog, m: re.Match, host: str, pid: int, dev: int) -> None:
    for _, name, detail in _NET_ENTRY.findall(m.group(2)):
        _add_device(log, NetDevice(m.group(1), name, detail, host))
    if m.group(3) and m.group(3) not in log.oob:
        log.oob.append(m.group(3))


def _add_device(log: DebugLog, device: NetDevice) -> None:
    if device not in log.devices:
        log.devices.append(device)


def _no_device(log: DebugLog, m: re.Match, host: str, pid: int, dev: int) -> None:
    if m.group(1) not in log.no_device:
        log.no_device.append(m.group(1))


def _network(log: DebugLog, m: re.Match, host: str, pid: int, dev: int) -> None:
    if m.group(1) not in log.networks:
        log.networks.append(m.group(1))


def _coll_channels(log: DebugLog, m: re.Match, host: str, pid: int, dev: int) -> None:
    log.coll_channels.append(int(m.group(1)))


def _env(log: DebugLog, m: re.Match, host: str, pid: int, dev: int) -> None:
    log.env[m.group(1)] = echoed_value(m.group(1), m.group(2))


_HANDLERS = [(_CONNECTION, _connection), (_RING, _ring), (_INIT, _init), (_TOPOLOGY, _topology),
             (_TREES, _trees), (_NO_DEVICE, _no_device), (_NET, _net), (_BOOTSTRAP, _bootstrap),
             (_NETWORK, _network), (_COLL_CHANNELS, _coll_channels), (_ENV, _env)]
