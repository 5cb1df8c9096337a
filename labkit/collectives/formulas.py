"""The arithmetic of nccl-tests, shared by the driver, its ranks and the alpha-beta fit: sizes,
sweeps, the bus-bandwidth factor of each collective, message counts, and one result row.

Formulas follow NVIDIA/nccl-tests ``doc/PERFORMANCE.md``: ``algbw = S / t`` (1 GB = 1e9 B) and
``busbw = algbw * factor``, with ``factor`` ``2(n-1)/n`` for all_reduce, ``(n-1)/n`` for
all_gather, reduce_scatter and all_to_all, 1 for broadcast and reduce.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from labkit.errors import ParameterError
from labkit.runtime.stats import percentile

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all")

ALIASES = {"allreduce": "all_reduce", "allgather": "all_gather", "alltoall": "all_to_all",
           "reducescatter": "reduce_scatter"}

REDUCING = frozenset({"all_reduce", "reduce_scatter", "reduce"})

ROOTED = frozenset({"broadcast", "reduce"})

PER_RANK = frozenset({"all_gather", "reduce_scatter", "all_to_all"})  # S = count * n * 4

ONE_FORM = {"all_reduce": "in-place", "broadcast": "in-place", "reduce": "in-place",
            "all_to_all": "out-of-place"}  # the only form torch.distributed has of these

AVERAGES = ("avg", "max", "min", "rank0")  # nccl-tests -a 1, 3, 2, 0

_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


def parse_size(text: str | int) -> int:
    """Bytes from "64", "1K", "64M", "1G": powers of 1024, like nccl-tests' -b/-e."""
    if isinstance(text, int):
        return text
    value = str(text).strip().upper()
    unit = value[-1:] if value[-1:] in "KMG" else ""
    try:
        size = int(float(value[: len(value) - len(unit)]) * _UNITS[unit])
    except (ValueError, OverflowError):
        raise ParameterError(f"size wants a number with an optional K, M or G: {text!r}") from None
    if size < 0:
        raise ParameterError(f"size must not be negative: {text!r}")
    return size


def sweep(min_bytes: int, max_bytes: int, step_factor: int = 2) -> list[int]:
    """The sizes nccl-tests runs with -f: min, min*f, ... up to max."""
    if step_factor < 2 or min_bytes < 4 or max_bytes < min_bytes:
        raise ParameterError(f"need 4 <= min <= max and factor >= 2, got {min_bytes}, "
                             f"{max_bytes}, {step_factor}")
    sizes = [min_bytes]
    while sizes[-1] * step_factor <= max_bytes:
        sizes.append(sizes[-1] * step_factor)
    return sizes


def bus_factor(op: str, n: int) -> float:
    """busbw / algbw (doc/PERFORMANCE.md): 2(n-1)/n, (n-1)/n, or 1 for broadcast and reduce."""
    if op == "all_reduce":
        return 2 * (n - 1) / n
    return 1.0 if op in ROOTED else (n - 1) / n


def bandwidths(op: str, size: int, time_us: float, n: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s for ``size`` bytes (the size column) in ``time_us``."""
    algbw = size / 1e3 / time_us if time_us > 0 else 0.0
    return algbw, algbw * bus_factor(op, n)


def message_counts(op: str, size: int, n: int) -> tuple[int, int]:
    """(count column, size column) for a requested size, float32, as nccl-tests rounds them."""
    count = size // 4
    if op in PER_RANK:
        return count // n, count // n * n * 4
    return count, count * 4


def placements(op: str) -> list[bool]:
    """in_place values run for ``op``: both, or the one form torch has."""
    return [ONE_FORM[op] == "in-place"] if op in ONE_FORM else [False, True]


def resolve_ops(op: str | list[str] | tuple[str, ...]) -> list[str]:
    """"all", one op, "a,b" or a list, validated, in nccl-tests' order."""
    names = op.split(",") if isinstance(op, str) else list(op)
    names = [ALIASES.get(x.strip(), x.strip()) for x in names]
    if "all" in names:
        return list(OPS)
    unknown = sorted(set(names) - set(OPS))
    if unknown or not names:
        raise ParameterError(f"unknown collective(s) {unknown}: choose from {', '.join(OPS)}, all")
    return [o for o in OPS if o in names]


@dataclass(frozen=True)
class IterStats:
    """Per-iteration summary of one row, as nccl-tests ``-I 1`` writes it (``computeIterStats``
    in ``src/util.cu``): over the iterations after the first ``skipped`` (``-K``). ``p50`` is
    nccl-tests' ``sorted[n // 2]`` (the upper middle value when n is even); ``p95`` and ``p99``
    are nearest rank (``labkit.runtime.stats.percentile``, the same index nccl-tests takes);
    ``stdev`` divides by n; ``cv_pct`` is stdev / avg in percent."""

    skipped: int
    min_us: float
    max_us: float
    avg_us: float
    p50_us: float
    p95_us: float
    p99_us: float
    stdev_us: float
    cv_pct: float


def iter_stats(times_us: list[float], skipped: int = 0) -> IterStats:
    """Summarise per-iteration times (us) the way nccl-tests does, leaving out ``skipped``."""
    kept = sorted(times_us[skipped:])
    if not kept:
        raise ParameterError(f"no iterations left after skipping {skipped} of {len(times_us)}")
    n, avg = len(kept), math.fsum(kept) / len(kept)
    stdev = math.sqrt(math.fsum((t - avg) ** 2 for t in kept) / n)
    return IterStats(skipped, kept[0], kept[-1], avg, kept[n // 2], percentile(kept, 95),
                     percentile(kept, 99), stdev, stdev / avg * 100 if avg > 0 else 0.0)


@dataclass
class CollectiveRow:
    """One nccl-tests result: one (op, size, placement). ``wrong`` is summed over ranks (-1:
    not checked, nccl-tests' ``N/A``). ``cycle`` counts repeats of the sweep (nccl-tests
    ``-N``). With per-iteration timing (``-I 1``), ``iter_times_us`` is each iteration's time,
    the slowest rank's, and ``rank_iter_times_us`` one such list per rank (process)."""

    op: str
    size: int
    count: int
    type: str
    redop: str
    root: int
    time_us: float
    algbw: float
    busbw: float
    wrong: int
    in_place: bool
    nranks: int
    cycle: int = 0
    iter_times_us: list[float] | None = None
    rank_iter_times_us: list[list[float]] | None = None
    iter_skip: int = 0

    def iter_stats(self) -> IterStats | None:
        """nccl-tests' per-iteration summary of this row, or None without ``-I``."""
        return iter_stats(self.iter_times_us, self.iter_skip) if self.iter_times_us else None
