"""Network plugins and the libraries under them: their variables and what they set, as data.

Sources, each checked at the file named:
- aws-ofi-nccl (EFA): ``include/nccl_ofi_param.h`` (every ``OFI_NCCL_*`` it reads; two removed,
  one ignored), ``src/platform-aws.cpp`` (the NCCL variables it sets itself on AWS instances, e.g.
  NCCL_BUFFSIZE, NCCL_P2P_NET_CHUNKSIZE, NCCL_PROTO where the NIC cannot order writes),
  ``doc/efa-env-var.md`` (which libfabric/rdma-core variables are needed, not needed, or harmful);
  it reads no ``NCCL_IB_*``.
- GCP GPUDirect-TCPX / TCPXO: ``TCPX_CONFIG`` (GoogleCloudPlatform/container-engine-accelerators,
  the TCPX test job: NCCL_ALGO=Ring, NCCL_PROTO=Simple, NCCL_NET_GDR_LEVEL=PIX,
  NCCL_P2P_PXN_LEVEL=0, channel and chunk sizes) and ``TCPXO_DOC`` (its TCPXO release notes
  and nccl-env-profile.sh settings).
- NVIDIA's IB/SHARP external plugin (nccl-rdma-sharp-plugins): ``src/ib_plugin.c`` reads
  ``NCCL_IBEXT_DISABLE`` (not ``NCCL_IB_DISABLE``; ``IBEXT_DISABLE`` at commit 2f5ac02, line
  376) and the same ``NCCL_IB_*`` names as NCCL; HPC-X installs it as
  ``nccl_rdma_sharp_plugin/lib/libnccl-net.so``. NCCL's maintainer on it: NVIDIA/nccl-tests#227.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.nccl.variable import Variable

AWS = "https://github.com/aws/aws-ofi-nccl/blob/master/"
AWS_PARAMS = AWS + "include/nccl_ofi_param.h"
AWS_PLATFORM = AWS + "src/platform-aws.cpp"
EFA_DOC = AWS + "doc/efa-env-var.md"
GKE = "https://github.com/GoogleCloudPlatform/container-engine-accelerators/blob/master/"
TCPX_CONFIG = GKE + "gpudirect-tcpx/nccl-config-latest.yaml"
TCPXO_DOC = GKE + "gpudirect-tcpxo/README.md"
TCPX_GUIDE = "https://cloud.google.com/kubernetes-engine/docs/how-to/gpu-bandwidth-gpudirect-tcpx"
IBEXT = "https://github.com/Mellanox/nccl-rdma-sharp-plugins/blob/master/src/"
IBEXT_DISABLE = ("https://github.com/Mellanox/nccl-rdma-sharp-plugins/blob/"
                 "2f5ac02e164336044388b7f1f6242cc0db575fec/src/ib_plugin.c#L376")
IBEXT_MAINTAINER = "https://github.com/NVIDIA/nccl-tests/issues/227"
UCX_DISABLE = ("https://github.com/Mellanox/nccl-rdma-sharp-plugins/blob/"
               "2f5ac02e164336044388b7f1f6242cc0db575fec/src/ucx_plugin.c#L46")


@dataclass(frozen=True)
class Plugin:
    """A network plugin (or the library under one): how to recognise it and what it implies."""

    name: str
    title: str
    prefixes: tuple[str, ...]  # variable-name prefixes only it reads
    plugin_values: tuple[str, ...]  # substrings of NCCL_NET_PLUGIN / NCCL_NET / a logged net name
    source: str
    reads_ib: bool  # reads NCCL's NCCL_IB_* names (its own IB verbs transport)
    sets: tuple[str, ...] = ()  # NCCL variables its documented configuration sets
    library_dirs: tuple[str, ...] = ()  # directory names its libnccl-net.so is installed under


PLUGINS = (
    Plugin("aws-ofi-nccl", "aws-ofi-nccl (libfabric, EFA)", ("OFI_NCCL_", "FI_EFA_"),
           ("ofi", "aws", "libfabric"), AWS_PLATFORM, False,
           ("NCCL_BUFFSIZE", "NCCL_P2P_NET_CHUNKSIZE", "NCCL_NVLSTREE_MAX_CHUNKSIZE",
            "NCCL_NVLS_CHUNKSIZE", "NCCL_NET_FORCE_FLUSH", "NCCL_NETDEVS_POLICY",
            "NCCL_NVLS_ENABLE", "NCCL_TUNER_PLUGIN", "NCCL_PROTO")),
    Plugin("gcp-tcpx", "GCP GPUDirect-TCPX", ("NCCL_GPUDIRECTTCPX_",), ("gpudirecttcpx",),
           TCPX_CONFIG, False,
           ("NCCL_ALGO", "NCCL_PROTO", "NCCL_NET_GDR_LEVEL", "NCCL_P2P_PXN_LEVEL",
            "NCCL_CROSS_NIC", "NCCL_MAX_NCHANNELS", "NCCL_MIN_NCHANNELS", "NCCL_NSOCKS_PERTHREAD",
            "NCCL_SOCKET_NTHREADS", "NCCL_DYNAMIC_CHUNK_SIZE", "NCCL_P2P_NET_CHUNKSIZE",
            "NCCL_P2P_PCI_CHUNKSIZE", "NCCL_P2P_NVL_CHUNKSIZE", "NCCL_BUFFSIZE")),
    Plugin("gcp-tcpxo", "GCP GPUDirect-TCPXO (FasTrak)", ("NCCL_FASTRAK_", "NCCL_SHIMNET_"),
           ("tcpxo", "fastrak"), TCPXO_DOC, False,
           ("NCCL_ALGO", "NCCL_PROTO", "NCCL_NET_GDR_LEVEL", "NCCL_CROSS_NIC", "NCCL_MIN_NCHANNELS",
            "NCCL_BUFFSIZE", "NCCL_NVLS_ENABLE", "NCCL_NVLSTREE_MAX_CHUNKSIZE",
            "NCCL_DYNAMIC_CHUNK_SIZE", "NCCL_P2P_NET_CHUNKSIZE", "NCCL_P2P_PCI_CHUNKSIZE",
            "NCCL_P2P_NVL_CHUNKSIZE", "NCCL_TUNER_PLUGIN", "NCCL_TUNER_CONFIG_PATH")),
    Plugin("nccl-ib-ext", "NVIDIA's IB/SHARP external plugin (nccl-rdma-sharp-plugins)",
           ("NCCL_IBEXT_", "NCCL_SHARP_", "NCCL_UCX_", "SHARP_COLL_"),
           ("ibext", "sharp", "ucx", "rdma plugin"), IBEXT + "ib_plugin.c", True,
           library_dirs=("nccl_rdma_sharp_plugin", "nccl-rdma-sharp-plugins")),
)
LIBRARY_PREFIXES = {"FI_": ("libfabric", EFA_DOC), "RDMAV_": ("rdma-core", EFA_DOC),
                    "RCCL_": ("RCCL (AMD)", "https://rocm.docs.amd.com/projects/rccl/en/latest/"
                              "api-reference/env-variables.html")}


def _plugin_var(name: str, plugin: str, kind: str, meaning: str, source: str,
                default: str = "see source", values: str = "see source") -> Variable:
    return Variable(name, "plugin", kind, values, default, False, None, meaning, source,
                    source=source, plugin=plugin)


_OFI = ("ABORT_ON_ERROR CM_NUM_RX_BUFFERS CQ_READ_COUNT CQ_SIZE CUDA_FLUSH_ENABLE "
        "DISABLE_CLOSE_MESSAGE DISABLE_DMABUF DISABLE_GDR_REQUIRED_CHECK DISABLE_NATIVE_RDMA_CHECK "
        "EAGER_MAX_SIZE EARLY_COMPLETION ERRORCHECK_MUTEX EXCLUDE_TCP_IF FORCE_NUM_RAILS "
        "GDAKI_EFA_HW_COUNTER GDR_FLUSH_DISABLE GIN_CQ_PROCESS_MAX_ITER MIN_STRIPE_SIZE "
        "MR_CACHE_DISABLE MR_KEY_SIZE NET_LATENCY NIC_DUP_CONNS NVTX_TRACE_DIMENSION PLATFORM "
        "PROGRESS_MODEL PROTOCOL RDMA_MAX_POSTED_CONTROL_BUFFERS RDMA_MAX_POSTED_EAGER_BUFFERS "
        "RDMA_MIN_POSTED_CONTROL_BUFFERS RDMA_MIN_POSTED_EAGER_BUFFERS RR_CTRL_MSG "
        "SCHED_MAX_SMALL_RR_SIZE TUNER_NET_COMP_OVERHEAD TUNER_NET_LATENCY TUNER_NUM_CHANNELS "
        "TUNER_TYPE USE_IPV6_TCP USE_LOW_LATENCY_TC FORCE_PRODUCT_NAME").split()
_TCPX = ("SOCKET_IFNAME CTRL_DEV TX_BINDINGS RX_BINDINGS PROGRAM_FLOW_STEERING_WAIT_MICROS "
         "FORCE_ACK TX_COMPLETION_NANOSLEEP").split()
_FASTRAK = ("CTRL_DEV IFNAME NUM_FLOWS ENABLE_CONTROL_CHANNEL USE_SNAP USE_LLCM "
            "LLCM_DEVICE_DIRECTORY ENABLE_HOTPATH_LOGGING PLUGIN_ACCEPT_TIMEOUT_MS").split()
_IBEXT = [("NCCL_IBEXT_DISABLE", "bool", "disable the plugin's IB transport (its NCCL_IB_DISABLE)",
           "ib_plugin.c"),
          ("NCCL_IB_IS_GLOBAL", "int", "use global routing for the plugin's IB QPs", "ib_plugin.c"),
          ("NCCL_SHARP_DISABLE", "bool", "disable the SHARP CollNet plugin", "sharp_plugin.c"),
          ("NCCL_SHARP_MAX_COMMS", "int", "communicators that may use SHARP", "sharp_plugin.c"),
          ("NCCL_SHARP_GROUP_SIZE_THRESH", "int", "group size above which SHARP is used",
           "sharp_plugin.c"),
          ("NCCL_SHARP_DISABLE_ALLGATHER", "bool", "no SHARP allgather", "sharp_plugin.c"),
          ("NCCL_SHARP_DISABLE_REDUCE_SCATTER", "bool", "no SHARP reduce-scatter",
           "sharp_plugin.c"),
          ("NCCL_SHARP_V3_DATATYPES", "int", "SHARP v3 data types", "sharp_plugin.c"),
          ("NCCL_SHARP_COLL_TRACE", "int", "trace SHARP collectives", "sharp_plugin.c"),
          ("NCCL_UCX_DISABLE", "bool", "disable the UCX transport", "ucx_plugin.c"),
          ("NCCL_UCX_CUDA_DISABLE", "bool", "no CUDA memory over UCX", "ucx_plugin.c"),
          ("NCCL_UCX_RMA_DISABLE", "bool", "disable the UCX RMA transport", "ucx_rma_plugin.c"),
          ("NCCL_UCX_TLS", "str", "UCX transports the plugin uses", "ucx_plugin.c"),
          ("NCCL_UCX_ZCOPY_THRESH", "int", "UCX zero-copy threshold", "ucx_plugin.c"),
          ("NCCL_PLUGIN_P2P", "str", "which plugin transport serves P2P (ib or ucx)",
           "p2p_plugin.c")]

PLUGIN_VARIABLES = (
    [_plugin_var(f"OFI_NCCL_{n}", "aws-ofi-nccl", "str", "aws-ofi-nccl setting", AWS_PARAMS)
     for n in _OFI]
    + [_plugin_var(f"OFI_NCCL_RDMA_{m}_POSTED_BOUNCE_BUFFERS", "aws-ofi-nccl", "plugin-removed",
                   "removed setting", AWS_PARAMS,
                   values=f"removed: use OFI_NCCL_RDMA_{m}_POSTED_CONTROL_BUFFERS or "
                   f"OFI_NCCL_RDMA_{m}_POSTED_EAGER_BUFFERS") for m in ("MIN", "MAX")]
    + [_plugin_var("OFI_NCCL_ENDPOINT_PER_COMM", "aws-ofi-nccl", "plugin-removed",
                   "endpoint per communicator", AWS_PARAMS,
                   values="endpoint-per-communicator support was removed; the option is ignored")]
    + [_plugin_var(f"NCCL_GPUDIRECTTCPX_{n}", "gcp-tcpx", "str", "GPUDirect-TCPX setting",
                   TCPX_CONFIG) for n in _TCPX]
    + [_plugin_var(f"NCCL_FASTRAK_{n}", "gcp-tcpxo", "str", "GPUDirect-TCPXO setting", TCPXO_DOC)
       for n in _FASTRAK]
    + [_plugin_var("NCCL_DYNAMIC_CHUNK_SIZE", "gcp-tcpx", "int",
                   "chunk size in GCP's TCPX/TCPXO configurations", TCPX_CONFIG),
       _plugin_var("NCCL_TUNER_CONFIG_PATH", "gcp-tcpxo", "path",
                   "config file of GCP's NCCL tuner plugin", TCPXO_DOC),
       _plugin_var("NCCL_SHIMNET_GUEST_CONFIG_CHECKER_CONFIG_FILE", "gcp-tcpxo", "path",
                   "guest config checker file of GCP's TCPXO plugin", TCPXO_DOC),
       _plugin_var("NCCL_USE_SNAP", "gcp-tcpxo", "str", "GPUDirect-TCPXO setting", TCPXO_DOC)]
    + [_plugin_var(n, "nccl-ib-ext", kind, meaning, IBEXT + path)
       for n, kind, meaning, path in _IBEXT]
    + [_plugin_var("FI_PROVIDER", "libfabric", "str", "which libfabric provider (efa, tcp, ...)",
                   EFA_DOC),
       _plugin_var("FI_EFA_USE_DEVICE_RDMA", "libfabric", "str", "EFA device RDMA", EFA_DOC),
       _plugin_var("FI_EFA_FORK_SAFE", "libfabric", "str", "EFA fork safety", EFA_DOC),
       _plugin_var("FI_EFA_USE_HUGE_PAGE", "libfabric", "str", "EFA huge pages", EFA_DOC),
       _plugin_var("FI_EFA_ENABLE_SHM_TRANSFER", "libfabric", "str", "EFA SHM transfer", EFA_DOC),
       _plugin_var("RDMAV_FORK_SAFE", "rdma-core", "str", "rdma-core fork safety", EFA_DOC)]
)

# What aws-ofi-nccl's doc/efa-env-var.md says of libfabric / rdma-core settings: (severity, text).
EFA_ADVICE = {
    "FI_EFA_USE_DEVICE_RDMA": ("info", "not needed with libfabric >= 1.18.0 and aws-ofi-nccl >= "
                               "1.7.0 (not harmful on p4/p5)"),
    "FI_EFA_FORK_SAFE": ("info", "not needed any more: the plugin sets it where libfabric needs "
                         "it"),
    "FI_EFA_ENABLE_SHM_TRANSFER": ("info", "not needed: libfabric disables SHM transfer when the "
                                   "plugin sets FI_OPT_CUDA_API_PERMITTED to false"),
    "FI_PROVIDER": ("info", "=efa is needed only for aws-ofi-nccl <= 1.5.0"),
    "RDMAV_FORK_SAFE": ("warning", "do not use: an rdma-core variable that behaves differently "
                        "from FI_EFA_FORK_SAFE and can break things on newer kernels"),
}
