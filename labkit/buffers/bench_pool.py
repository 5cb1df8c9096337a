"""The benchmark's agents: one process each (``bench_agent``), driven over JSON lines on their
pipes (no pickle), every reply bounded by a timeout so a hung agent ends the benchmark instead of
hanging it, and every process reaped on the way out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from typing import IO, Any

from labkit.errors import LabkitError
from labkit.runtime.pace import startup_allowance_s
from labkit.services.base import CHILD_NATS_URL_ENV, CHILD_REDIS_URL_ENV

REPLY_TIMEOUT_S = 300.0  # an agent that hangs ends the benchmark instead of hanging it


def _readline(proc: subprocess.Popen[str], timeout_s: float) -> str | None:
    """One line from the agent, or None if none came within ``timeout_s``."""
    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    return box[0] if box else None


class AgentPool:
    """``n`` agent processes; ``window`` runs one push window on all of them."""

    def __init__(self, n: int, redis_url: str, nats_url: str | None) -> None:
        env = {**os.environ, CHILD_REDIS_URL_ENV: redis_url, CHILD_NATS_URL_ENV: nats_url or "",
               "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        self._errors: IO[str] = tempfile.TemporaryFile("w+")
        self.procs: list[subprocess.Popen[str]] = []
        try:
            for i in range(n):
                self.procs.append(subprocess.Popen(
                    [sys.executable, "-m", "labkit.buffers.bench_agent", str(i)], env=env,
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._errors,
                    text=True))
            # {"ready": i} from each, once n processes have imported torch on these cores
            self._replies(max(REPLY_TIMEOUT_S, startup_allowance_s(n)))
        except BaseException:
            self.close()
            raise

    def send(self, cmd: dict[str, Any]) -> None:
        line = json.dumps(cmd) + "\n"
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.write(line)
            proc.stdin.flush()

    def _replies(self, timeout_s: float = REPLY_TIMEOUT_S) -> list[dict[str, Any]]:
        replies = []
        for i, proc in enumerate(self.procs):
            assert proc.stdout is not None
            line = _readline(proc, timeout_s)
            if line is None:
                raise LabkitError(f"buffer agent {i} did not answer within {timeout_s:g} s")
            reply = json.loads(line) if line.strip() else {"error": "exited"}
            if "error" in reply:
                self._errors.seek(0)
                tail = "\n".join(self._errors.read().splitlines()[-15:])
                raise LabkitError(f"buffer agent {i} failed: {reply['error']}\n{tail}")
            replies.append(reply)
        return replies

    def collect(self) -> list[dict[str, Any]]:
        """Each agent's reply to the last command, in agent order."""
        return self._replies()

    def round_trip_s(self) -> float:
        """Seconds from sending every agent a ping to the last answer: what getting a command
        to all of them costs on this machine now."""
        began = time.time()
        self.send({"cmd": "ping"})
        self._replies()
        return time.time() - began

    def close(self) -> None:
        for proc in self.procs:
            try:
                if proc.poll() is None and proc.stdin is not None:
                    proc.stdin.write('{"cmd": "quit"}\n')
                    proc.stdin.close()
            except OSError:
                pass
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        self._errors.close()
