"""Experiences and checks shared by the buffer tests (Redis and NATS)."""

from __future__ import annotations

import torch

from labkit.buffers.base import ExperienceBuffer
from labkit.buffers.frame import Experience


def exp(agent: int, seq: int) -> Experience:
    """An experience whose tensors have three dtypes and shapes, all depending on (agent, seq)."""
    base = 100 * agent + seq
    return Experience(agent, seq, policy_version=7, timestamp=1000.0 + base, tensors={
        "obs": torch.arange(6, dtype=torch.int64).reshape(2, 3) + base,
        "done": torch.tensor([seq % 2 == 0, True]),
        "h": torch.full((2, 2), base / 4, dtype=torch.float16),
    })  # fmt: skip


def assert_same(got: Experience, want: Experience) -> None:
    assert (got.agent_id, got.seq, got.policy_version) == (want.agent_id, want.seq, 7)
    assert got.timestamp == want.timestamp
    assert list(got.tensors) == list(want.tensors)
    for name, tensor in want.tensors.items():
        assert got.tensors[name].dtype == tensor.dtype
        assert got.tensors[name].shape == tensor.shape
        assert torch.equal(got.tensors[name], tensor)


def drain(buf: ExperienceBuffer, batch: int = 5, ack: bool = True) -> list[Experience]:
    got: list[Experience] = []
    while items := buf.pull(batch):
        got += items
        if ack:
            buf.ack(items)
    return got
