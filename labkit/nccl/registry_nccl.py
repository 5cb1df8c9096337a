"""NCCL's documented variables, "System configuration" section: fine to keep in scripts.

Source: NCCL's env page (``NCCL_DOC``, as of NCCL 2.30); ranges, clamps and defaults are
checked against NCCL's source at the tag given in each ``source``. Versions (introduced, removed)
are added by ``registry`` from ``registry_nccl_source``, which reads them off NCCL's release tags.
"""

from __future__ import annotations

from labkit.nccl.variable import NCCL_DOC, NCCL_GITHUB, Bounds, Variable

LEVELS = ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS")
LEVEL_VALUES = ("LOC, NVL, PIX, PXB, PHB, SYS (legacy integers 0-4: LOC, PIX, PXB, PHB, SYS; "
                ">4 = SYS)")
SOCKET_CC = NCCL_GITHUB + "src/transport/net_socket.cc#L349-L397"
IB_CONNECT = NCCL_GITHUB + "src/transport/net_ib/connect.cc#L15-L20"
UTILS_CC = NCCL_GITHUB + "src/misc/utils.cc"


def nccl(name: str, kind: str, values: str, default: str, meaning: str, *,
         debug_only: bool = False, deprecated_by: str | None = None, anchor: str = "",
         choices: tuple[str, ...] = (), deprecated: str | None = None, removed: str | None = None,
         bounds: Bounds | None = None, source: str = "",
         deprecated_values: tuple[str, ...] = ()) -> Variable:
    """A documented NCCL variable; its doc link is the env page's section for it."""
    anchor = anchor or name.lower().replace("_", "-")
    return Variable(name, "nccl", kind, values, default, debug_only, deprecated_by, meaning,
                    f"{NCCL_DOC}#{anchor}", choices, deprecated=deprecated, removed=removed,
                    bounds=bounds, source=source, deprecated_values=deprecated_values)


def flag(name: str, default: str, meaning: str, **extra) -> Variable:
    """A documented 0/1 NCCL variable."""
    return nccl(name, "bool", "0 or 1", default, meaning, **extra)


def number(name: str, values: str, default: str, meaning: str, **extra) -> Variable:
    """A documented integer NCCL variable."""
    return nccl(name, "int", values, default, meaning, **extra)


SYSTEM = [
    nccl("NCCL_SOCKET_IFNAME", "ifname-list",
         "comma list of prefixes; '=' exact names; '^' exclude; '^=' exclude exact",
         "auto: prefers ib*, avoids lo and docker* unless nothing else",
         "IP interfaces NCCL uses for bootstrap and the socket transport", source=UTILS_CC),
    nccl("NCCL_SOCKET_FAMILY", "family", "AF_INET or AF_INET6 (compared case-sensitively)",
         "either", "force IPv4 or IPv6 interfaces", choices=("AF_INET", "AF_INET6"),
         source=NCCL_GITHUB + "src/misc/socket.cc#L178-L188"),
    number("NCCL_SOCKET_MAGIC", "integer (decimal or 0x hex)", "built-in",
           "magic value of NCCL's internal socket handshake"),
    number("NCCL_SOCKET_RETRY_CNT", "any positive value", "34",
           "retries of a socket connection after ETIMEDOUT, ECONNREFUSED or EHOSTUNREACH"),
    number("NCCL_SOCKET_RETRY_SLEEP_MSEC", "any positive value", "100",
           "wait before a socket connection retry, growing linearly with the retry count"),
    number("NCCL_SOCKET_POLL_TIMEOUT_MSEC", "non-negative integer", "0",
           "poll timeout between bootstrap socket attempts (0: no poll)"),
    number("NCCL_SOCKET_NTHREADS", "1 to 16; NTHREADS x NSOCKS_PERTHREAD <= 64",
           "1 (2 on AWS, 4 on GCP gVNIC)", "CPU helper threads per socket-transport connection",
           bounds=Bounds(1, 16, "accepted", "clamp", source=SOCKET_CC), source=SOCKET_CC),
    number("NCCL_NSOCKS_PERTHREAD", ">= 1; NTHREADS x NSOCKS_PERTHREAD <= 64", "1 (8 on AWS)",
           "sockets opened by each socket-transport helper thread", source=SOCKET_CC),
    nccl("NCCL_CROSS_NIC", "int-enum", "0, 1 or 2", "2",
         "whether rings/trees may use different NICs on different nodes (rail-optimized fabrics)",
         choices=("0", "1", "2")),
    nccl("NCCL_IB_HCA", "hca-list",
         "comma list of <hca>[:<port>[:<rail>[:<plane>]]]; prefixes unless '='; '^' exclude",
         "all HCAs", "which RDMA (InfiniBand/RoCE) adapters and ports NCCL uses", source=UTILS_CC),
    number("NCCL_IB_TIMEOUT", "0 to 31 (4.096 us x 2^value; 0 or >= 32: infinite)",
           "20 (since 2.23; 18 since 2.14, 14 before)",
           "InfiniBand verbs timeout (local ack timeout)",
           bounds=Bounds(0, 31, "reject", "infinite", source=IB_CONNECT), source=IB_CONNECT),
    number("NCCL_IB_RETRY_CNT", "0 to 7", "7", "InfiniBand retry count",
           bounds=Bounds(0, 7, source=IB_CONNECT), source=IB_CONNECT),
    number("NCCL_IB_GID_INDEX", "GID index (see show_gids); -1 lets NCCL choose", "-1",
           "GID index used in RoCE mode", bounds=Bounds(-1, None)),
    nccl("NCCL_IB_ADDR_FAMILY", "family", "AF_INET or AF_INET6", "AF_INET",
         "address family of the GID NCCL selects when NCCL_IB_GID_INDEX is unset",
         choices=("AF_INET", "AF_INET6")),
    nccl("NCCL_IB_ADDR_RANGE", "str", "CIDR range (IPv4 or IPv6)", "ignored if unset",
         "range of GIDs NCCL may select when NCCL_IB_GID_INDEX is unset"),
    number("NCCL_IB_ROCE_VERSION_NUM", "1 or 2", "2",
           "RoCE version of the GID NCCL selects when NCCL_IB_GID_INDEX is unset"),
    number("NCCL_IB_SL", "InfiniBand service level", "0", "InfiniBand service level"),
    number("NCCL_IB_TC", "traffic class", "0", "InfiniBand traffic class field"),
    number("NCCL_IB_FIFO_TC", "traffic class", "NCCL_IB_TC", "traffic class for control messages"),
    flag("NCCL_IB_RETURN_ASYNC_EVENTS", "1", "stop IB communication on fatal IB async events"),
    flag("NCCL_OOB_NET_ENABLE", "0", "use NCCL net for out-of-band communication at init"),
    nccl("NCCL_OOB_NET_IFNAME", "str", "prefix list as NCCL_IB_HCA / NCCL_SOCKET_IFNAME",
         "unset", "network devices used for out-of-band communication"),
    number("NCCL_UID_STAGGER_THRESHOLD", "strictly positive integer", "256",
           "ranks per ncclUniqueId above which contacting it is staggered",
           bounds=Bounds(1, None)),
    number("NCCL_UID_STAGGER_RATE", "strictly positive integer (messages/s)", "7000",
           "message rate targeted when staggering", bounds=Bounds(1, None)),
    nccl("NCCL_NET", "str", "IB, Socket or a plugin's name (case-insensitive)", "auto",
         "force one network module instead of falling back"),
    nccl("NCCL_NET_PLUGIN", "str", "plugin suffix, plugin file name, or none", "libnccl-net.so",
         "which NCCL net plugin library NCCL loads"),
    nccl("NCCL_TUNER_PLUGIN", "str", "plugin suffix, plugin file name, or none",
         "libnccl-tuner.so", "which NCCL tuner plugin library NCCL loads"),
    nccl("NCCL_PROFILER_PLUGIN", "str", "plugin suffix, plugin file name, STATIC_PLUGIN or none",
         "libnccl-profiler.so", "which NCCL profiler plugin library NCCL loads"),
    nccl("NCCL_ENV_PLUGIN", "str", "plugin library name, suffix, or none", "libnccl-env.so",
         "which environment plugin NCCL loads"),
    flag("NCCL_IGNORE_CPU_AFFINITY", "0", "ignore the job's CPU affinity, use the GPU's only"),
    nccl("NCCL_CONF_FILE", "path", "path to a file with static configuration ('~' not expanded)",
         "~/.nccl.conf", "file NCCL reads settings from (besides /etc/nccl.conf)"),
    nccl("NCCL_DEBUG", "enum", "VERSION, WARN, INFO, TRACE (the parser also accepts ABORT)",
         "unset (none)", "how much NCCL logs",
         choices=("VERSION", "WARN", "INFO", "TRACE", "ABORT"),
         source=NCCL_GITHUB + "src/debug.cc#L45-L53"),
    nccl("NCCL_DEBUG_FILE", "path",
         "file name; %h = hostname, %p = pid, %% = '%', any other %x kept ('~' not expanded)",
         "stdout", "write NCCL's log to a file (one per process with %h.%p)"),
    nccl("NCCL_DEBUG_SUBSYS", "subsys-list", "comma list of subsystems; leading '^' excludes",
         "INIT,BOOTSTRAP,ENV", "which subsystems NCCL_DEBUG=INFO prints"),
    nccl("NCCL_DEBUG_TIMESTAMP_FORMAT", "str", "strftime format, %Xf for fractions",
         "[%F %T] ", "format of the timestamp on log lines"),
    nccl("NCCL_DEBUG_TIMESTAMP_LEVELS", "str",
         "comma list of VERSION, WARN, INFO, ABORT, TRACE, ALL", "WARN",
         "which log levels get a timestamp"),
    flag("NCCL_COLLNET_ENABLE", "0", "use the CollNet plugin (in-network reductions, e.g. SHARP)"),
    number("NCCL_COLLNET_NODE_THRESHOLD", "integer", "2",
           "number of nodes below which CollNet is not used"),
    nccl("NCCL_CTA_POLICY", "str", "DEFAULT, EFFICIENCY, ZERO (or legacy 0, 1, 2), '|' combines",
         "DEFAULT", "the CTA policy of communicators"),
    nccl("NCCL_NETDEVS_POLICY", "str", "AUTO, MAX:N or ALL", "AUTO",
         "how network devices are assigned to GPUs"),
    flag("NCCL_MULTI_RANK_GPU_ENABLE", "0", "allow several ranks on one GPU (experimental)"),
    nccl("NCCL_TOPO_FILE", "path", "readable XML topology of one host",
         "/var/run/nvidia-topologyd/virtualTopology.xml if present",
         "load this topology before detecting the rest (VMs, odd PCI layouts)",
         source=NCCL_GITHUB + "src/graph/xml.cc#L409-L422"),
    nccl("NCCL_TOPO_DUMP_FILE", "path", "file to write", "unset",
         "dump the detected topology as XML (to inspect, or to feed NCCL_TOPO_FILE)"),
    flag("NCCL_SET_THREAD_NAME", "0", "give NCCL's CPU threads meaningful names"),
]
