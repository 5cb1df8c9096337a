"""What the buffer benchmark reads from the Redis server itself: its CPU time (``INFO cpu``) and
``redis-benchmark``'s pipelined RPUSH of the same value size on it, the ceiling a client could
reach if encoding cost nothing.
"""

from __future__ import annotations

import csv
import shutil
import subprocess
from typing import Any
from urllib.parse import unquote, urlsplit

PIPELINE = 16  # redis-benchmark -P: commands in flight per connection


def server_cpu_seconds(client: Any) -> float:
    """Redis's own CPU time so far (user + sys, all threads), from ``INFO cpu``."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def redis_benchmark_rpush(url: str, payload: int, requests: int = 100_000,
                          timeout_s: float = 120.0) -> float | None:
    """``redis-benchmark -t rpush -d payload -P 16`` against ``url``: RPUSH/s, None when the
    tool is not on PATH or fails. It fills ``mylist*``: :func:`clear_benchmark_keys` removes it."""
    exe = shutil.which("redis-benchmark")
    if exe is None:
        return None
    parts = urlsplit(url)
    command = [exe, "-h", parts.hostname or "127.0.0.1", "-p", str(parts.port or 6379)]
    if parts.password:
        command += ["-a", unquote(parts.password)]
    command += ["-t", "rpush", "-d", str(payload), "-P", str(PIPELINE), "-n", str(requests),
                "-q", "--csv"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_benchmark_csv(done.stdout, "RPUSH")


def parse_benchmark_csv(text: str, test: str) -> float | None:
    """The requests/s of ``test`` in redis-benchmark ``--csv`` output (old and 7.x layouts)."""
    for row in csv.reader(text.splitlines()):
        if len(row) >= 2 and row[0].strip().upper().startswith(test.upper()):
            try:
                return float(row[1])
            except ValueError:
                return None
    return None


def clear_benchmark_keys(client: Any) -> None:
    """Deletes the list redis-benchmark's RPUSH filled (``mylist``, ``mylist:{tag}``)."""
    keys = list(client.scan_iter(match="mylist*"))
    if keys:
        client.delete(*keys)
