"""NCCL's documented variables, "Debugging" section: for experiments and workarounds.

NCCL's env page: these should not be used in production nor kept in scripts, or only as a
workaround until the problem is fixed (``NCCL_DOC``). Clamps and removals
are taken from NCCL's source at the tag in each ``source``.
"""

from __future__ import annotations

from labkit.nccl.registry_nccl import LEVEL_VALUES, LEVELS, flag, nccl, number
from labkit.nccl.variable import NCCL_GITHUB, Bounds

CONNECT_CC = NCCL_GITHUB + "src/graph/connect.cc#L331-L359"
CTAS_CC = NCCL_GITHUB + "src/init.cc#L2013-L2194"
CGA_CC = NCCL_GITHUB + "src/init.cc#L2001-L2011"
TUNING_CC = NCCL_GITHUB + "src/graph/tuning.cc#L17-L34"
GDR_LEVELS = ("LOC", "PIX", "PXB", "PHB", "SYS")


def debug(name: str, kind: str, values: str, default: str, meaning: str, **extra):
    """A variable of NCCL's Debugging section."""
    return nccl(name, kind, values, default, meaning, debug_only=True, **extra)


def debug_flag(name: str, default: str, meaning: str, **extra):
    return flag(name, default, meaning, debug_only=True, **extra)


def debug_number(name: str, values: str, default: str, meaning: str, **extra):
    return number(name, values, default, meaning, debug_only=True, **extra)


DEBUGGING = [
    debug_flag("NCCL_P2P_DISABLE", "0",
               "disable the P2P transport (CUDA direct access over NVLink or PCI)"),
    debug("NCCL_P2P_LEVEL", "level", LEVEL_VALUES, "auto",
          "largest GPU-to-GPU distance at which P2P is used", choices=LEVELS,
          source=NCCL_GITHUB + "src/graph/paths.cc#L244-L282"),
    debug_flag("NCCL_P2P_DIRECT_DISABLE", "0",
               "forbid direct access to user buffers between GPUs of one process"),
    debug_flag("NCCL_SHM_DISABLE", "0",
               "disable the shared-memory transport (then the network is used between sockets)"),
    debug_number("NCCL_BUFFSIZE", "bytes, powers of 2 recommended", "4194304",
                 "buffer size per pair of GPUs", bounds=Bounds(1, None)),
    debug_number("NCCL_NTHREADS", "64, 128, 256 or 512", "512 (256 on some older GPUs)",
                 "CUDA threads per block", source=TUNING_CC),
    debug_number("NCCL_MAX_NCHANNELS", ">= 1", "platform dependent",
                 "cap on channels (CUDA blocks) NCCL uses", deprecated="2.17",
                 deprecated_by="NCCL_MAX_CTAS", source=CONNECT_CC,
                 bounds=Bounds(1, 64, "clamp", "clamp", ("2.25", 32), CONNECT_CC)),
    debug_number("NCCL_MIN_NCHANNELS", "up to 32 (2.5 to 2.24), 64 since 2.25",
                 "platform dependent",
                 "minimum channels (CUDA blocks) NCCL uses", deprecated="2.17",
                 deprecated_by="NCCL_MIN_CTAS", source=CONNECT_CC,
                 bounds=Bounds(0, 64, "clamp", "clamp", ("2.25", 32), CONNECT_CC)),
    debug_flag("NCCL_CHECKS_DISABLE", "0", "disable argument checks on each collective call",
               deprecated="2.2.12", removed="2.3.5"),
    debug_flag("NCCL_CHECK_POINTERS", "0", "check CUDA pointers on each collective call",
               deprecated="2.29.7"),
    debug("NCCL_CHECK_MODE", "enum", "DEFAULT, DEBUG_LOCAL or DEBUG_GLOBAL", "DEFAULT",
          "how input arguments are checked", choices=("DEFAULT", "DEBUG_LOCAL", "DEBUG_GLOBAL")),
    # NCCL's docs: "The default value is PARALLEL. Setting is to GROUP will use cooperative groups
    # ... This is deprecated in 2.9": the GROUP value is deprecated, not the variable.
    debug("NCCL_LAUNCH_MODE", "enum", "PARALLEL or GROUP", "PARALLEL",
          "how NCCL launches CUDA kernels (GROUP: cooperative groups)", deprecated="2.9",
          deprecated_values=("GROUP",), choices=("PARALLEL", "GROUP"),
          source=NCCL_GITHUB + "src/init.cc#L1651-L1656"),
    debug_flag("NCCL_IB_DISABLE", "0", "disable IB/RoCE; NCCL falls back to IP sockets"),
    debug_number("NCCL_IB_AR_THRESHOLD", "bytes", "8192",
                 "size above which IB data goes in a separate message that can use adaptive "
                 "routing"),
    debug_flag("NCCL_IB_OOO_RQ", "0", "let receive WRs be consumed out of order"),
    debug_number("NCCL_IB_QPS_PER_CONNECTION", "1 to 128", "1", "IB queue pairs per connection",
                 bounds=Bounds(1, 128)),
    debug_flag("NCCL_IB_SPLIT_DATA_ON_QPS", "0 (since 2.20; 1 in 2.18 and 2.19)",
               "split each message over the queue pairs instead of round-robin"),
    debug_flag("NCCL_IB_CUDA_SUPPORT", "auto", "force or disable GPU Direct RDMA (old name)",
               anchor="nccl-ib-cuda-support"),
    debug("NCCL_IB_PCI_RELAXED_ORDERING", "int-enum", "0, 1 or 2", "2",
          "use PCI relaxed ordering for IB verbs", choices=("0", "1", "2")),
    debug_flag("NCCL_IB_ADAPTIVE_ROUTING", "1 on IB, 0 on RoCE",
               "use adaptive-routing capable IB transfers"),
    debug_flag("NCCL_IB_ECE_ENABLE", "1", "use Enhanced Connection Establishment"),
    debug("NCCL_MEM_SYNC_DOMAIN", "int-enum", "0 or 1", "1",
          "memory sync domain of NCCL kernels (sm90+)", choices=("0", "1")),
    debug_flag("NCCL_CUMEM_ENABLE", "auto since 2.19 (0 in 2.18)",
               "allocate with cuMem* functions", anchor="env-nccl-cumem-enable"),
    debug_flag("NCCL_CUMEM_HOST_ENABLE", "auto since 2.24", "allocate host memory with cuMem*"),
    debug("NCCL_NET_GDR_LEVEL", "level", "LOC, PIX, PXB, PHB, SYS (legacy integers as P2P_LEVEL)",
          "auto", "largest GPU-to-NIC distance at which GPUDirect RDMA is used",
          anchor="nccl-net-gdr-level-formerly-nccl-ib-gdr-level", choices=GDR_LEVELS,
          source=NCCL_GITHUB + "src/graph/paths.cc#L512"),
    debug("NCCL_IB_GDR_LEVEL", "level", "as NCCL_NET_GDR_LEVEL", "auto",
          "old name of NCCL_NET_GDR_LEVEL (renamed in 2.4.0)", deprecated_by="NCCL_NET_GDR_LEVEL",
          anchor="nccl-net-gdr-level-formerly-nccl-ib-gdr-level", choices=GDR_LEVELS),
    debug_flag("NCCL_NET_GDR_C2C", "1 since 2.27 (0 in 2.26)",
               "GPUDirect RDMA through a C2C-attached CPU's NIC"),
    debug_flag("NCCL_NET_GDR_READ", "1 on NVLink platforms, else 0",
               "use GPUDirect RDMA when sending"),
    debug_flag("NCCL_GDRCOPY_ENABLE", "0", "GDRCopy for NCCL's CPU-accessible control memory"),
    debug_flag("NCCL_GDRCOPY_FIFO_ENABLE", "1", "work FIFO in GDRCopy-mapped memory"),
    debug_flag("NCCL_GDRCOPY_SYNC_ENABLE", "1", "GDRCopy-mapped memory for proxy sync words"),
    debug_flag("NCCL_GDRCOPY_FLUSH_ENABLE", "0", "GDRCopy read as the receive-side flush"),
    debug_flag("NCCL_NET_SHARED_BUFFERS", "1", "one shared buffer pool for inter-node P2P"),
    debug_flag("NCCL_NET_SHARED_COMMS", "1", "reuse connections for PXN"),
    debug_flag("NCCL_IGNORE_NET_MISMATCH", "1", "ignore differing network device counts"),
    debug_flag("NCCL_IGNORE_COLLNET_MISMATCH", "0", "ignore differing CollNet device counts"),
    debug_number("NCCL_SINGLE_RING_THRESHOLD", "bytes", "262144",
                 "size under which only one ring is used", removed="2.3.0"),
    debug_number("NCCL_LL_THRESHOLD", "bytes", "depends on the rank count",
                 "size under which the LL protocol is used"),
    debug_number("NCCL_TREE_THRESHOLD", "bytes", "depends on the rank count",
                 "size under which trees are used instead of rings"),
    debug("NCCL_ALGO", "algo-list",
          "Ring, Tree, CollnetDirect, CollnetChain, NVLS, NVLSTree, PAT; '^' excludes; "
          "since 2.24 'allreduce:tree;broadcast:ring'", "auto",
          "which collective algorithms NCCL may use",
          source=NCCL_GITHUB + "src/graph/tuning.cc#L289-L298"),
    debug("NCCL_PROTO", "proto-list", "LL, LL128, Simple; '^' excludes; per-collective since 2.24",
          "auto", "which protocols NCCL may use"),
    debug_flag("NCCL_NVB_DISABLE", "0", "disable NVLink through an intermediate GPU"),
    debug_flag("NCCL_PXN_DISABLE", "0", "disable sending through a non-local NIC via NVLink"),
    debug("NCCL_P2P_PXN_LEVEL", "int-enum", "0, 1 or 2", "2",
          "when PXN is used for send/receive", choices=("0", "1", "2")),
    debug_flag("NCCL_PXN_C2C", "1 since 2.28 (0 in 2.27)", "PXN through C2C + PCIe"),
    debug_flag("NCCL_RUNTIME_CONNECT", "1", "connect peers at first use instead of at init"),
    debug_flag("NCCL_GRAPH_REGISTER", "1", "register user buffers in CUDA graph captures"),
    debug_flag("NCCL_LOCAL_REGISTER", "1", "register buffers passed to ncclCommRegister"),
    debug_flag("NCCL_LEGACY_CUDA_REGISTER", "0", "allow registering cudaMalloc buffers"),
    debug_flag("NCCL_WIN_ENABLE", "1", "window memory registration"),
    debug_flag("NCCL_SET_STACK_SIZE", "0", "set the CUDA stack size to NCCL's largest kernel's"),
    debug_flag("NCCL_GRAPH_MIXING_SUPPORT", "1",
               "support NCCL calls from parallel CUDA graphs and uncaptured calls together"),
    debug_flag("NCCL_GRAPH_STREAM_ORDERING", "1",
               "serialize communication kernels across graphs during capture"),
    debug_flag("NCCL_DMABUF_ENABLE", "1", "GPU Direct RDMA registration through dma-buf"),
    debug_number("NCCL_P2P_NET_CHUNKSIZE", "bytes, powers of 2 recommended", "131072",
                 "message size of send/recv over the network"),
    debug_number("NCCL_P2P_LL_THRESHOLD", "bytes", "16384",
                 "largest P2P message sent with the LL protocol"),
    debug_flag("NCCL_ALLOC_P2P_NET_LL_BUFFERS", "0", "dedicated LL buffers for P2P network"),
    debug_flag("NCCL_COMM_BLOCKING", "undefined", "blocking (1) or nonblocking (0) communicators"),
    debug_number("NCCL_CGA_CLUSTER_SIZE", "0 to 8", "undefined",
                 "CUDA thread block cluster size of NCCL kernels (sm90+)",
                 bounds=Bounds(0, 8, "keep-default", "clamp", source=CGA_CC)),
    debug_number("NCCL_MAX_CTAS", "1 to 64 (32 before 2.25)", "undefined",
                 "cap on CTAs (channels) NCCL uses", source=CTAS_CC,
                 bounds=Bounds(1, 64, "keep-default", "clamp", ("2.25", 32), CTAS_CC)),
    debug_number("NCCL_MIN_CTAS", "1 to 64 (32 before 2.25)", "undefined",
                 "minimum CTAs (channels) NCCL uses", source=CTAS_CC,
                 bounds=Bounds(1, 64, "keep-default", "clamp", ("2.25", 32), CTAS_CC)),
    debug("NCCL_NVLS_ENABLE", "int-enum", "0, 1 or 2", "2", "use NVLink SHARP (NVSwitch offload)",
          choices=("0", "1", "2")),
    debug_flag("NCCL_IB_MERGE_NICS", "1", "merge dual-port NICs into one logical device"),
    debug("NCCL_NET_MERGE_POLICY", "enum", "ALL or RAIL", "ALL",
          "which physical HCAs may be merged into a virtual one", choices=("ALL", "RAIL")),
    debug("NCCL_MNNVL_ENABLE", "int-enum", "0, 1 or 2", "2", "use Multi-Node NVLink",
          choices=("0", "1", "2")),
    debug_number("NCCL_MNNVL_UUID", "64-bit integer", "from the Fabric Manager", "MNNVL UUID"),
    debug_number("NCCL_MNNVL_CLIQUE_ID", "32-bit integer", "from the Fabric Manager",
                 "MNNVL clique id (soft partitions)"),
    debug_flag("NCCL_RAS_ENABLE", "1", "NCCL's RAS subsystem (job health queries)"),
    debug("NCCL_RAS_ADDR", "str", "<host>:<port>", "localhost:28028",
          "socket the RAS subsystem listens on"),
    debug_number("NCCL_RAS_TIMEOUT_FACTOR", "integer >= 1", "1", "multiplier of RAS timeouts"),
    debug_flag("NCCL_LAUNCH_ORDER_IMPLICIT", "0",
               "order NCCL operations of communicators on one device by host program order"),
    debug_flag("NCCL_LAUNCH_RACE_FATAL", "1", "fail when host threads race to launch"),
    debug_flag("NCCL_IPC_USE_ABSTRACT_SOCKET", "1", "abstract Unix sockets for CUDA IPC handles"),
    debug_flag("NCCL_SYM_GIN_KERNELS_ENABLE", "1", "symmetric kernels that use GIN"),
]
