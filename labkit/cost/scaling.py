"""Step time against GPU count: the all-reduce time models and a scaling model (lesson 14).

``ScalingModel`` adds an alpha-beta all-reduce (ring or halving-doubling) to a compute step and
says where more GPUs stop paying and when 2N GPUs are slower than N. ``lab_scaling_model()``
builds one from what this run measured (notebook 03's all_reduce fit, the policy's step).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from labkit.errors import ParameterError

if TYPE_CHECKING:

    from labkit.collectives.alphabeta import AlphaBeta

ALGORITHMS = ("ring", "halving_doubling")


def allreduce_hops(n: int, algorithm: str = "ring") -> int:
    """Latency terms (messages in sequence) of one all-reduce over n ranks: 2(n-1) for a ring,
    2 ceil(log2 n) for recursive halving + doubling (Rabenseifner)."""
    _check_algorithm(algorithm)
    if n < 1:
        raise ParameterError(f"n must be at least 1, not {n}")
    if n == 1:
        return 0
    return 2 * (n - 1) if algorithm == "ring" else 2 * math.ceil(math.log2(n))


def allreduce_time(n: int, nbytes: float, alpha_s: float, beta_s_per_byte: float,
                   algorithm: str = "ring") -> float:
    """Seconds for one all-reduce of ``nbytes`` per rank over n ranks, alpha-beta model.

    ring: ``2(n-1) alpha + 2(n-1)/n * nbytes * beta``: a reduce-scatter then an all-gather,
    each n-1 steps of nbytes/n (Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms
    for clusters of workstations", JPDC 2009, who prove the bandwidth term optimal; Thakur,
    Rabenseifner & Gropp, "Optimization of collective communication operations in MPICH",
    IJHPCA 2005). halving_doubling: ``2 log2(n) alpha`` with the same bandwidth term
    (Rabenseifner's algorithm in Thakur et al.; exact for powers of two, ceil otherwise).
    alpha is the per-message latency, beta the seconds per byte of one link: 1 / busbw in
    nccl-tests' terms (busbw = algbw * 2(n-1)/n, doc/PERFORMANCE.md). The reduction's own
    arithmetic (the gamma term) is left out.
    """
    if nbytes < 0 or alpha_s < 0 or beta_s_per_byte < 0:
        raise ParameterError("nbytes, alpha and beta must not be negative")
    hops = allreduce_hops(n, algorithm)
    if hops == 0:
        return 0.0
    return hops * alpha_s + 2 * (n - 1) / n * nbytes * beta_s_per_byte


@dataclass(frozen=True)
class ScalingPoint:
    """The model at one GPU count."""

    n_gpus: int
    compute_s: float
    comm_s: float
    step_s: float
    speedup: float  # step time at 1 GPU / step time at n
    efficiency: float  # speedup / n: what each GPU you pay for delivers, 1 = perfect


@dataclass(frozen=True)
class StopPaying:
    """Where adding GPUs stops paying, up to ``max_n``."""

    max_n: int
    fastest_n: int  # the smallest step time
    slower_after: int | None  # first n where n+1 GPUs make the step slower, None if never
    min_efficiency: float
    efficient_up_to: int  # the last n before speedup/n first falls below min_efficiency
    stop_at: int  # min(fastest_n, efficient_up_to): more GPUs than this stop paying
    reason: str


@dataclass(frozen=True)
class ScalingModel:
    """Data-parallel step time on n GPUs: a fixed global batch split n ways, plus one
    all-reduce of the gradients, ``step(n) = compute/n + allreduce(n)``.

    With the ring, step time is ``(C - 2 S beta)/n + 2 alpha n + const``: when alpha > 0 it
    has a minimum (more GPUs past it are slower, the guide's Myth 3), and when
    C <= 2 S beta even 2 GPUs are slower than one. No overlap of compute and communication
    is assumed (DDP overlaps some: this is the pessimistic end).
    """

    compute_s_per_step: float  # one step's compute on a single GPU (the whole global batch)
    alpha_s: float  # per-message latency (one hop), seconds
    beta_s_per_byte: float  # seconds per byte on one link: 1 / (busbw in bytes/s)
    grad_bytes: float  # gradient bytes all-reduced per step (parameters x 4 for float32)
    algorithm: str = "ring"

    def __post_init__(self) -> None:
        _check_algorithm(self.algorithm)
        for name in ("compute_s_per_step", "alpha_s", "beta_s_per_byte", "grad_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise ParameterError(f"{name} must be a finite number >= 0, not {value!r}")
        if self.compute_s_per_step <= 0:
            raise ParameterError("compute_s_per_step must be > 0")

    @classmethod
    def from_alpha_beta(cls, fit: AlphaBeta, compute_s_per_step: float, grad_bytes: float,
                        algorithm: str = "ring") -> ScalingModel:
        """Per-hop alpha and per-byte beta from a fitted ``t = alpha + S/B`` (lesson 03) at
        ``fit.n`` ranks: alpha_hop = alpha / hops(fit.n), beta = 1 / busbw. Assumes the fitted
        latency is made of the algorithm's hops, which is what lets it extrapolate in n."""
        if fit.n < 2:
            raise ParameterError("an all-reduce fit needs at least 2 ranks to have hops")
        if fit.busbw_gbps <= 0:
            raise ParameterError("the fit has no positive bandwidth")
        return cls(compute_s_per_step, max(fit.alpha_us, 0.0) * 1e-6
                   / allreduce_hops(fit.n, algorithm), 1 / (fit.busbw_gbps * 1e9), grad_bytes,
                   algorithm)

    @property
    def busbw_gbps(self) -> float:
        """The link bandwidth beta stands for, in GB/s (inf when beta is 0)."""
        return math.inf if self.beta_s_per_byte == 0 else 1 / (self.beta_s_per_byte * 1e9)

    def with_link(self, busbw_gbps: float | None = None, alpha_us: float | None = None,
                  algorithm: str | None = None) -> ScalingModel:
        """The same workload over another link: bandwidth in GB/s, per-hop latency in us."""
        changes: dict[str, Any] = {}
        if busbw_gbps is not None:
            if busbw_gbps <= 0:
                raise ParameterError("busbw_gbps must be > 0")
            changes["beta_s_per_byte"] = 1 / (busbw_gbps * 1e9)
        if alpha_us is not None:
            changes["alpha_s"] = alpha_us * 1e-6
        if algorithm is not None:
            changes["algorithm"] = algorithm
        return replace(self, **changes)

    def compute_s(self, n_gpus: int) -> float:
        _check_n(n_gpus)
        return self.compute_s_per_step / n_gpus

    def comm_s(self, n_gpus: int) -> float:
        return allreduce_time(n_gpus, self.grad_bytes, self.alpha_s, self.beta_s_per_byte,
                              self.algorithm)

    def step_time(self, n_gpus: int) -> float:
        """Seconds per step on n GPUs: compute/n + one all-reduce of the gradients."""
        return self.compute_s(n_gpus) + self.comm_s(n_gpus)

    def overlap_step(self, n_gpus: int) -> float:
        """Seconds per step with perfect overlap (DDP all-reducing buckets while backward runs):
        the longer of compute/n and the all-reduce, instead of their sum."""
        return max(self.compute_s(n_gpus), self.comm_s(n_gpus))

    def best_n_with_overlap(self, max_n: int) -> int:
        """Like :meth:`best_n`, for :meth:`overlap_step`."""
        _check_n(max_n)
        return min(range(1, max_n + 1), key=lambda n: (self.overlap_step(n), n))

    def throughput(self, n_gpus: int) -> float:
        """Steps per second on n GPUs (times the global batch for samples per second)."""
        return 1.0 / self.step_time(n_gpus)

    def speedup(self, n_gpus: int) -> float:
        return self.step_time(1) / self.step_time(n_gpus)

    def table(self, max_n: int) -> list[ScalingPoint]:
        """The model at n = 1..max_n."""
        _check_n(max_n)
        out = []
        for n in range(1, max_n + 1):
            c, m = self.compute_s(n), self.comm_s(n)
            s = self.step_time(1) / (c + m)
            out.append(ScalingPoint(n, c, m, c + m, s, s / n))
        return out

    def best_n(self, max_n: int) -> int:
        """The GPU count (1..max_n) with the shortest step; the smaller one on a tie."""
        return min(self.table(max_n), key=lambda p: (p.step_s, p.n_gpus)).n_gpus

    def where_more_gpus_stop_paying(self, max_n: int, min_efficiency: float = 0.5) -> StopPaying:
        """The n after which more GPUs stop paying: either the step gets slower (past the
        fastest n), or speedup per GPU, what each GPU-hour you rent delivers, falls below
        ``min_efficiency`` (0.5: a GPU-hour does less than half what it does on one GPU, so
        the same job costs more than twice as much)."""
        if not 0 < min_efficiency <= 1:
            raise ParameterError("min_efficiency must be in (0, 1]")
        points = self.table(max_n)
        fastest = self.best_n(max_n)
        slower_after = next((p.n_gpus for p, q in zip(points, points[1:], strict=False)
                             if q.step_s > p.step_s), None)
        below = next((p.n_gpus for p in points if p.efficiency < min_efficiency), None)
        efficient_up_to = max_n if below is None else max(1, below - 1)
        stop = min(fastest, efficient_up_to)
        if stop == max_n:
            reason = f"still paying at {max_n} GPUs: look further"
        elif stop == fastest and (below is None or fastest <= efficient_up_to):
            reason = (f"step time is lowest at {fastest} GPU{'s' * (fastest != 1)}; past it "
                      "communication grows faster than compute shrinks")
        else:
            reason = (f"at {below} GPUs speedup per GPU falls below {min_efficiency:g}; the step "
                      f"still shortens up to {fastest}, but each GPU-hour buys less")
        return StopPaying(max_n, fastest, slower_after, min_efficiency, efficient_up_to, stop,
                          reason)

    def optimal_n(self) -> float:
        """The continuous minimum of the ring model, ``sqrt((C - 2 S beta) / (2 alpha))``:
        1 when C <= 2 S beta (communication alone outweighs the compute saved), inf when
        alpha is 0 and C > 2 S beta (no latency: more GPUs always help). Ring only."""
        if self.algorithm != "ring":
            raise ParameterError("optimal_n has a closed form for the ring only; use best_n")
        gain = self.compute_s_per_step - 2 * self.grad_bytes * self.beta_s_per_byte
        if gain <= 0:
            return 1.0
        if self.alpha_s == 0:
            return math.inf
        return max(1.0, math.sqrt(gain / (2 * self.alpha_s)))

    def alpha_where_slower(self, n: int, m: int | None = None) -> float:
        """The per-hop latency above which m GPUs (default n+1) take longer per step than n.

        From step(m) > step(n): alpha > (C - 2 S beta)(1/n - 1/m) / (hops(m) - hops(n)); for
        the ring (C - 2 S beta) / (2 n m). 0 when C <= 2 S beta (slower at any latency), inf
        when m adds no hops (then latency cannot make m slower)."""
        m = n + 1 if m is None else m
        _check_n(n)
        if m <= n:
            raise ParameterError(f"m must be larger than n ({m} <= {n})")
        # step(k) = (C - 2 S beta)/k + hops(k) alpha + 2 S beta, k = 1 included
        saved = (self.compute_s_per_step - 2 * self.grad_bytes * self.beta_s_per_byte) * (
            1 / n - 1 / m)
        extra_hops = allreduce_hops(m, self.algorithm) - allreduce_hops(n, self.algorithm)
        if saved <= 0:
            return 0.0
        if extra_hops <= 0:
            return math.inf
        return saved / extra_hops

    def alpha_range_for_best_n(self, n: int, max_n: int) -> tuple[float, float]:
        """The per-hop latencies (low, high) for which n is the fastest of 1..max_n GPUs:
        at least every m > n's ``alpha_where_slower(n, m)``, at most every k < n's
        ``alpha_where_slower(k, n)``. low > high means no latency does it."""
        _check_n(max_n)
        if not 1 <= n <= max_n:
            raise ParameterError(f"n must be in 1..{max_n}, not {n}")
        low = max((self.alpha_where_slower(n, m) for m in range(n + 1, max_n + 1)), default=0.0)
        high = min((self.alpha_where_slower(k, n) for k in range(1, n)), default=math.inf)
        return low, high

    def run_hours(self, n_gpus: int, steps: float) -> float:
        """Busy hours for ``steps`` steps on n GPUs."""
        if steps < 0:
            raise ParameterError("steps must not be negative")
        return steps * self.step_time(n_gpus) / 3600


def _check_algorithm(algorithm: str) -> None:
    if algorithm not in ALGORITHMS:
        raise ParameterError(f"algorithm must be one of {', '.join(ALGORITHMS)}, "
                             f"not {algorithm!r}")


def _check_n(n: int) -> None:
    if not isinstance(n, int) or n < 1:
        raise ParameterError(f"a GPU count must be an integer >= 1, not {n!r}")


@dataclass(frozen=True)
class SlowdownDemo:
    """"More GPUs = slower" made to happen: the workload of a model with the per-hop latency
    chosen so that n GPUs are the fastest and m GPUs are slower than n."""

    model: ScalingModel  # the workload at the chosen latency
    n: int
    m: int
    alpha_range_best_at_n_s: tuple[float, float]  # per-hop latencies that make n the fastest
    alpha_m_slower_than_n_s: float  # per-hop latency above which m is slower than n
    step_n_s: float
    step_m_s: float
    best_n: int  # over 1..m, == n


def more_gpus_slower(model: ScalingModel, n: int = 32, m: int = 64,
                     alpha_s: float | None = None) -> SlowdownDemo:
    """The guide's Myth 3 ("32 agents ... was the sweet spot", slower at 64) as parameters:
    the latencies that make n the fastest GPU count for this compute, gradient size and
    bandwidth; the model is set to the middle of that range unless ``alpha_s`` is given."""
    low, high = model.alpha_range_for_best_n(n, m)
    if alpha_s is None:
        if not math.isfinite(high) or low > high:
            raise ParameterError(f"no latency makes {n} the fastest of 1..{m} for this model")
        alpha_s = (low + high) / 2
    slow = replace(model, alpha_s=alpha_s)
    return SlowdownDemo(slow, n, m, (low, high), model.alpha_where_slower(n, m),
                        slow.step_time(n), slow.step_time(m), slow.best_n(m))
