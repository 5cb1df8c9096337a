"""The field guide's all_reduce "spin lock", measured in real torchrun ranks (gloo, CPU).

The guide (Myth 4) "adds locks" with a ``LockedBuffer`` whose ``acquire()`` all-reduces a 1
and returns when the sum equals the world size. A collective must be entered by every rank, in
the same order: it is a barrier, an agreement, not mutual exclusion. So:

- :func:`guide_lock_overlap`: every rank "acquires" at the same moment; all of them are inside
  the critical section together and their read-modify-writes of a Redis counter collide.
- :func:`guide_lock_skip`: a rank that does not call ``acquire()`` (it thinks its write is
  harmless) leaves the others blocked in the all_reduce until the collective timeout.

The rank code is ``guide_rank.py``; the correct tools are in ``fencing`` and ``lockfree``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from labkit.errors import LaunchError
from labkit.locks.base import check_int, check_seconds, connect, delete_namespace, new_namespace
from labkit.runtime.rank_script import rank_script
from labkit.services.base import CHILD_REDIS_URL_ENV

RANK_SCRIPT = rank_script(__name__)
MARK = "LABKIT_LOCKS"
LAUNCH_MARGIN_S = 120.0  # rendezvous, Redis and teardown, on top of the measured start-up


def _config(mode: str, namespace: str, rounds: int, think_s: float, skip_rank: int) -> str:
    """The one JSON argument ``guide_rank.py`` reads."""
    return json.dumps({"mode": mode, "namespace": namespace, "rounds": rounds,
                       "think_s": think_s, "skip_rank": skip_rank})


def launch_limit_s(ranks: int, work_s: float) -> float:
    """A bound on one guide-lock job that holds on a slow machine: the start-up of ``ranks``
    torch processes as measured here (``labkit.runtime.pace``), the job's own work, and a margin."""
    from labkit.runtime.pace import startup_allowance_s

    return startup_allowance_s(ranks + 1) + work_s + LAUNCH_MARGIN_S


@dataclass
class GuideOverlapResult:
    """How exclusive the guide's lock was: ``max_inside`` should be 1 for a lock."""

    ranks: int
    rounds: int
    think_s: float
    max_inside: int  # most ranks inside the "critical section" at one instant
    rounds_all_inside: int  # rounds in which every rank was inside at once
    expected: int
    final: int
    lost_updates: int  # on the Redis counter the "lock" was supposed to protect
    launch_seconds: float
    intervals: list[list[list[float]]] = field(default_factory=list, repr=False)

    @property
    def entry_spread_s(self) -> float:
        """The widest gap, over the rounds, between the first and the last rank entering the
        "critical section": how far apart the ranks were scheduled as the all_reduce returned."""
        spreads = [max(entries) - min(entries)
                   for entries in zip(*[[span[0] for span in rank] for rank in self.intervals],
                                      strict=True)]
        return round(max(spreads, default=0.0), 6)

    def describe(self) -> str:
        """What the run showed, including a run where no two ranks happened to overlap."""
        if self.max_inside > 1:
            return (f"{self.max_inside} of {self.ranks} ranks were inside the 'locked' section "
                    f"at one instant (a lock allows 1); every rank entered together in "
                    f"{self.rounds_all_inside} of {self.rounds} rounds")
        return (f"no two ranks overlapped this time: the ranks left the all_reduce up to "
                f"{self.entry_spread_s * 1000:.1f} ms apart (a busy machine scheduled them one "
                f"after the other), longer than the {self.think_s * 1000:g} ms section. They "
                "still all 'acquired' at once; raise think_s to see them inside together")


@dataclass
class GuideSkipResult:
    """What a rank that skips ``acquire()`` does to the others. The first waiting rank to time
    out exits, so the rest may fail a moment later with gloo's "Connection closed by peer"
    instead of their own timeout: ``timeout_errors`` counts the ranks that saw the timeout."""

    ranks: int
    skip_rank: int
    collective_timeout_s: float
    waiting: list[dict[str, Any]]  # per other rank: seconds blocked in acquire(), error
    all_failed: bool  # every other rank ended with an error, none acquired
    timeout_errors: int
    max_blocked_s: float
    launch_seconds: float

# The guide's lock tensor lives on the CPU here (it used .cuda()): keep the group on gloo even
# where every rank would get a GPU, since NCCL cannot all-reduce a CPU tensor.
CPU_GROUP = {"LABKIT_BACKEND": "gloo"}

def max_inside(intervals: list[tuple[float, float]]) -> int:
    """The most intervals that contain one same instant (a sweep over enter/exit events)."""
    events = sorted([(t0, 1) for t0, _ in intervals] + [(t1, -1) for _, t1 in intervals])
    inside = best = 0
    for _, step in events:  # at equal times exits (-1) sort first: touching is not overlap
        inside += step
        best = max(best, inside)
    return best


def _marks(output: list[str]) -> list[dict[str, Any]]:
    found = []
    for line in output:
        _, sep, rest = line.partition(f"{MARK} ")
        if sep:
            try:
                found.append(json.loads(rest))
            except ValueError:
                continue
    return found


def guide_lock_overlap(url: str, ranks: int = 2, rounds: int = 5, think_s: float = 0.05,
                       timeout_s: float | None = None) -> GuideOverlapResult:
    """``ranks`` torchrun ranks each take the guide's lock ``rounds`` times and, "holding"
    it, GET a Redis counter, work ``think_s``, SET it + 1. ``timeout_s`` (default: from the
    start-up measured here) bounds the job."""
    from labkit.runtime.launch import launch_local

    check_int("ranks", ranks, 2, 16)
    check_int("rounds", rounds, 1, 1000)
    check_seconds("think_s", think_s, allow_zero=True)
    limit = check_seconds("timeout_s", timeout_s if timeout_s is not None
                          else launch_limit_s(ranks, 3 * rounds * (think_s + 0.1)))
    client, ns = connect(url), new_namespace()
    try:
        result = launch_local(RANK_SCRIPT, _config("overlap", ns, rounds, think_s, -1),
                              nproc_per_node=ranks, timeout_s=limit, echo=None,
                              env={CHILD_REDIS_URL_ENV: url, **CPU_GROUP}, check=True)
    finally:
        delete_namespace(client, ns)
        client.close()
    got = result.published
    if not isinstance(got, dict):
        raise LaunchError("guide-lock ranks published nothing; output:\n"
                          + "\n".join(result.output[-20:]))
    return GuideOverlapResult(ranks, rounds, think_s, got["max_inside"],
                              got["rounds_all_inside"], got["expected"], got["final"],
                              got["lost_updates"], round(result.seconds, 3), got["intervals"])


def guide_lock_skip(url: str, ranks: int = 3, skip_rank: int | None = None,
                    collective_timeout_s: float = 5.0,
                    timeout_s: float | None = None) -> GuideSkipResult:
    """``ranks`` ranks; ``skip_rank`` (default: the last) writes without ``acquire()``, the
    others call it. ``LABKIT_COLLECTIVE_TIMEOUT`` is ``collective_timeout_s``, so they should
    fail after about that long instead of at PyTorch's default (30 min for gloo). Ranks that
    start far apart still join (``labkit.runtime.dist.setup`` joins with its own, long limit).
    ``timeout_s`` (default: from the start-up measured here) bounds the job."""
    from labkit.runtime.launch import launch_local

    check_int("ranks", ranks, 2, 16)
    skip_rank = ranks - 1 if skip_rank is None else skip_rank
    check_int("skip_rank", skip_rank, 0, ranks - 1)
    check_seconds("collective_timeout_s", collective_timeout_s)
    limit = timeout_s if timeout_s is not None else launch_limit_s(ranks, 3 * collective_timeout_s)
    client, ns = connect(url), new_namespace()
    try:
        result = launch_local(RANK_SCRIPT, _config("skip", ns, 1, 0.0, skip_rank),
                              nproc_per_node=ranks, timeout_s=check_seconds("timeout_s", limit),
                              echo=None, env={CHILD_REDIS_URL_ENV: url, **CPU_GROUP,
                                              "LABKIT_COLLECTIVE_TIMEOUT": str(collective_timeout_s)})
    finally:
        delete_namespace(client, ns)
        client.close()
    if result.timed_out:
        raise LaunchError(f"the guide-lock ranks were still blocked after {limit:g} s: the "
                          "collective timeout did not fire; last output:\n"
                          + "\n".join(result.output[-20:]))
    waiting = sorted((m for m in _marks(result.output) if not m.get("skipped")),
                     key=lambda m: m["rank"])
    if len(waiting) != ranks - 1:
        raise LaunchError(f"expected {ranks - 1} waiting ranks to report, got {len(waiting)}; "
                          "output:\n" + "\n".join(result.output[-30:]))
    for w in waiting:
        w["seconds"] = round(w["seconds"], 3)
    return GuideSkipResult(ranks, skip_rank, collective_timeout_s, waiting,
                           all(w["error"] for w in waiting),
                           sum("timed out" in (w["error"] or "").lower() for w in waiting),
                           max(w["seconds"] for w in waiting), round(result.seconds, 3))
