"""Shared experience buffers (lesson 05): how agents hand experiences to learners.

- ``frame``: the wire format (a header with dtype, shape, agent id, sequence, policy version and
  timestamp, then raw bytes, then a CRC: no pickle).
- ``open_buffer(kind, url, ...)`` (``kinds``) returns one of the buffers behind one interface
  (``base.ExperienceBuffer``): ``guide`` (the field guide's buffer, reproduced with its bugs as
  the baseline), ``list`` (Redis lists, batched), ``stream`` (Redis Streams with a consumer
  group: at-least-once, de-duplicated), ``nats`` (JetStream).
- ``drain(buffer, want)`` pulls until a known count came back, bounded by a limit.
- ``bench`` (agents: ``bench_agent.py``): push, pull and end-to-end rates of every kind,
  ``labkit bench buffer``.
"""

from labkit.buffers.base import BufferStats, Drained, ExperienceBuffer, SeenSeqs, drain
from labkit.buffers.frame import Experience, FrameError, FrameStats, decode, encode, make_experience
from labkit.buffers.kinds import KINDS, open_buffer

__all__ = ["KINDS", "BufferStats", "Drained", "Experience", "ExperienceBuffer", "FrameError",
           "FrameStats", "SeenSeqs", "decode", "drain", "encode", "make_experience", "open_buffer"]
