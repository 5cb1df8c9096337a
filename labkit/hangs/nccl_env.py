"""Environment for diagnosing NCCL hangs, and what the guide's "NCCL_BLOCKING_WAIT=1" really does.

The guide: "Set NCCL_BLOCKING_WAIT=1 ... forces NCCL to fail fast". In PyTorch 2.13:

* It is PyTorch's variable, not NCCL's: ``TORCH_NCCL_BLOCKING_WAIT``. ``NCCL_BLOCKING_WAIT`` is
  a legacy alias: still read, with a deprecation warning, and the new name wins when both are
  set (``ProcessGroupNCCL.hpp`` lists ``{"TORCH_NCCL_BLOCKING_WAIT", "NCCL_BLOCKING_WAIT"}``;
  ``getCvarBool`` in ``c10d/Utils.hpp`` gives the first name priority).
* It makes ``work.wait()`` block the calling CPU thread and raise once the process group's
  timeout expires: ``init_process_group(timeout=...)``, 10 minutes by default for NCCL. It
  fails fast only if you shorten that timeout, which is the actual fix
  (``labkit.runtime.dist.setup`` uses ``LABKIT_COLLECTIVE_TIMEOUT``).
* Without it the watchdog already acts on a timeout: ``TORCH_NCCL_ASYNC_ERROR_HANDLING``,
  default 3 (SkipCleanUp: tear the process down without aborting communicators); 1 aborts and
  tears down, 2 only aborts, 0 does nothing (``ErrorHandlingMode`` in ``ProcessGroupNCCL.hpp``).

Failing is half the job; finding *who* hangs is the other: ``TORCH_DISTRIBUTED_DEBUG=DETAIL``
(collective fingerprint checks), the NCCL flight recorder (below), and on gloo
``dist.monitored_barrier(wait_all_ranks=True)``. Every name here was checked against torch
2.13's headers (``ProcessGroupNCCL.hpp``, ``FlightRecorder.hpp``), its Python sources or, for
``TORCH_FR_DUMP_TEMP_FILE`` (and its legacy name ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``), the
strings of ``libtorch_cpu.so``. The flight recorder's variables have backend-neutral names
since it records gloo too (``TORCH_FR_BUFFER_SIZE`` first, ``TORCH_NCCL_TRACE_BUFFER_SIZE``
still read); ``labkit.hangs.torch_fr`` switches it on the same way in every scenario. Defaults quoted are
the ones those sources state; the CPU wheel does not ship ProcessGroupNCCL.cpp, so the default
dump location is not quoted.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EnvSetting:
    value: str
    reason: str


def nccl_hang_env(dump_prefix: str = "/tmp/nccl_trace_rank_") -> dict[str, EnvSetting]:
    """Variables to set on every rank of an NCCL job that hangs, each with a one-line reason.
    Pass a shared or per-node folder in ``dump_prefix`` to collect the dumps (prefix + rank)."""
    return {
        "TORCH_DISTRIBUTED_DEBUG": EnvSetting(
            "DETAIL", "wraps the group in ProcessGroupWrapper: before every collective a "
            "monitored barrier names missing ranks and a fingerprint check (op, shapes, "
            "dtypes) fails at once on a mismatch; slow, for debugging only"),
        "TORCH_FR_BUFFER_SIZE": EnvSetting(
            "2000", "flight recorder: keep each rank's last 2000 collective events (2000 is "
            "the 2.13 default, 0 turns it off; TORCH_NCCL_TRACE_BUFFER_SIZE is the old name)"),
        "TORCH_NCCL_DUMP_ON_TIMEOUT": EnvSetting(
            "1", "write the flight recorder to a file when the watchdog sees a timeout"),
        "TORCH_FR_DUMP_TEMP_FILE": EnvSetting(
            dump_prefix, "where the dumps go: this prefix followed by the rank (the old name "
            "is TORCH_NCCL_DEBUG_INFO_TEMP_FILE); read them with torchfrtrace DIR -p PREFIX"),
        "TORCH_NCCL_ENABLE_MONITORING": EnvSetting(
            "1", "dump-on-timeout needs the monitoring thread (ProcessGroupNCCL.hpp)"),
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": EnvSetting(
            "3", "the default: on a timeout the watchdog tears the process down instead of "
            "leaving it hanging"),
        "TORCH_NCCL_DESYNC_DEBUG": EnvSetting(
            "1", "on a timeout, report which rank is out of step (works with "
            "TORCH_NCCL_ASYNC_ERROR_HANDLING)"),
    }


def as_environ(settings: dict[str, EnvSetting]) -> dict[str, str]:
    """``{name: value}``, ready for ``os.environ.update`` or ``launch_local(env=...)``."""
    return {name: s.value for name, s in settings.items()}
