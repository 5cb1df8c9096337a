"""One agent process of ``labkit bench buffer``: pushes synthetic experiences when told.

Speaks JSON lines: prints ``{"ready": agent_id}`` once imported, then answers each command
read from stdin with one line. ``{"cmd": "open", "impl", "namespace", "payload", "parser"}`` connects (``parser``: redis-py's reply parser) and
warms up (``{"ok": true}``); ``{"cmd": "ping"}`` answers ``{"pong": time}`` at once (the parent
times it to know how early a window's command must go out); ``{"cmd": "push", "impl",
"namespace", "start", "end", "batch", "payload", "chunk"}`` waits until ``start``
(``time.time()``), pushes batches until ``end`` (with ``chunk`` N: ``batch`` chunks of N
experiences a push, through ``push_chunks``) and prints ``{"pushed", "first", "last"}`` (or ``{"error"}``;
``first`` is when this agent really began, later than ``start`` when it woke late, and it
pushes nothing when it woke after ``end``; ``cpu_s``: its CPU seconds while pushing); ``{"cmd": "quit"}`` ends it.
Server URLs come from the environment (``LABKIT_REDIS_URL`` / ``LABKIT_NATS_URL``),
never from argv, where ``ps`` would show their passwords. Nothing is pickled.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import numpy as np

from labkit.buffers.base import ExperienceBuffer, client_options
from labkit.buffers.chunk import ExperienceChunk
from labkit.buffers.frame import Experience, make_experience
from labkit.buffers.kinds import open_buffer
from labkit.services.base import CHILD_NATS_URL_ENV, CHILD_REDIS_URL_ENV


def url_for(impl: str) -> str:
    """The server URL an implementation talks to, from this process's environment."""
    return os.environ[CHILD_NATS_URL_ENV if impl == "nats" else CHILD_REDIS_URL_ENV]


class Agent:
    """Keeps one buffer per (impl, namespace) and a per-impl sequence counter."""

    def __init__(self, agent_id: int) -> None:
        self.agent_id = agent_id
        self.buffers: dict[tuple[str, str], ExperienceBuffer] = {}
        self.seqs: dict[str, int] = {}
        self.clients: list[Any] = []  # Redis clients opened here (the buffers do not own them)

    def buffer(self, impl: str, namespace: str, parser: str = "") -> ExperienceBuffer:
        """The buffer of (impl, namespace); a Redis one with a client using ``parser``."""
        key = (impl, namespace)
        if key not in self.buffers:
            target: Any = url_for(impl)
            if impl != "nats":
                import redis

                target = redis.Redis.from_url(target, **client_options(parser))
                self.clients.append(target)
            self.buffers[key] = open_buffer(impl, target, agent_id=self.agent_id,
                                            agents=[self.agent_id], namespace=namespace)
        return self.buffers[key]

    def open(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """Connects and warms up (imports, first tensors) before any window opens."""
        buf = self.buffer(cmd["impl"], cmd["namespace"], cmd.get("parser") or "")
        make_experience(self.agent_id, 0, int(cmd["payload"]))
        if hasattr(buf, "redis"):
            buf.redis.ping()
        return {"ok": True}

    def push(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """Pushes batches of ``cmd["batch"]`` between ``start`` and ``end``; returns counts.
        With ``cmd["chunk"]`` N, a batch is ``batch`` chunks of N experiences."""
        impl, batch = cmd["impl"], int(cmd["batch"])
        chunk = int(cmd.get("chunk") or 0)
        buf = self.buffer(impl, cmd["namespace"])
        tensors = make_experience(self.agent_id, 0, int(cmd["payload"])).tensors
        stacked = {name: t.expand(chunk, *t.shape).contiguous() for name, t in tensors.items()}
        ids = np.full(chunk, self.agent_id, dtype=np.int64)
        versions = np.zeros(chunk, dtype=np.int64)
        seq = self.seqs.get(impl, 0)
        start, end = float(cmd["start"]), float(cmd["end"])
        while (wait := start - time.time()) > 0:
            time.sleep(min(wait, 0.01))
        first, cpu0 = time.time(), time.process_time()
        pushed = 0
        now = first
        while now < end:
            if chunk:  # an actor's rollout tensors, already stacked: new ids and times only
                chunks = [ExperienceChunk(ids, np.arange(seq + k * chunk, seq + (k + 1) * chunk),
                                          versions, np.full(chunk, now), stacked)
                          for k in range(batch)]
                pushed += buf.push_chunks(chunks)
                seq += batch * chunk
            else:
                exps = [Experience(self.agent_id, seq + k, 0, now, tensors) for k in range(batch)]
                pushed += buf.push(exps)
                seq += batch
            now = time.time()
        self.seqs[impl] = seq
        return {"pushed": pushed, "first": first, "last": now,
                "cpu_s": time.process_time() - cpu0}

    def close(self) -> None:
        for buf in self.buffers.values():
            buf.close()
        for client in self.clients:
            client.close()


def answer(agent: Agent, cmd: dict[str, Any]) -> dict[str, Any]:
    """The reply to one command."""
    kind = cmd.get("cmd")
    if kind == "ping":
        return {"pong": time.time()}
    return agent.open(cmd) if kind == "open" else agent.push(cmd)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    agent = Agent(int(args[0]))
    print(json.dumps({"ready": agent.agent_id}), flush=True)
    try:
        for line in sys.stdin:
            cmd = json.loads(line)
            if cmd.get("cmd") == "quit":
                break
            try:
                reply = answer(agent, cmd)
            except Exception as exc:  # noqa: BLE001 (reported to the parent, which raises)
                reply = {"error": f"{type(exc).__name__}: {exc}"}
            print(json.dumps(reply), flush=True)
    finally:
        agent.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
