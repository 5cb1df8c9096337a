"""Shared experience buffers (lesson 05): how agents hand experiences to learners.

- ``frame``: the wire format (a header with dtype, shape, agent id, sequence, policy version and
  timestamp, then raw bytes, then a CRC: no pickle).
- ``chunk``: frame version 2, ``ExperienceChunk``: N experiences in one frame, ids per experience
  and stacked tensors, decoded into views of the reply (``push_chunks`` / ``pull_chunks``).
- ``open_buffer(kind, url, ...)`` (``kinds``) returns one of the buffers behind one interface
  (``base.ExperienceBuffer``): ``guide`` (the field guide's buffer, reproduced with its bugs as
  the baseline), ``list`` (Redis lists, batched), ``stream`` (Redis Streams with a consumer
  group: at-least-once, de-duplicated), ``nats`` (JetStream).
- ``drain(buffer, want)`` pulls until a known count came back, bounded by a limit.
- ``bench`` (``bench_core``, agents: ``bench_agent.py``, sweeps: ``bench_sweep``): push, pull and
  end-to-end rates of every kind, per item or in chunks, ``labkit bench buffer [--chunk 64]
  [--chunk-sweep 1,8,64,256] [--parser python]``.
"""

from labkit.buffers.base import BufferStats, Drained, ExperienceBuffer, SeenSeqs, drain
from labkit.buffers.chunk import ExperienceChunk, decode_chunk, encode_chunk
from labkit.buffers.frame import Experience, FrameError, FrameStats, decode, encode, make_experience
from labkit.buffers.kinds import KINDS, open_buffer

__all__ = ["KINDS", "BufferStats", "Drained", "Experience", "ExperienceBuffer", "ExperienceChunk",
           "FrameError", "FrameStats", "SeenSeqs", "decode", "decode_chunk", "drain", "encode",
           "encode_chunk", "make_experience", "open_buffer"]
