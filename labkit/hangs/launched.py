"""One hang job launched, watched live and read back: what ``labkit.hangs.run`` builds its reports
from.

:func:`launch_watched` runs ``run_rank.py`` under labkit's launcher in a private temporary
folder with both flight recorders on (torch's through the documented environment,
``labkit.hangs.torch_fr.fr_env``), publishing live to the lab's Redis under a job name of its
own while a :class:`~labkit.hangs.watch.Watch` follows it in a thread. After the launch it reads
labkit's dumps and stacks, runs torch's analyzer on torch's dumps (a subprocess, bounded by a
limit grown from this launch's own duration), measures what torch's dumps lack, forgets the
job's keys in Redis and removes the folder: nothing outlives the call.
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labkit.hangs.diagnose import load_dumps, main_thread_stack
from labkit.hangs.fr_analyze import TorchVerdict, analyze, measure_gaps
from labkit.hangs.recorder import dump_folder, stacks_path
from labkit.hangs.scenarios import Scenario
from labkit.hangs.torch_fr import fr_env
from labkit.hangs.watch import Watch, WatchResult

Echo = Callable[[str], None]
LAUNCH_ALLOWANCE_S = 120.0  # start-up and tear-down on top of the scenario's timeout
ANALYZE_FACTOR = 2.0  # the analyzer starts torch once: bounded by twice this launch's time


@dataclass
class Launched:
    """What one launch left: the launcher's result, labkit's dumps and main-thread stacks, the
    live watch's result, torch's analyzer's verdict and the measured gaps in torch's dumps."""

    result: Any
    seconds: float
    dumps: dict[int, dict] = field(default_factory=dict)
    stacks: dict[int, str] = field(default_factory=dict)
    watch: WatchResult | None = None
    watch_error: str = ""
    torch: TorchVerdict | None = None
    torch_gaps: dict[str, Any] = field(default_factory=dict)


def launch_watched(script: Path, spec: Scenario, config: dict[str, Any], limit_s: float,
                   env: dict[str, str], echo: Echo | None = None, watch: bool = True,
                   end_job: bool = False, analyze_torch: bool = True) -> Launched:
    """Launch ``spec`` with ``config`` for ``script`` (run_rank.py); ``limit_s`` bounds the
    launch."""
    from labkit.orchestration.control import JOB_ENV
    from labkit.orchestration.fleet import forget
    from labkit.runtime.launch import launch_local
    from labkit.services.base import CHILD_REDIS_URL_ENV

    job = f"hang-{spec.name}-{uuid.uuid4().hex[:8]}"
    url, watch_error = (_redis_url() if watch else (None, "not asked for"))
    stop, holder = threading.Event(), {}
    with tempfile.TemporaryDirectory(prefix="labkit-hang-") as run_dir:
        folder = dump_folder(run_dir)
        env = {**env, **fr_env(folder)}
        thread = None
        if url:
            env.update({CHILD_REDIS_URL_ENV: url, JOB_ENV: job})
            watcher = Watch(url, job, spec.world_size, end_job=end_job, echo=echo, stop=stop)
            thread = threading.Thread(target=lambda: holder.update(result=watcher.run()),
                                      name=f"labkit-watch-{job}", daemon=True)
            thread.start()
        started = time.monotonic()
        result = launch_local(script, json.dumps(config), nproc_per_node=spec.world_size,
                              timeout_s=limit_s, env=env, echo=echo, run_dir=run_dir)
        seconds = time.monotonic() - started
        stop.set()
        if thread is not None:
            thread.join(LAUNCH_ALLOWANCE_S)
            if url:
                _forget(forget, url, job)
        launched = Launched(result, seconds, watch=holder.get("result"), watch_error=watch_error)
        launched.dumps = load_dumps(folder)
        for rank in range(spec.world_size):
            path = stacks_path(folder, rank)
            if path.exists() and (stack := main_thread_stack(path.read_text(errors="replace"))):
                launched.stacks[rank] = stack
        if analyze_torch:
            launched.torch = analyze(folder, spec.world_size,
                                     max(30.0, ANALYZE_FACTOR * seconds))
            launched.torch_gaps = measure_gaps(folder, launched.dumps)
    return launched


def _redis_url() -> tuple[str | None, str]:
    """The lab's Redis for the live watch, or why there is none (the run goes on without)."""
    from labkit.services.shared import redis_url

    try:
        return redis_url(), ""
    except Exception as exc:  # noqa: BLE001
        return None, f"no Redis for the live watch: {exc}"


def _forget(forget: Callable[..., int], url: str, job: str) -> None:
    try:
        forget(url, job)
    except Exception:  # noqa: BLE001 (keys in the lab's Redis are not worth failing a run)
        pass
