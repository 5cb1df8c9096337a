"""Start agent processes, release them together, collect one JSON line each, leave nothing.

Each agent is ``python -m labkit.locks.agent SPEC`` (no fork, no pickle). They report ready
through Redis and block on a start list, so process start-up (seconds on a busy machine) is
not part of the race. Whatever happens, every agent still running when :func:`run_agents`
returns or raises is killed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from typing import IO, Any, NoReturn

from labkit.locks.base import LockExperimentError, connect
from labkit.services.base import CHILD_REDIS_URL_ENV

START_TIMEOUT_S = 60.0  # imports and connect of every agent, on a loaded 2-core machine


def _tail(errors: IO[str], lines: int = 15) -> str:
    errors.seek(0)
    return "\n".join(errors.read().splitlines()[-lines:])


def _failed(index: int, errors: IO[str], why: str) -> NoReturn:
    raise LockExperimentError(f"lock agent {index} {why}; its stderr ends with:\n"
                              f"{_tail(errors) or '(empty)'}")


def run_agents(url: str, namespace: str, specs: list[dict[str, Any]],
               timeout_s: float) -> tuple[list[dict[str, Any]], float]:
    """Runs one agent per spec (each gets ``ns``, ``index``, ``start_timeout_s`` added) and
    returns their JSON replies in order and the seconds from the start signal to the last
    reply. :class:`LockExperimentError` if one fails, hangs past ``timeout_s`` (after the
    start signal) or prints no result."""
    client = connect(url)
    env = {**os.environ, CHILD_REDIS_URL_ENV: url, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    procs: list[subprocess.Popen[str]] = []
    logs: list[IO[str]] = []
    try:
        for index, spec in enumerate(specs):
            full = {**spec, "ns": namespace, "index": index, "start_timeout_s": START_TIMEOUT_S}
            logs.append(tempfile.TemporaryFile("w+"))
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "labkit.locks.agent", json.dumps(full)], env=env,
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=logs[-1], text=True))
        deadline = time.monotonic() + START_TIMEOUT_S
        while client.llen(f"{namespace}:ready") < len(specs):
            for index, proc in enumerate(procs):
                if proc.poll() is not None:
                    out = (proc.stdout.read() if proc.stdout else "").strip()
                    _failed(index, logs[index], f"exited before starting: {out[-500:]}")
            if time.monotonic() > deadline:
                raise LockExperimentError(
                    f"lock agents not ready within {START_TIMEOUT_S:g} s (machine overloaded?)")
            time.sleep(0.01)
        client.rpush(f"{namespace}:go", *range(len(specs)))
        started = time.monotonic()
        replies = []
        for index, proc in enumerate(procs):
            try:
                out, _ = proc.communicate(timeout=max(0.1, started + timeout_s - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise LockExperimentError(
                    f"lock agent {index} still running {timeout_s:g} s after the start: killed "
                    "(raise timeout_s if the machine is just slow)") from None
            lines = out.strip().splitlines()
            try:
                reply = json.loads(lines[-1]) if lines else None
            except ValueError:
                reply = None
            if not isinstance(reply, dict):
                _failed(index, logs[index], f"exited {proc.returncode} with no result")
            if proc.returncode != 0:  # expected outcomes (a lock timeout) exit 0
                _failed(index, logs[index], f"failed: {reply.get('error')}")
            replies.append(reply)
        return replies, time.monotonic() - started
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        for log in logs:
            log.close()
        client.close()
