"""Real distributed hangs, reproduced in seconds and diagnosed: who hung the job, and where.

Each scenario (``SCENARIOS``; ``labkit hang --list``) runs a small agent loop on 2-3 gloo ranks
through labkit's launcher, with a collective timeout of a few seconds instead of PyTorch's
10 (NCCL) or 30 (gloo) minutes, and one rank going wrong: an extra collective (the agent
that's ahead), collectives in a different order, a mismatched shape, a rank stuck in Python
before a collective, a rank killed mid-run, two agents deadlocked on file locks.

``run_scenario(name)`` returns a :class:`HangReport`: the culprit rank the diagnosis found
next to the expected one, the collective (sequence number and op), how fast it was detected,
and the evidence. The evidence comes from four tools, all usable in your own jobs:

* a flight recorder for any backend (:class:`Recorder`, ``labkit.hangs.recorder``): each
  rank's last collectives in a ring buffer, dumped as JSON on a timeout, an error or SIGTERM;
  comparing the ranks' sequences names the rank that is ahead, behind, missing or different;
* ``TORCH_DISTRIBUTED_DEBUG=DETAIL``: on gloo (torch 2.13) a monitored barrier and a
  fingerprint check before every collective: mismatched ops or shapes fail at once;
* ``dist.monitored_barrier(timeout=..., wait_all_ranks=True)`` (gloo only): rank 0 names
  every rank that did not arrive;
* per-rank Python stacks by :mod:`faulthandler` (also on ``kill -USR1 <pid>``).

PyTorch's own flight recorder runs beside labkit's in every scenario (``torch_fr``: switched on
by ``TORCH_FR_BUFFER_SIZE``/``TORCH_FR_DUMP_TEMP_FILE``, dumped with who wrote it), and torch's
analyzer, ``torchfrtrace``, reads its dumps in a subprocess (``fr_analyze``,
``fr_analyze_child``): the report shows what each names and what torch's dumps lack on gloo.

A live watch (``watch``, ``watch_view``; what ranks publish for it: ``live``) follows a running
job through its Prometheus exporters and Redis heartbeats, raises the alarm when the ranks'
collective counts disagree and nothing progressed for a threshold grown from the job's own step
time, takes every rank's stacks and both dumps while the ranks live (SIGUSR1), and names the
culprit long before the timeout; ``healthy`` is its control run (no alarm). ``launched`` is one
watched launch, read back.

For NCCL jobs see ``labkit.hangs.nccl_env``: what ``NCCL_BLOCKING_WAIT`` really does in
PyTorch 2.13 and :func:`nccl_hang_env`, the variables to set instead.

The command line: ``labkit hang SCENARIO|all|healthy [--json]``, ``labkit hang watch --job J
--world-size N`` (hooks: ``labkit.hangs.run.add_arguments`` and ``labkit.hangs.run.run``;
``watch_cli``).
"""

from labkit.hangs.diagnose import Diagnosis, diagnose, load_dumps
from labkit.hangs.file_locks import FileLockTimeoutError, file_lock
from labkit.hangs.fr_analyze import TorchVerdict
from labkit.hangs.healthy import HealthyReport, run_healthy
from labkit.hangs.nccl_env import EnvSetting, as_environ, nccl_hang_env
from labkit.hangs.recorder import Event, Recorder
from labkit.hangs.run import HangReport, format_report, format_watch, run_all, run_scenario
from labkit.hangs.scenarios import DEFAULT_TIMEOUT_S, SCENARIOS, Scenario
from labkit.hangs.watch import Watch, WatchResult

__all__ = [
    "DEFAULT_TIMEOUT_S", "SCENARIOS", "Diagnosis", "EnvSetting", "Event", "HangReport",
    "FileLockTimeoutError", "HealthyReport", "Recorder", "Scenario", "TorchVerdict", "Watch",
    "WatchResult", "as_environ", "diagnose", "file_lock", "format_report", "format_watch",
    "load_dumps", "nccl_hang_env", "run_all", "run_healthy", "run_scenario",
]
