"""Shared experience buffers: how agents hand experiences to learners.

``frame`` is the wire format (a header with dtype, shape, agent id, sequence, policy version and
timestamp, then raw bytes, then a CRC: no pickle). ``open_buffer(kind, url, ...)`` returns one of
the buffers behind one interface (``base.ExperienceBuffer``): ``guide`` (the field guide's
buffer, reproduced with its bugs as the baseline), ``list`` (Redis lists, batched), ``stream``
(Redis Streams with a consumer group: at-least-once, de-duplicated), ``nats`` (JetStream).
``drain(buffer, want)`` pulls until a known count came back, bounded by a limit.
"""

from labkit.buffers.base import BufferStats, Drained, ExperienceBuffer, drain, open_buffer
from labkit.buffers.frame import Experience, FrameError, FrameStats, decode, encode, make_experience

__all__ = ["BufferStats", "Drained", "Experience", "ExperienceBuffer", "FrameError", "FrameStats",
           "decode", "drain", "encode", "make_experience", "open_buffer"]
