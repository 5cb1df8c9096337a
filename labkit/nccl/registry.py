"""The variables the checker knows: one ``Variable`` per name, as data, each with its doc link.

Sources: NCCL's env page (https://github.com/NVIDIA/nccl/blob/master/docs/userguide/source/env.rst; its "Debugging"
section is what ``debug_only`` marks), PyTorch's ``ProcessGroupNCCL.hpp`` and
torch_nccl_environment_variables page, ``torch/distributed/run.py`` (torchrun reads ``PET_<OPTION>``
for each of its options, ``torch/distributed/argparse_util.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

Owner = Literal["nccl", "pytorch", "gloo", "torchrun"]

NCCL_DOC = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"
TORCH_NCCL_DOC = "https://docs.pytorch.org/docs/stable/torch_nccl_environment_variables.html"
DIST_DOC = "https://docs.pytorch.org/docs/stable/distributed.html"
RUN_DOC = "https://docs.pytorch.org/docs/stable/elastic/run.html"


@dataclass(frozen=True)
class Variable:
    """One environment variable: who reads it, what it accepts, and where that is documented."""

    name: str
    owner: Owner
    kind: str  # bool, int, enum, ifname-list, hca-list, algo-list, proto-list, path, level, ...
    values: str  # accepted values or syntax, as the docs state them
    default: str
    debug_only: bool  # listed under NCCL's "Debugging": not for production scripts
    deprecated_by: str | None
    meaning: str
    doc: str
    choices: tuple[str, ...] = ()  # for enums: the accepted tokens (compared case-insensitively)


def _nccl(name: str, kind: str, values: str, default: str, meaning: str, *,
          debug_only: bool = False, deprecated_by: str | None = None, anchor: str = "",
          choices: tuple[str, ...] = ()) -> Variable:
    anchor = anchor or name.lower().replace("_", "-")
    return Variable(name, "nccl", kind, values, default, debug_only, deprecated_by, meaning,
                    f"{NCCL_DOC}#{anchor}", choices)


_LEVELS = "LOC, NVL, PIX, PXB, PHB, SYS (legacy integers 0-4: LOC, PIX, PXB, PHB, SYS; >4 = SYS)"
_TORCH_BOOL = "1/0 (also y/yes/t/true, n/no/f/false)"

_VARIABLES = [
    # NCCL, "System configuration": fine to keep in scripts.
    _nccl("NCCL_SOCKET_IFNAME", "ifname-list",
          "comma list of prefixes; '=' exact names; '^' exclude; '^=' exclude exact",
          "auto: prefers ib*, avoids lo and docker* unless nothing else",
          "IP interfaces NCCL uses for bootstrap and the socket transport"),
    _nccl("NCCL_SOCKET_FAMILY", "enum", "AF_INET or AF_INET6", "either",
          "force IPv4 or IPv6 interfaces", choices=("AF_INET", "AF_INET6")),
    _nccl("NCCL_SOCKET_NTHREADS", "int", "1 to 16; NTHREADS x NSOCKS_PERTHREAD <= 64",
          "1 (2 on AWS, 4 on GCP gVNIC)", "CPU helper threads per socket-transport connection"),
    _nccl("NCCL_NSOCKS_PERTHREAD", "int", ">= 1; NTHREADS x NSOCKS_PERTHREAD <= 64",
          "1 (8 on AWS)", "sockets opened by each socket-transport helper thread"),
    _nccl("NCCL_CROSS_NIC", "enum", "0, 1 or 2", "2",
          "whether rings/trees may use different NICs on different nodes (rail-optimized fabrics)",
          anchor="env-nccl-cross-nic", choices=("0", "1", "2")),
    _nccl("NCCL_IB_HCA", "hca-list",
          "comma list of <hca>[:<port>[:<rail>[:<plane>]]]; prefixes unless '='; '^' exclude",
          "all HCAs", "which RDMA (InfiniBand/RoCE) adapters and ports NCCL uses"),
    _nccl("NCCL_IB_TIMEOUT", "int", "0 to 31 (4.096 us x 2^value)", "20",
          "InfiniBand verbs timeout"),
    _nccl("NCCL_IB_RETRY_CNT", "int", "0 to 7", "7", "InfiniBand retry count"),
    _nccl("NCCL_IB_GID_INDEX", "int", "GID index (see show_gids)", "-1 (auto)",
          "GID index used in RoCE mode"),
    _nccl("NCCL_NET", "str", "IB, Socket or a plugin's name (case-insensitive)", "auto",
          "force one network module instead of falling back"),
    _nccl("NCCL_DEBUG", "enum", "VERSION, WARN, INFO, TRACE (src/debug.cc also reads ABORT)", "unset (none)",
          "how much NCCL logs", choices=("VERSION", "WARN", "INFO", "TRACE", "ABORT")),
    _nccl("NCCL_DEBUG_SUBSYS", "subsys-list", "comma list of subsystems; leading '^' excludes",
          "INIT,BOOTSTRAP,ENV", "which subsystems NCCL_DEBUG=INFO prints"),
    _nccl("NCCL_DEBUG_FILE", "path", "file name; %h = hostname, %p = pid", "stdout",
          "write NCCL's log to a file (one per process with %h.%p)"),
    _nccl("NCCL_TOPO_FILE", "path", "readable XML topology of one host (NCCL >= 2.6)",
          "/var/run/nvidia-topologyd/virtualTopology.xml if present",
          "load this topology before detecting the rest (VMs, odd PCI layouts)"),
    _nccl("NCCL_TOPO_DUMP_FILE", "path", "file to write", "unset",
          "dump the detected topology as XML (to inspect, or to feed NCCL_TOPO_FILE)"),
    # NCCL, "Debugging": for experiments, not for production scripts.
    _nccl("NCCL_P2P_DISABLE", "bool", "1 disables", "0",
          "disable the P2P transport (CUDA direct access over NVLink or PCI)",
          debug_only=True, anchor="env-nccl-p2p-disable"),
    _nccl("NCCL_P2P_LEVEL", "level", _LEVELS, "auto",
          "largest GPU-to-GPU distance at which P2P is used", debug_only=True,
          anchor="env-nccl-p2p-level", choices=("LOC", "NVL", "PIX", "PXB", "PHB", "SYS")),
    _nccl("NCCL_P2P_DIRECT_DISABLE", "bool", "1 disables", "0",
          "forbid direct access to user buffers between GPUs of one process", debug_only=True),
    _nccl("NCCL_SHM_DISABLE", "bool", "1 disables", "0",
          "disable the shared-memory transport (then the network is used between sockets)",
          debug_only=True),
    _nccl("NCCL_BUFFSIZE", "int", "bytes, powers of 2 recommended", "4194304",
          "buffer size per pair of GPUs", debug_only=True),
    _nccl("NCCL_NTHREADS", "enum", "64, 128, 256 or 512", "512 (256 on some older GPUs)",
          "CUDA threads per block", debug_only=True, choices=("64", "128", "256", "512")),
    _nccl("NCCL_MAX_NCHANNELS", "int", ">= 1", "platform dependent",
          "cap on channels (CUDA blocks) NCCL uses", debug_only=True,
          deprecated_by="NCCL_MAX_CTAS"),
    _nccl("NCCL_MIN_NCHANNELS", "int", "1 to 32", "platform dependent",
          "minimum channels (CUDA blocks) NCCL uses", debug_only=True,
          deprecated_by="NCCL_MIN_CTAS"),
    _nccl("NCCL_MAX_CTAS", "int", "1 to 64 (32 before 2.25)", "auto",
          "cap on CTAs (channels) NCCL uses", debug_only=True),
    _nccl("NCCL_MIN_CTAS", "int", "1 to 64 (32 before 2.25)", "auto",
          "minimum CTAs (channels) NCCL uses", debug_only=True),
    _nccl("NCCL_IB_DISABLE", "bool", "1 disables", "0",
          "disable IB/RoCE; NCCL falls back to IP sockets", debug_only=True),
    _nccl("NCCL_IB_QPS_PER_CONNECTION", "int", "1 to 128", "1",
          "IB queue pairs per connection", debug_only=True),
    _nccl("NCCL_NET_GDR_LEVEL", "level", "LOC, PIX, PXB, PHB, SYS (legacy integers as P2P_LEVEL)",
          "auto", "largest GPU-to-NIC distance at which GPUDirect RDMA is used", debug_only=True,
          anchor="nccl-net-gdr-level-formerly-nccl-ib-gdr-level",
          choices=("LOC", "PIX", "PXB", "PHB", "SYS")),
    _nccl("NCCL_IB_GDR_LEVEL", "level", "as NCCL_NET_GDR_LEVEL", "auto",
          "old name of NCCL_NET_GDR_LEVEL (renamed in 2.4.0)", debug_only=True,
          deprecated_by="NCCL_NET_GDR_LEVEL",
          anchor="nccl-net-gdr-level-formerly-nccl-ib-gdr-level",
          choices=("LOC", "PIX", "PXB", "PHB", "SYS")),
    _nccl("NCCL_NET_GDR_READ", "bool", "0 or 1", "1 on NVLink platforms, else 0",
          "use GPUDirect RDMA when sending", debug_only=True),
    _nccl("NCCL_ALGO", "algo-list",
          "Ring, Tree, CollnetDirect, CollnetChain, NVLS, NVLSTree, PAT; '^' excludes; "
          "since 2.24 'allreduce:tree;broadcast:ring'", "auto",
          "which collective algorithms NCCL may use", debug_only=True),
    _nccl("NCCL_PROTO", "proto-list", "LL, LL128, Simple; '^' excludes; per-collective since 2.24",
          "auto", "which protocols NCCL may use", debug_only=True),
    _nccl("NCCL_NVLS_ENABLE", "enum", "0, 1 or 2", "2", "use NVLink SHARP (NVSwitch offload)",
          debug_only=True, anchor="env-nccl-nvls-enable", choices=("0", "1", "2")),
    _nccl("NCCL_CUMEM_ENABLE", "bool", "0 or 1", "auto (since 2.19)",
          "allocate with cuMem* functions", debug_only=True, anchor="env-nccl-cumem-enable"),
    _nccl("NCCL_NVB_DISABLE", "bool", "1 disables", "0",
          "disable NVLink through an intermediate GPU", debug_only=True),
    _nccl("NCCL_PXN_DISABLE", "bool", "1 disables", "0",
          "disable sending through a non-local NIC via NVLink", debug_only=True),
    # PyTorch ProcessGroupNCCL (the NCCL_* spellings are PyTorch's legacy aliases, not NCCL's).
    Variable("NCCL_BLOCKING_WAIT", "pytorch", "bool", _TORCH_BOOL, "0", False,
             "TORCH_NCCL_BLOCKING_WAIT", "old name of TORCH_NCCL_BLOCKING_WAIT", TORCH_NCCL_DOC),
    Variable("NCCL_ASYNC_ERROR_HANDLING", "pytorch", "enum", "0, 1, 2, 3", "3", False,
             "TORCH_NCCL_ASYNC_ERROR_HANDLING", "old name of TORCH_NCCL_ASYNC_ERROR_HANDLING",
             TORCH_NCCL_DOC, ("0", "1", "2", "3")),
    Variable("NCCL_DESYNC_DEBUG", "pytorch", "bool", _TORCH_BOOL, "0", False,
             "TORCH_NCCL_DESYNC_DEBUG", "old name of TORCH_NCCL_DESYNC_DEBUG", TORCH_NCCL_DOC),
    Variable("TORCH_NCCL_BLOCKING_WAIT", "pytorch", "bool", _TORCH_BOOL, "0", False, None,
             "wait() blocks the CPU and raises once the process-group timeout expires",
             TORCH_NCCL_DOC),
    Variable("TORCH_NCCL_ASYNC_ERROR_HANDLING", "pytorch", "enum",
             "0 none, 1 abort + tear down, 2 abort only, 3 tear down without abort", "3", False,
             None, "what the watchdog does when a collective fails or times out", TORCH_NCCL_DOC,
             ("0", "1", "2", "3")),
    Variable("TORCH_NCCL_TRACE_BUFFER_SIZE", "pytorch", "int", ">= 0 events; 0 disables",
             "2000 in current PyTorch (0 in older releases)", False, None,
             "flight recorder: last N collective events kept per rank", TORCH_NCCL_DOC),
    Variable("TORCH_NCCL_DUMP_ON_TIMEOUT", "pytorch", "bool", _TORCH_BOOL,
             "1 in current PyTorch (0 in older releases)", False, None,
             "dump the flight recorder on timeout or error (needs TRACE_BUFFER_SIZE > 0)",
             TORCH_NCCL_DOC),
    Variable("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "pytorch", "path", "file name prefix",
             "/tmp/nccl_trace_rank_", False, None, "where the flight-recorder dump goes",
             TORCH_NCCL_DOC),
    Variable("TORCH_NCCL_DESYNC_DEBUG", "pytorch", "bool", _TORCH_BOOL, "0", False, None,
             "on timeout, report which rank fell out of step", TORCH_NCCL_DOC),
    Variable("TORCH_NCCL_ENABLE_MONITORING", "pytorch", "bool", _TORCH_BOOL, "1", False, None,
             "kill the process when the watchdog itself is stuck", TORCH_NCCL_DOC),
    Variable("TORCH_DISTRIBUTED_DEBUG", "pytorch", "enum", "OFF, INFO, DETAIL", "OFF", False, None,
             "extra checks and logs in torch.distributed (DETAIL checks collectives)",
             f"{DIST_DOC}#torch-distributed-debug", ("OFF", "INFO", "DETAIL")),
    Variable("TORCH_CPP_LOG_LEVEL", "pytorch", "enum", "INFO, WARNING, ERROR, FATAL or 0-3",
             "WARNING", False, None, "level of c10d's C++ log messages",
             f"{DIST_DOC}#logging", ("INFO", "WARNING", "ERROR", "FATAL", "0", "1", "2", "3")),
    Variable("MASTER_ADDR", "pytorch", "host", "IP address or host name of rank 0", "unset", False,
             None, "where rank 0's TCPStore listens (env:// init)",
             f"{DIST_DOC}#environment-variable-initialization"),
    Variable("MASTER_PORT", "pytorch", "port", "free TCP port, 1-65535", "unset", False, None,
             "TCPStore port on MASTER_ADDR", f"{DIST_DOC}#environment-variable-initialization"),
    Variable("WORLD_SIZE", "pytorch", "int", ">= 1", "unset", False, None,
             "number of processes (ranks) in the job",
             f"{DIST_DOC}#environment-variable-initialization"),
    Variable("RANK", "pytorch", "int", "0 to WORLD_SIZE-1, one per process", "unset", False, None,
             "this process's global rank", f"{DIST_DOC}#environment-variable-initialization"),
    # Gloo.
    Variable("GLOO_SOCKET_IFNAME", "gloo", "ifname-list",
             "exact interface names, comma-separated (same count on every process)", "auto",
             False, None, "interfaces gloo binds to",
             f"{DIST_DOC}#choosing-the-network-interface-to-use"),
    # torchrun: what it sets for each worker, and what it reads (PET_<OPTION> = --<option>).
    Variable("LOCAL_RANK", "torchrun", "int", "0 to LOCAL_WORLD_SIZE-1", "set by torchrun", False,
             None, "rank within this node", f"{RUN_DOC}#environment-variables"),
    Variable("LOCAL_WORLD_SIZE", "torchrun", "int", "= --nproc-per-node", "set by torchrun", False,
             None, "ranks on this node", f"{RUN_DOC}#environment-variables"),
    Variable("GROUP_RANK", "torchrun", "set-by-launcher", "0 to nnodes-1", "set by torchrun", False,
             None, "rank of this node's worker group", f"{RUN_DOC}#environment-variables"),
    Variable("TORCHELASTIC_RESTART_COUNT", "torchrun", "set-by-launcher", "int", "set by torchrun",
             False, None, "worker-group restarts so far", f"{RUN_DOC}#environment-variables"),
    Variable("TORCHELASTIC_MAX_RESTARTS", "torchrun", "set-by-launcher", "int", "set by torchrun",
             False, None, "configured --max-restarts", f"{RUN_DOC}#environment-variables"),
    Variable("TORCHELASTIC_RUN_ID", "torchrun", "set-by-launcher", "str", "set by torchrun", False,
             None, "the rendezvous run id (--rdzv-id)", f"{RUN_DOC}#environment-variables"),
    Variable("PET_RDZV_BACKEND", "torchrun", "rdzv-backend", "c10d, etcd-v2, etcd, static",
             "static (c10d with --standalone)", False, None,
             "torchrun --rdzv-backend: how nodes find each other", f"{RUN_DOC}#usage",
             ("c10d", "etcd-v2", "etcd", "static")),
    Variable("PET_RDZV_ENDPOINT", "torchrun", "endpoint",
             "<host>[:<port>] (c10d default port 29400)",
             "unset", False, None, "torchrun --rdzv-endpoint", f"{RUN_DOC}#usage"),
    Variable("PET_NNODES", "torchrun", "nnodes", "N or MIN:MAX", "1:1", False, None,
             "torchrun --nnodes", f"{RUN_DOC}#usage"),
    Variable("PET_NPROC_PER_NODE", "torchrun", "nproc", "int, auto, cpu, gpu, xpu", "1", False,
             None, "torchrun --nproc-per-node", f"{RUN_DOC}#usage"),
    Variable("PET_NODE_RANK", "torchrun", "int", "0 to nnodes-1 (static backend only)", "0",
             False, None, "torchrun --node-rank", f"{RUN_DOC}#usage"),
    Variable("PET_MAX_RESTARTS", "torchrun", "int", ">= 0", "0", False, None,
             "torchrun --max-restarts", f"{RUN_DOC}#usage"),
]

REGISTRY: dict[str, Variable] = {v.name: v for v in _VARIABLES}

# Prefixes whose unknown members get an info finding ("not a variable this checker knows").
KNOWN_PREFIXES = ("NCCL_", "TORCH_NCCL_", "GLOO_")


def lookup(name: str) -> Variable | None:
    """The registry entry for ``name``, or None."""
    return REGISTRY.get(name)


def in_torchrun_worker(env: Mapping[str, str]) -> bool:
    """Whether ``env`` is a torchrun worker's (torchrun set these, so they are right)."""
    return all(name in env for name in ("TORCHELASTIC_RUN_ID", "RANK", "LOCAL_RANK", "WORLD_SIZE"))


def is_relevant(name: str) -> bool:
    """Whether the checker should look at this variable (it knows it, or it is NCCL/TORCH/GLOO)."""
    return name in REGISTRY or name.startswith(("NCCL_", "TORCH_", "GLOO_"))
