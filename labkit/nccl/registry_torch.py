"""PyTorch, gloo and torchrun variables, as torch 2.13 reads them.

Sources: torch 2.13's installed headers ``torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp``
(the ``TORCH_NCCL_*`` lists, each with its legacy ``NCCL_*`` alias; ``getCvar*`` in ``Utils.hpp``
prefers the first name and warns "Environment variable X is deprecated; use Y instead" for the
others), ``FlightRecorder.hpp`` (``TORCH_FR_BUFFER_SIZE`` / ``TORCH_FR_CPP_STACK`` with their old
``TORCH_NCCL_*`` names), the strings in ``libtorch_cpu.so`` (``TORCH_FR_DUMP_TEMP_FILE`` with
``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``), ``torch/distributed/distributed_c10d.py``, and
``torch/distributed/run.py`` (torchrun reads ``PET_<OPTION>`` for each option).
"""

from __future__ import annotations

from labkit.nccl.variable import (
    DIST_DOC,
    RUN_DOC,
    TORCH_GITHUB,
    TORCH_HEADER,
    TORCH_NCCL_DOC,
    Bounds,
    Variable,
)

TORCH_BOOL = "1/0 (also y/yes/t/true, n/no/f/false)"
FR_HEADER = TORCH_GITHUB + "torch/csrc/distributed/c10d/FlightRecorder.hpp"
FR_CPP = TORCH_GITHUB + "torch/csrc/distributed/c10d/FlightRecorder.cpp"
NCCL_UTILS = TORCH_GITHUB + "torch/csrc/distributed/c10d/NCCLUtils.cpp"
C10D_PY = TORCH_GITHUB + "torch/distributed/distributed_c10d.py"
ENV_INIT = f"{DIST_DOC}#environment-variable-initialization"


def torch_var(name: str, kind: str, values: str, default: str, meaning: str, *,
              deprecated_by: str | None = None, choices: tuple[str, ...] = (),
              source: str = TORCH_HEADER, doc: str = TORCH_NCCL_DOC,
              bounds: Bounds | None = None) -> Variable:
    """A variable read by torch.distributed (ProcessGroupNCCL unless ``source`` says otherwise)."""
    return Variable(name, "pytorch", kind, values, default, False, deprecated_by, meaning, doc,
                    choices, bounds=bounds, source=source)


def torch_flag(name: str, default: str, meaning: str, **extra) -> Variable:
    return torch_var(name, "bool", TORCH_BOOL, default, meaning, **extra)


def alias(old: str, new: str, kind: str = "bool", source: str = TORCH_HEADER,
          choices: tuple[str, ...] = (), default: str = "0") -> Variable:
    """An old name PyTorch still reads after ``new`` (it warns that it is deprecated)."""
    values = "0, 1, 2, 3" if kind == "enum" else TORCH_BOOL if kind == "bool" else "as " + new
    return torch_var(old, kind, values, default, f"old name of {new}", deprecated_by=new,
                     source=source, choices=choices)


def torchrun(name: str, kind: str, values: str, default: str, meaning: str, *,
             section: str = "environment-variables", choices: tuple[str, ...] = ()) -> Variable:
    return Variable(name, "torchrun", kind, values, default, False, None, meaning,
                    f"{RUN_DOC}#{section}", choices,
                    source=TORCH_GITHUB + "torch/distributed/run.py")


MODES = ("0", "1", "2", "3")
SEE_CPP = "see ProcessGroupNCCL.cpp"

TORCH = [
    torch_flag("TORCH_NCCL_BLOCKING_WAIT", "0",
               "wait() blocks the CPU and raises once the process-group timeout expires"),
    torch_var("TORCH_NCCL_ASYNC_ERROR_HANDLING", "enum",
              "0 none, 1 abort + tear down, 2 abort only, 3 tear down without abort", "3",
              "what the watchdog does when a collective fails or times out", choices=MODES),
    torch_flag("TORCH_NCCL_DESYNC_DEBUG", "0", "on timeout, report which rank fell out of step"),
    torch_flag("TORCH_NCCL_ENABLE_TIMING", "0", "record start events to time every collective"),
    torch_flag("TORCH_NCCL_ENABLE_MONITORING", SEE_CPP,
               "abort the process when the watchdog itself is stuck"),
    torch_var("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", "int", "seconds", SEE_CPP,
              "how long the watchdog may go without a heartbeat before the monitor aborts"),
    torch_flag("TORCH_NCCL_DUMP_ON_TIMEOUT", SEE_CPP,
               "dump the flight recorder on timeout (needs TORCH_NCCL_ENABLE_MONITORING=1 and a "
               "trace buffer > 0)"),
    torch_flag("TORCH_NCCL_PROPAGATE_ERROR", SEE_CPP,
               "propagate NCCL errors to all ranks via TCPStore"),
    torch_flag("TORCH_NCCL_RETHROW_CUDA_ERRORS", "1", "rethrow CUDA errors in the watchdog"),
    torch_var("TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC", "int", "milliseconds", SEE_CPP,
              "extra wait for the debug dump before the timeout exception"),
    torch_var("TORCH_NCCL_COORD_CHECK_MILSEC", "int", "milliseconds", SEE_CPP,
              "how often the monitor checks the other ranks' dump signal"),
    torch_flag("TORCH_NCCL_LOG_CPP_STACK_ON_UNCLEAN_SHUTDOWN", "1",
               "log C++ stack traces on unclean shutdown"),
    torch_flag("TORCH_NCCL_EXTRA_DUMP_ON_EXEC", "0", "extra flight-recorder dump on exceptions"),
    torch_flag("TORCH_NCCL_CUDA_EVENT_CACHE", SEE_CPP, "reuse CUDA events in the watchdog"),
    torch_var("TORCH_NCCL_RANKS_PER_ROOT", "int", "ranks", SEE_CPP,
              "ranks each root covers during NCCL communicator init"),
    torch_flag("TORCH_NCCL_NAN_CHECK", SEE_CPP, "check collective inputs for NaNs"),
    torch_flag("TORCH_NCCL_AVOID_RECORD_STREAMS", "0",
               "stash tensors instead of recordStream calls"),
    torch_flag("TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK", "0",
               "register every allocation with the NCCL communicators"),
    torch_flag("TORCH_NCCL_BCAST_UNIQUEID", SEE_CPP,
               "broadcast the ncclUniqueId through the store"),
    torch_flag("TORCH_NCCL_SHOW_EAGER_INIT_P2P_SERIALIZATION_WARNING", "1",
               "warn about serialized P2P with eager init"),
    torch_flag("TORCH_NCCL_HIGH_PRIORITY", SEE_CPP, "always use high-priority CUDA streams"),
    torch_var("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "path", "file name prefix", "unset",
              "named pipe that triggers a flight-recorder dump when written to"),
    torch_flag("TORCH_NCCL_USE_COMM_NONBLOCKING", "0", "nonblocking NCCL communicators",
               source=NCCL_UTILS),
    torch_var("TORCH_NCCL_NONBLOCKING_TIMEOUT", "int", "seconds", "1800 (30 minutes)",
              "timeout of nonblocking communicator operations", source=NCCL_UTILS),
    torch_var("TORCH_FR_BUFFER_SIZE", "int", ">= 0 events; 0 disables", "2000",
              "flight recorder: last N collective events kept per rank", source=FR_HEADER,
              bounds=Bounds(0, None)),
    torch_flag("TORCH_FR_CPP_STACK", "0", "flight recorder: record C++ stacks", source=FR_HEADER),
    torch_var("TORCH_FR_DUMP_TEMP_FILE", "path", "file name prefix",
              "~/.cache/comm_lib_trace_rank_", "where the flight-recorder dump goes",
              source=FR_CPP),
    torch_flag("TORCH_FR_DUMP_DYNAMIC_FILE_NAME", "0", "dynamic flight-recorder file names",
               source=FR_CPP),
    alias("TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE", "int", FR_HEADER,
          default="2000"),
    alias("TORCH_NCCL_TRACE_CPP_STACK", "TORCH_FR_CPP_STACK", source=FR_HEADER),
    alias("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_FR_DUMP_TEMP_FILE", "path", FR_CPP,
          default="~/.cache/comm_lib_trace_rank_"),
    alias("NCCL_BLOCKING_WAIT", "TORCH_NCCL_BLOCKING_WAIT"),
    alias("NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "enum", choices=MODES,
          default="3"),
    alias("NCCL_DESYNC_DEBUG", "TORCH_NCCL_DESYNC_DEBUG"),
    alias("NCCL_ENABLE_TIMING", "TORCH_NCCL_ENABLE_TIMING"),
    alias("NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK",
          "TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK"),
    torch_var("TORCH_DIST_INIT_BARRIER", "int", "0 or 1", "0",
              "barrier after init_process_group", source=C10D_PY),
    torch_flag("TORCH_GLOO_LAZY_INIT", "0", "connect gloo pairs lazily",
               source=TORCH_GITHUB + "torch/csrc/distributed/c10d/ProcessGroupGloo.hpp"),
    torch_var("TORCH_DISTRIBUTED_DEBUG", "enum", "OFF, INFO, DETAIL", "OFF",
              "extra checks and logs in torch.distributed (DETAIL checks collectives)",
              choices=("OFF", "INFO", "DETAIL"), doc=f"{DIST_DOC}#torch-distributed-debug",
              source=TORCH_GITHUB + "torch/csrc/distributed/c10d/debug.cpp"),
    torch_var("TORCH_CPP_LOG_LEVEL", "enum", "INFO, WARNING, ERROR, FATAL or 0-3", "WARNING",
              "level of c10d's C++ log messages", doc=f"{DIST_DOC}#logging",
              choices=("INFO", "WARNING", "ERROR", "FATAL", "0", "1", "2", "3"),
              source=TORCH_GITHUB + "c10/util/Logging.cpp"),
    torch_var("MASTER_ADDR", "host", "IP address or host name of rank 0", "unset",
              "where rank 0's TCPStore listens (env:// init)", doc=ENV_INIT, source=ENV_INIT),
    torch_var("MASTER_PORT", "port", "free TCP port, 1-65535", "unset",
              "TCPStore port on MASTER_ADDR", doc=ENV_INIT, source=ENV_INIT),
    torch_var("WORLD_SIZE", "int", ">= 1", "unset", "number of processes (ranks) in the job",
              doc=ENV_INIT, source=ENV_INIT, bounds=Bounds(1, None)),
    torch_var("RANK", "int", "0 to WORLD_SIZE-1, one per process", "unset",
              "this process's global rank", doc=ENV_INIT, source=ENV_INIT, bounds=Bounds(0, None)),
    Variable("GLOO_SOCKET_IFNAME", "gloo", "gloo-ifname",
             "exact interface names, comma-separated (same count on every process)", "auto",
             False, None, "interfaces gloo binds to",
             f"{DIST_DOC}#choosing-the-network-interface-to-use"),
    Variable("GLOO_DEVICE_TRANSPORT", "gloo", "str", "TCP, TCP_TLS, UV", "TCP (UV on Windows)",
             False, None, "which gloo transport ProcessGroupGloo creates",
             f"{DIST_DOC}#choosing-the-network-interface-to-use"),
    torchrun("LOCAL_RANK", "int", "0 to LOCAL_WORLD_SIZE-1", "set by torchrun",
             "rank within this node"),
    torchrun("LOCAL_WORLD_SIZE", "int", "= --nproc-per-node", "set by torchrun",
             "ranks on this node"),
    torchrun("GROUP_RANK", "set-by-launcher", "0 to nnodes-1", "set by torchrun",
             "rank of this node's worker group"),
    torchrun("TORCHELASTIC_RESTART_COUNT", "set-by-launcher", "int", "set by torchrun",
             "worker-group restarts so far"),
    torchrun("TORCHELASTIC_MAX_RESTARTS", "set-by-launcher", "int", "set by torchrun",
             "configured --max-restarts"),
    torchrun("TORCHELASTIC_RUN_ID", "set-by-launcher", "str", "set by torchrun",
             "the rendezvous run id (--rdzv-id)"),
    torchrun("PET_RDZV_BACKEND", "rdzv-backend", "c10d, etcd-v2, etcd, static",
             "static (c10d with --standalone)", "torchrun --rdzv-backend: how nodes find each "
             "other", section="usage", choices=("c10d", "etcd-v2", "etcd", "static")),
    torchrun("PET_RDZV_ENDPOINT", "endpoint", "<host>[:<port>] (c10d default port 29400)",
             "unset", "torchrun --rdzv-endpoint", section="usage"),
    torchrun("PET_NNODES", "nnodes", "N or MIN:MAX", "1:1", "torchrun --nnodes", section="usage"),
    torchrun("PET_NPROC_PER_NODE", "nproc", "int, auto, cpu, gpu, xpu", "1",
             "torchrun --nproc-per-node", section="usage"),
    torchrun("PET_NODE_RANK", "int", "0 to nnodes-1 (static backend only)", "0",
             "torchrun --node-rank", section="usage"),
    torchrun("PET_MAX_RESTARTS", "int", ">= 0", "0", "torchrun --max-restarts", section="usage"),
]
