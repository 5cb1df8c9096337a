"""What the benchmark's learner checks and records: every returned experience seen once, with the
bytes it was sent with (``Tracker``), and when each agent pushed (``Spans``), so rates are taken
over what really happened; and how the measurement windows are timed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

LEAD_ROUND_TRIPS = 5.0  # a window's command goes out this many measured round trips early,
LEAD_MIN_S = 0.02  # and never less, so that every agent is waiting when the window opens
DRAIN_LIMIT_S = 120.0  # only bounds a drain that keeps getting items
DRAIN_QUIET_S = 2.0  # a drain short of what was pushed ends after pulls were empty this long


@dataclass
class Tracker:
    """Checks what the learner gets: ids seen once, tensor bytes as the agents sent them.

    Seen (agent, seq) pairs are a bit map per agent (the agents number from 0 up), so a chunk
    is checked with numpy, without a Python loop per experience (:meth:`take_chunks`)."""

    expected_obs: bytes
    guide: bool
    returned: int = 0
    intact: int = 0
    corrupt: int = 0
    duplicates: int = 0
    unique: int = 0
    """Distinct (agent, seq) pairs returned."""
    seen: dict[int, np.ndarray] = field(default_factory=dict, repr=False)

    def _new(self, agent_ids: np.ndarray, seqs: np.ndarray) -> np.ndarray:
        """Which rows are a first sighting of their (agent, seq); records them."""
        n = len(seqs)
        agent, first = int(agent_ids[0]), int(seqs[0])
        bits = self.seen.get(agent)
        if (bits is not None and first >= 0 and first + n <= len(bits)
                and int(seqs[-1]) == first + n - 1 and (agent_ids == agent).all()
                and (seqs == np.arange(first, first + n)).all() and not bits[first:first + n].any()):
            bits[first:first + n] = True  # one agent's run of new seqs: the usual chunk
            return np.ones(n, dtype=bool)
        new = np.zeros(n, dtype=bool)
        for agent in np.unique(agent_ids).tolist():
            rows = np.flatnonzero(agent_ids == agent)
            mine = seqs[rows]
            ok = mine >= 0  # a negative seq is no agent's: never new
            bits = self.seen.get(agent)
            top = int(mine.max(initial=-1)) + 1
            if bits is None or len(bits) < top:
                grown = np.zeros(max(top, 2 * (0 if bits is None else len(bits)), 1024), bool)
                if bits is not None:
                    grown[:len(bits)] = bits
                self.seen[agent] = bits = grown
            _, first = np.unique(mine, return_index=True)  # repeats inside this batch
            once = np.zeros(len(mine), dtype=bool)
            once[first] = True
            fresh = ok & once
            fresh[fresh] = ~bits[mine[fresh]]
            bits[mine[fresh]] = True
            new[rows] = fresh
        return new

    def _new_one(self, agent: int, seq: int) -> bool:
        """:meth:`_new` for one experience, without numpy calls per item."""
        bits = self.seen.get(agent)
        if seq < 0:
            return False
        if bits is None or seq >= len(bits):
            return bool(self._new(np.array([agent]), np.array([seq]))[0])  # grows the map
        if bits[seq]:
            return False
        bits[seq] = True
        return True

    def take(self, exps: list) -> int:
        """Counts ``exps`` (experiences); returns how many arrived intact and new."""
        good = 0
        for exp in exps:
            self.returned += 1
            if not self.guide:
                if not self._new_one(exp.agent_id, exp.seq):
                    self.duplicates += 1
                    continue
                self.unique += 1
            tensor = exp.tensors.get("raw" if self.guide else "obs")
            if tensor is not None and tensor.numpy().tobytes() == self.expected_obs:
                good += 1
            else:
                self.corrupt += 1
        self.intact += good
        return good

    def take_chunks(self, chunks: list) -> int:
        """Counts ``chunks`` (``ExperienceChunk``), vectorised per chunk; returns how many
        experiences arrived intact and new."""
        good = 0
        want = np.frombuffer(self.expected_obs, dtype=np.uint8)
        tiled: dict[int, bytes] = {}
        for chunk in chunks:
            n = len(chunk)
            self.returned += n
            new = np.ones(n, bool) if self.guide else self._new(chunk.agent_ids, chunk.seqs)
            fresh = int(new.sum())
            if not self.guide:
                self.duplicates += n - fresh
                self.unique += fresh
            obs = chunk.tensors.get("raw" if self.guide else "obs")
            rows = None if obs is None else obs.reshape(n, obs.numel() // n).numpy().view(np.uint8)
            if rows is not None and rows.shape[1] == len(want):
                if n not in tiled:
                    tiled[n] = self.expected_obs * n
                same = (np.ones(n, bool) if rows.tobytes() == tiled[n]  # one memcmp a chunk
                        else (rows == want).all(axis=1))
                intact = int((same & new).sum())
            else:
                intact = 0
            self.corrupt += fresh - intact
            good += intact
        self.intact += good
        return good


@dataclass
class Spans:
    """When each agent of one window really pushed: its count and its own [first, last]."""

    pushed: list[int]
    first: list[float]
    last: list[float]

    @classmethod
    def of(cls, replies: list[dict[str, Any]]) -> Spans:
        return cls([int(r["pushed"]) for r in replies], [float(r["first"]) for r in replies],
                   [float(r["last"]) for r in replies])

    def own_rate(self) -> float | None:
        """The sum of each agent's rate over its own span; None when nobody pushed."""
        rates = [n / (b - a) for n, a, b in zip(self.pushed, self.first, self.last, strict=True)
                 if n > 0 and b > a]
        return sum(rates) if rates else None

    def together(self, until: float | None = None) -> tuple[float, float] | None:
        """The stretch in which every agent was pushing (cut at ``until``), or None."""
        if not all(self.pushed):
            return None
        begin, end = max(self.first), min(self.last)
        if until is not None:
            end = min(end, until)
        return (begin, end) if end > begin else None

    def overlap(self) -> float:
        """The share of this phase (first start to last end) with every agent pushing."""
        common = self.together()
        whole = max(self.last) - min(self.first)
        return round((common[1] - common[0]) / whole, 3) if common and whole > 0 else 0.0


class Learner:
    """The benchmark's learner: pulls chunks where the buffer returns them as they travelled
    (checked a chunk at a time), experiences otherwise."""

    def __init__(self, buffer: Any, tracker: Tracker, batch: int, chunked: bool) -> None:
        self.buffer, self.tracker, self.batch, self.chunked = buffer, tracker, batch, chunked

    def pull(self) -> tuple[int, int]:
        """One pull: (experiences returned, of which intact and new)."""
        if self.chunked:
            chunks = self.buffer.pull_chunks(self.batch)
            return sum(len(c) for c in chunks), self.tracker.take_chunks(chunks)
        exps = self.buffer.pull(self.batch)
        intact = self.tracker.take(exps)
        if exps:
            self.buffer.ack(exps)
        return len(exps), intact


def drain_bench(learner: Learner, want: int) -> tuple[int, float]:
    """Pulls until ``want`` experiences came back, or pulls stayed empty ``DRAIN_QUIET_S``
    (a slow server may answer one pull empty and the next one full); returns (intact, seconds
    until the last experience came back)."""
    started = time.time()
    got = intact = 0
    last_item = quiet_since = started
    while got < want and time.time() - started < DRAIN_LIMIT_S:
        n, good = learner.pull()
        if not n:
            if time.time() - quiet_since >= DRAIN_QUIET_S:
                break
            time.sleep(0.01)
            continue
        got += n
        intact += good
        last_item = quiet_since = time.time()
    return intact, last_item - started
