"""One device-agnostic process-group setup for every lesson.

Run under torchrun (or labkit's launcher), a script calls ``info = setup()`` and gets the right
backend for its device (nccl with CUDA, gloo otherwise), its GPU from LOCAL_RANK, and a
collective timeout that is short in the lab: PyTorch's default is 10 minutes for NCCL and
30 for gloo, far too long to wait for a hang in a workshop.

Joining the group has its own, longer limit. ``init_process_group(timeout=T)`` also bounds how
far apart the ranks may arrive, and ranks arrive as far apart as their ``import torch`` and
start-up take: seconds on a quiet laptop, much longer on a loaded or slow machine. So ``setup``
joins with ``join_timeout()`` (5 minutes unless $LABKIT_JOIN_TIMEOUT says otherwise) and only
then sets the short collective timeout on the group: a slow start never looks like a hang, and
a real hang is still caught after the collective timeout.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path

from labkit.errors import ParameterError

TIMEOUT_ENV = "LABKIT_COLLECTIVE_TIMEOUT"
JOIN_TIMEOUT_ENV = "LABKIT_JOIN_TIMEOUT"
BACKEND_ENV = "LABKIT_BACKEND"  # force a backend: gloo or nccl
SIMULATED_ENV = "LABKIT_SIMULATED_NODES"  # set by labkit's launcher: every rank on this host
NODE_ENV = "LABKIT_NODE"  # which simulated node (agent) a rank runs on; stays put across restarts
WARM_ENV = "LABKIT_WARM_GROUP"  # set on a warm group's ranks (labkit.runtime.warm): the group stays
DEFAULT_TIMEOUT_S = 60.0
"""Lab default for collectives; override with LABKIT_COLLECTIVE_TIMEOUT."""
DEFAULT_JOIN_TIMEOUT_S = 300.0
"""How long ``setup`` waits for every rank to join; override with LABKIT_JOIN_TIMEOUT."""


@dataclass(frozen=True)
class RankInfo:
    """Who this process is in the job, as torchrun describes it in the environment."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int  # torchrun's GROUP_RANK: assigned by the rendezvous, not by --node-rank
    num_nodes: int
    restart_count: int
    hostname: str
    backend: str = ""
    device: str = "cpu"

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def node(self) -> int:
        """The node this rank runs on, the same after a restart: labkit's launcher numbers its
        simulated nodes (``$LABKIT_NODE``); elsewhere torchrun's ``node_rank``, which the
        rendezvous may hand out differently after a re-form."""
        return _env_int(NODE_ENV, self.node_rank)

    @property
    def run_id(self) -> str:
        """torchrun's ``--rdzv-id`` (``$TORCHELASTIC_RUN_ID``): one per job, kept over restarts."""
        return os.environ.get("TORCHELASTIC_RUN_ID") or "local"

    def to_dict(self) -> dict:
        return asdict(self)


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return default if value in (None, "") else int(value)


def rank_info(backend: str = "", device: str = "cpu") -> RankInfo:
    """Read rank and world facts from the environment torchrun sets (a world of 1 without it)."""
    world_size = _env_int("WORLD_SIZE", 1)
    local_world_size = _env_int("LOCAL_WORLD_SIZE", 1)
    return RankInfo(
        rank=_env_int("RANK", 0),
        world_size=world_size,
        local_rank=_env_int("LOCAL_RANK", 0),
        local_world_size=local_world_size,
        node_rank=_env_int("GROUP_RANK", 0),
        num_nodes=_env_int("GROUP_WORLD_SIZE", max(1, world_size // max(1, local_world_size))),
        restart_count=_env_int("TORCHELASTIC_RESTART_COUNT", 0),
        hostname=socket.gethostname(),
        backend=backend,
        device=device,
    )


def _simulated() -> bool:
    return os.environ.get(SIMULATED_ENV) == "1"


def gpu_index() -> int:
    """The GPU this rank uses: LOCAL_RANK on a real node. Simulated nodes share one host, so
    there every rank needs its own GPU: RANK (NCCL refuses two ranks on one GPU)."""
    return _env_int("RANK" if _simulated() else "LOCAL_RANK", 0)


def default_backend() -> str:
    """nccl where every rank on this host gets a CUDA GPU of its own, gloo everywhere else
    (CPU laptops, CI, more simulated ranks than GPUs). $LABKIT_BACKEND overrides."""
    forced = os.environ.get(BACKEND_ENV)
    if forced:
        return forced
    import torch

    ranks_here = _env_int("WORLD_SIZE" if _simulated() else "LOCAL_WORLD_SIZE", 1)
    return "nccl" if 0 < ranks_here <= torch.cuda.device_count() else "gloo"


def _env_seconds(name: str, default: float) -> float:
    text = os.environ.get(name)
    try:
        return default if text in (None, "") else float(text)
    except ValueError:
        raise ParameterError(f"${name} must be a number of seconds, got {text!r}") from None


def collective_timeout(seconds: float | None = None) -> timedelta:
    """The timeout for collectives: the argument, else $LABKIT_COLLECTIVE_TIMEOUT, else 60 s."""
    if seconds is None:
        seconds = _env_seconds(TIMEOUT_ENV, DEFAULT_TIMEOUT_S)
    if seconds <= 0:
        raise ParameterError(f"collective timeout must be positive, got {seconds}")
    return timedelta(seconds=seconds)


def join_timeout(collective: timedelta) -> timedelta:
    """How long joining the group may take: $LABKIT_JOIN_TIMEOUT, else 300 s, and never less
    than the collective timeout."""
    seconds = _env_seconds(JOIN_TIMEOUT_ENV, DEFAULT_JOIN_TIMEOUT_S)
    if seconds <= 0:
        raise ParameterError(f"join timeout must be positive, got {seconds}")
    return max(timedelta(seconds=seconds), collective)


def setup(backend: str | None = None, timeout_s: float | None = None) -> RankInfo:
    """Join the process group torchrun prepared and return who we are.

    ``timeout_s`` (else $LABKIT_COLLECTIVE_TIMEOUT, else 60 s) bounds every collective; joining
    is bounded by ``join_timeout`` instead (see the module's docstring).

    Outside torchrun (no RANK in the environment) it makes a world of one on a free loopback
    port, so the same code runs in a plain Python process.
    """
    import torch
    import torch.distributed as dist

    # Before the group exists: its functions take group.WORLD as a default argument, so an
    # import after init (the first DDP imports it, through torch._dynamo) holds the group past
    # destroy_process_group, and a gloo thread still running at interpreter shutdown can abort
    # the process (see teardown).
    import torch.distributed.nn  # noqa: F401

    backend = backend or default_backend()
    if "RANK" not in os.environ:
        from labkit.runtime.ports import free_port

        os.environ.update(
            RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
            MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
        )
    device = "cpu"
    if backend == "nccl":
        device = f"cuda:{gpu_index()}"
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        init_kwargs = {}
        if backend == "nccl":
            init_kwargs["device_id"] = torch.device(device)
        collective = collective_timeout(timeout_s)
        join = join_timeout(collective)
        dist.init_process_group(backend, timeout=join, **init_kwargs)
        if collective < join:  # public API sets one timeout at init; this sets it after joining
            dist.distributed_c10d._set_pg_timeout(collective)
    return rank_info(backend, device)


def teardown() -> None:
    """Leave the process group cleanly (PyTorch warns when a job exits without this).

    The group must really go, and its gloo threads with it, before Python shuts down: a gloo
    worker thread that frees the last collective's tensors after shutdown began has to take
    the GIL, Python ends such a thread, and ending it inside a C++ destructor calls
    ``std::terminate`` (SIGABRT, "terminate called without an active exception"), now and
    then, more often on a loaded machine. What can still hold the group is released first:
    DTensor's plan caches (they keep FSDP's device mesh) and DDP or FSDP modules waiting in
    reference cycles for the garbage collector. A module the script itself still references
    keeps the group alive: delete it before ``teardown()``.

    On a warm group's ranks (``%torchrun_start``) it does nothing: the group outlives the cell
    and ends with the group, so a cell written for a fresh job runs there unchanged."""
    import gc

    if os.environ.get(WARM_ENV) == "1":
        return

    import torch.distributed as dist

    if dist.is_initialized():
        _clear_dtensor_caches()
        gc.collect()
        dist.destroy_process_group()


def _clear_dtensor_caches() -> None:
    """Forget DTensor's cached sharding and redistribution plans (private torch API; a torch
    without it keeps them, and the group they hold)."""
    import sys

    if "torch.distributed.tensor" not in sys.modules:
        return  # no DTensor was made: nothing cached
    try:
        from torch.distributed.tensor import _redistribute
        from torch.distributed.tensor.debug import _clear_sharding_prop_cache

        _clear_sharding_prop_cache()
        _redistribute.clear_redistribute_planner_cache()
        _redistribute._gen_transform_infos.cache_clear()
    except (ImportError, AttributeError):
        return


def print0(*args, **kwargs) -> None:
    """print() on rank 0 only, so a message appears once, not once per rank."""
    if _env_int("RANK", 0) == 0:
        print(*args, flush=True, **kwargs)


def wait_for_peers(folder: Path, rank: int, world_size: int, limit_s: float = 300.0) -> None:
    """A file barrier before joining the group. The group's timeout (a few seconds here) also
    bounds joining it, and on a busy machine one rank may take longer than that to import
    torch: waiting here first keeps a slow start from looking like a hang."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"rank{rank}").touch()
    deadline = time.monotonic() + limit_s
    while len(list(folder.iterdir())) < world_size and time.monotonic() < deadline:
        time.sleep(0.05)
