"""Scaling and cost: when more GPUs slow a step down, and what a run costs (lesson 14).

Three parts, each usable without the others::

    from labkit.cost import model as cost
    rows = cost.load_guide_costs()                 # the guide's table (its figures, March 2026)
    model = cost.ScalingModel(compute_s_per_step=1.0, alpha_s=300e-6,
                              beta_s_per_byte=1 / 10e9, grad_bytes=100e6)
    model.best_n(128), model.where_more_gpus_stop_paying(128)
    cost.guide_break_even().months                 # the guide's "$280K, pays off in 14 months"
    cost.plot_scaling(model, 128)                  # a matplotlib Figure; widgets_for(model) for sliders

Every price here is either the guide's (attributed, dated: "our AWS and GCP invoices for March
2026") or an assumption you are meant to edit. None is a market price we checked.
"""

from __future__ import annotations

import base64
import csv
import io
import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from labkit.errors import ParameterError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from labkit.collectives.alphabeta import AlphaBeta

GUIDE_COSTS_CSV = Path(__file__).resolve().parents[2] / "data" / "guide_costs.csv"
GUIDE_COST_COLUMNS = ("configuration", "cloud_provider", "cost_3_days_usd", "wall_time_hours",
                      "notes", "source", "as_of")
GUIDE_RUN_HOURS = 72.0  # the guide: "a 3-day training run", column "Cost (3 days)"
HOURS_PER_MONTH = 8760.0 / 12  # 730: an average month, for monthly cloud spend
ALGORITHMS = ("ring", "halving_doubling")
ALPHA_BETA_RESULT = "alpha_beta_all_reduce"  # the name notebook 03 saves its fit under


# --------------------------------------------------------------------------------------------
# The guide's cost table
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GuideCost:
    """One row of the guide's cost table, as the guide gives it (its invoices, not ours)."""

    configuration: str  # e.g. "8x A100 80GB (NVLink)"
    cloud_provider: str  # e.g. "AWS p4d.24xlarge", as the guide spells it
    cost_3_days_usd: float  # the column "Cost (3 days)"
    wall_time_hours: float  # the column "Wall Time"
    notes: str
    source: str  # "guide"
    as_of: str  # "2026-03": the guide's "invoices for March 2026"

    def __post_init__(self) -> None:
        if not _CONFIG_RE.match(self.configuration):
            raise ParameterError(f"configuration {self.configuration!r} does not start with a "
                                 "GPU count like '8x A100 80GB'")

    @property
    def n_gpus(self) -> int:
        """GPU count from the configuration ("32x A100 ..." -> 32)."""
        return int(_CONFIG_RE.match(self.configuration).group(1))

    @property
    def gpu(self) -> str:
        """The GPU model from the configuration ("8x A100 80GB (NVLink)" -> "A100 80GB")."""
        return _CONFIG_RE.match(self.configuration).group(2).strip()

    def price_per_gpu_hour(self, basis: str = "3 days") -> float:
        """The guide's cost divided by GPU-hours: over the 72 h the column header names
        (``basis="3 days"``) or over the row's own wall time (``basis="wall time"``). The guide
        gives no hourly prices; these are derived from its totals, and the two bases differ
        because its wall times are not 72 h."""
        hours = {"3 days": GUIDE_RUN_HOURS, "wall time": self.wall_time_hours}.get(basis)
        if hours is None:
            raise ParameterError(f"basis must be '3 days' or 'wall time', not {basis!r}")
        return self.cost_3_days_usd / (self.n_gpus * hours)


_CONFIG_RE = re.compile(r"^(\d+)x\s+([^()]+?)\s*(\(.*\))?$")
_AS_OF_RE = re.compile(r"^\d{4}-(0[1-9]|1[0-2])$")


def load_guide_costs(path: str | Path = GUIDE_COSTS_CSV) -> list[GuideCost]:
    """Read ``data/guide_costs.csv`` (schema in ``data/README.md``); a malformed file raises
    ParameterError naming the file, the line and what is wrong with it."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ParameterError(f"cannot read the cost table {path}: {err}") from err
    reader = csv.DictReader(io.StringIO(text), restkey="_extra")
    header = tuple(reader.fieldnames or ())
    if header != GUIDE_COST_COLUMNS:
        raise ParameterError(f"{path.name} line 1: columns must be {','.join(GUIDE_COST_COLUMNS)}; "
                             f"found {','.join(header) or 'nothing'}")
    rows = []
    for raw in reader:
        where = f"{path.name} line {reader.line_num}"
        if raw.get("_extra"):
            raise ParameterError(f"{where}: {len(header) + len(raw['_extra'])} fields, "
                                 f"expected {len(header)} (a comma inside a value needs quotes)")
        missing = [c for c in header if raw.get(c) is None]
        if missing:
            raise ParameterError(f"{where}: missing {', '.join(missing)} "
                                 f"(expected {len(header)} fields)")
        values: dict[str, Any] = {c: raw[c].strip() for c in header}
        for col in ("cost_3_days_usd", "wall_time_hours"):
            try:
                values[col] = float(values[col])
            except ValueError:
                raise ParameterError(f"{where}: {col} {values[col]!r} is not a number "
                                     "(write 19200, not $19,200)") from None
            if not math.isfinite(values[col]) or values[col] <= 0:
                raise ParameterError(f"{where}: {col} must be a positive number, "
                                     f"not {values[col]}")
        if not _CONFIG_RE.match(values["configuration"]):
            raise ParameterError(f"{where}: configuration {values['configuration']!r} does not "
                                 "start with a GPU count like '8x A100 80GB'")
        if not _AS_OF_RE.match(values["as_of"]):
            raise ParameterError(f"{where}: as_of {values['as_of']!r} is not YYYY-MM")
        for col in ("cloud_provider", "source"):
            if not values[col]:
                raise ParameterError(f"{where}: {col} is empty")
        rows.append(GuideCost(**values))
    if not rows:
        raise ParameterError(f"{path.name}: no rows after the header")
    return rows


@dataclass(frozen=True)
class GuideCheck:
    """One of the guide's statements about its table, next to what its own numbers give."""

    topic: str
    guide_says: str
    its_numbers_give: str


def guide_cost_checks(rows: Sequence[GuideCost] | None = None) -> list[GuideCheck]:
    """Arithmetic on the guide's own table: where its figures and its prose disagree.
    Only the guide's numbers are used; nothing here is a price we looked up."""
    rows = list(rows) if rows is not None else load_guide_costs()
    by = {r.configuration: r for r in rows}
    checks = []
    odd = [r for r in rows if r.wall_time_hours != GUIDE_RUN_HOURS]
    if odd:
        checks.append(GuideCheck(
            "3-day cost vs wall time", "'Cost (3 days)' for 'a 3-day training run'",
            "wall times of " + ", ".join(f"{r.wall_time_hours:g} h ({r.configuration})" for r in odd)
            + ": the cost column cannot be both 3 days and what each run took"))
    checks.append(GuideCheck(
        "implied price per GPU-hour", "(no hourly prices given)",
        "; ".join(f"{r.configuration} on {r.cloud_provider}: ${r.price_per_gpu_hour('3 days'):.2f} "
                  "over 72 h" + ("" if r.wall_time_hours == GUIDE_RUN_HOURS else
                                 f", ${r.price_per_gpu_hour('wall time'):.2f} over "
                                 f"{r.wall_time_hours:g} h")
                  for r in rows)))
    a8, a32 = by.get("8x A100 80GB (NVLink)"), by.get("32x A100 80GB (cluster)")
    if a8 and a32:
        checks.append(GuideCheck(
            "the 32-GPU row", "'Only if you need scale'",
            f"${a32.cost_3_days_usd:,.0f} = {a32.cost_3_days_usd / a8.cost_3_days_usd:g} x the "
            f"8-GPU row: ${a32.price_per_gpu_hour('3 days'):.2f}/GPU-h over 72 h, like the 8-GPU "
            f"row's ${a8.price_per_gpu_hour('3 days'):.2f}, though it ran {a32.wall_time_hours:g} h; "
            f"speed-up {a8.wall_time_hours / a32.wall_time_hours:.2f}x on "
            f"{a32.n_gpus // a8.n_gpus}x the GPUs (efficiency "
            f"{a8.wall_time_hours * a8.n_gpus / (a32.wall_time_hours * a32.n_gpus):.0%})"))
    lam = by.get("4x H100 80GB (NVLink)")
    if a8 and lam:
        checks.append(GuideCheck(
            "Lambda vs AWS", "'Lambda Labs was 56% cheaper than AWS'",
            f"per run 1 - {lam.cost_3_days_usd:,.0f}/{a8.cost_3_days_usd:,.0f} = "
            f"{1 - lam.cost_3_days_usd / a8.cost_3_days_usd:.2%} (right), but with half the GPUs "
            f"and {lam.wall_time_hours:g} h instead of {a8.wall_time_hours:g} h; per GPU-hour "
            f"{1 - lam.price_per_gpu_hour('3 days') / a8.price_per_gpu_hour('3 days'):.1%} cheaper "
            f"over 72 h, {1 - lam.price_per_gpu_hour('wall time') / a8.price_per_gpu_hour('wall time'):.1%}"
            " over each run's wall time"))
    h8 = by.get("8x H100 80GB (PCIe)")
    if a8 and h8:
        checks.append(GuideCheck(
            "A100 NVLink vs H100 PCIe", "'A100s with NVLink outperformed H100s on PCIe ... by 22%'",
            f"in the table the H100 PCIe run finished first: {h8.wall_time_hours:g} h vs "
            f"{a8.wall_time_hours:g} h ({1 - h8.wall_time_hours / a8.wall_time_hours:.0%} less "
            f"time; the A100 run took {a8.wall_time_hours / h8.wall_time_hours - 1:.0%} longer)"))
    return checks


# --------------------------------------------------------------------------------------------
# The scaling model
# --------------------------------------------------------------------------------------------

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


# The lab's own numbers, used when this run has no fit of its own. Both come from the
# development machine (2 cores, no GPU, gloo) on 2026-11-30, not from the machine you are on:
# the all_reduce fit of notebook 03 kept in runs/20261130-044507/alpha_beta_all_reduce.json,
# and the agent policy of `labkit bench ddp` in the README's "Measured" section.
DEFAULT_LAB_FIT = {"op": "all_reduce", "backend": "gloo", "n": 4, "alpha_us": 7194.9,
                   "beta_gbps": 0.70692, "busbw_gbps": 1.06037, "r2": 0.747, "points": 15,
                   "in_place": None}
LAB_POLICY_PARAMS = 67_586  # `labkit bench ddp --part agents`: the agent policy's parameters
LAB_POLICY_GRAD_BYTES = LAB_POLICY_PARAMS * 4  # float32 gradients
LAB_POLICY_STEP_S = 3.7e-3  # its local (one rank, no communication) step, README "Measured"
LAB_POLICY_HIDDEN, LAB_POLICY_BATCH = 256, 64  # `labkit bench ddp --part agents` defaults


def measure_policy_step_s(steps: int = 50, warmup: int = 5) -> float:
    """The lab policy's local step (forward, backward, SGD; no communication) timed in this
    process, median of ``steps``: the compute side of the scaling model, measured on this
    machine rather than taken from the development machine's ``LAB_POLICY_STEP_S``."""
    import statistics
    import time

    import torch
    import torch.nn.functional as F
    from torch import nn

    if steps < 1 or warmup < 0:
        raise ParameterError("need steps >= 1 and warmup >= 0")
    gen = torch.Generator().manual_seed(0)
    h = LAB_POLICY_HIDDEN
    model = nn.Sequential(nn.Linear(4, h), nn.Tanh(), nn.Linear(h, h), nn.Tanh(), nn.Linear(h, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    obs = torch.randn(LAB_POLICY_BATCH, 4, generator=gen)
    act = torch.randint(0, 2, (LAB_POLICY_BATCH,), generator=gen)
    times, threads = [], torch.get_num_threads()
    torch.set_num_threads(1)  # as on a rank: torchrun sets OMP_NUM_THREADS=1
    try:
        for i in range(warmup + steps):
            began = time.perf_counter()
            F.cross_entropy(model(obs), act).backward()
            opt.step()
            opt.zero_grad()
            if i >= warmup:
                times.append(time.perf_counter() - began)
    finally:
        torch.set_num_threads(threads)
    return statistics.median(times)


@dataclass(frozen=True)
class LabFit:
    """The alpha-beta fit the lab uses, and whether this run measured it."""

    fit: AlphaBeta
    measured_here: bool  # False: DEFAULT_LAB_FIT, a past run on the development machine
    note: str


def lab_alpha_beta(name: str = ALPHA_BETA_RESULT) -> LabFit:
    """Notebook 03's all_reduce fit from this run's results (``load_result``); without one,
    the documented default, flagged as such."""
    from labkit.collectives.alphabeta import AlphaBeta
    from labkit.course.results import load_result

    data = load_result(name)
    if data:
        try:
            fit = AlphaBeta.from_dict(data)
        except (KeyError, TypeError) as err:
            raise ParameterError(f"result {name!r} is not an alpha-beta fit: {err}") from err
        return LabFit(fit, True, f"measured in this run ({fit.backend}, {fit.n} ranks, "
                                 f"r^2 {fit.r2:.2f})")
    return LabFit(AlphaBeta.from_dict(DEFAULT_LAB_FIT), False,
                  "no fit in this run: the default from the development machine "
                  "(gloo, 4 ranks on 2 cores, 2026-11-30); run notebook 03 for your own")


def lab_scaling_model(compute_s_per_step: float = LAB_POLICY_STEP_S,
                      grad_bytes: float = LAB_POLICY_GRAD_BYTES,
                      algorithm: str = "ring") -> tuple[ScalingModel, LabFit]:
    """The scaling model of the lab's agent policy on the lab's measured link."""
    lab = lab_alpha_beta()
    return ScalingModel.from_alpha_beta(lab.fit, compute_s_per_step, grad_bytes, algorithm), lab


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


# --------------------------------------------------------------------------------------------
# Cost
# --------------------------------------------------------------------------------------------

def run_cost(n_gpus: int, hours: float, price_per_gpu_hour: float,
             utilisation: float = 1.0) -> float:
    """Dollars for ``hours`` of busy time on n GPUs: at utilisation u you pay for hours / u
    (idle, queued and restarted time is billed too)."""
    _check_n(n_gpus)
    if hours < 0 or price_per_gpu_hour < 0:
        raise ParameterError("hours and price must not be negative")
    if not 0 < utilisation <= 1:
        raise ParameterError(f"utilisation must be in (0, 1], not {utilisation}")
    return n_gpus * hours / utilisation * price_per_gpu_hour


def cost_per_solved_run(cost: float, success_rate: float) -> float:
    """Expected dollars per run that reaches its goal when each run succeeds independently
    with probability ``success_rate``: cost / rate (the mean of a geometric number of tries)."""
    if not 0 < success_rate <= 1:
        raise ParameterError(f"success_rate must be in (0, 1], not {success_rate}")
    if cost < 0:
        raise ParameterError("cost must not be negative")
    return cost / success_rate


@dataclass(frozen=True)
class RunEstimate:
    """A job of ``steps`` steps on n GPUs: wall time and cost."""

    n_gpus: int
    hours: float  # wall time including idle: busy hours / utilisation
    cost_usd: float


def job_estimates(model: ScalingModel, max_n: int, steps: float, price_per_gpu_hour: float,
                  utilisation: float = 1.0) -> list[RunEstimate]:
    """Wall time and cost of the same job at 1..max_n GPUs."""
    return [RunEstimate(n, model.run_hours(n, steps) / utilisation,
                        run_cost(n, model.run_hours(n, steps), price_per_gpu_hour, utilisation))
            for n in range(1, max_n + 1)]


def break_even_months(capex: float, monthly_opex_onprem: float,
                      monthly_cloud_cost: float) -> float:
    """Months until buying (capex, then opex a month) costs less than renting the same work
    (monthly_cloud_cost): capex / (cloud - opex); inf when the cloud is not dearer."""
    if capex < 0 or monthly_opex_onprem < 0 or monthly_cloud_cost < 0:
        raise ParameterError("capex and monthly costs must not be negative")
    saving = monthly_cloud_cost - monthly_opex_onprem
    return math.inf if saving <= 0 else capex / saving


# The guide: "4-node on-prem cluster for development (H100s on NVLink, cost us $280K upfront)
# ... The on-prem pays for itself in 14 months given our utilization." Nothing else is given:
# not the GPU count, the running costs, the utilisation or the cloud price it compares with.
GUIDE_CAPEX_USD = 280_000.0
GUIDE_BREAK_EVEN_MONTHS = 14.0
# The only H100-on-NVLink cloud price the guide implies: its Lambda row, $8,400 for 4 GPUs
# over the "3 days" of the column header ($29.17 per GPU-hour). Derived, not quoted.
GUIDE_LAMBDA_RUN_USD = 8_400.0  # the guide's "4x H100 80GB (NVLink), Lambda Labs, $8,400"
GUIDE_H100_NVLINK_PRICE = GUIDE_LAMBDA_RUN_USD / (4 * GUIDE_RUN_HOURS)
ASSUMED_ONPREM_GPUS = 16  # assumption: 4 nodes x 4 H100, like the guide's production nodes
# Solved, not known: the utilisation at which the inputs above give exactly 14 months.
GUIDE_IMPLIED_UTILISATION = (GUIDE_CAPEX_USD / GUIDE_BREAK_EVEN_MONTHS) / (
    ASSUMED_ONPREM_GPUS * HOURS_PER_MONTH * GUIDE_H100_NVLINK_PRICE)


@dataclass(frozen=True)
class OnPremAssumptions:
    """Inputs of the buy-vs-rent break-even. Defaults reproduce the guide's 14 months; every
    one but capex is an assumption to edit (the guide states only $280K and 14 months)."""

    capex_usd: float = GUIDE_CAPEX_USD  # the guide's "$280K upfront"
    n_gpus: int = ASSUMED_ONPREM_GPUS  # assumption: 4 nodes x 4 H100
    cloud_price_per_gpu_hour: float = GUIDE_H100_NVLINK_PRICE  # from the guide's Lambda row
    utilisation: float = GUIDE_IMPLIED_UTILISATION  # share of hours you would otherwise rent
    monthly_opex_usd: float = 0.0  # assumption: power, cooling, space, staff (guide: none)
    hours_per_month: float = HOURS_PER_MONTH

    def __post_init__(self) -> None:
        if not 0 <= self.utilisation <= 1:
            raise ParameterError(f"utilisation must be in [0, 1], not {self.utilisation}")
        if self.n_gpus < 1 or self.hours_per_month <= 0:
            raise ParameterError("n_gpus and hours_per_month must be positive")

    def monthly_cloud_cost(self) -> float:
        """What renting the GPU-hours the cluster does would cost a month."""
        return (self.n_gpus * self.hours_per_month * self.utilisation
                * self.cloud_price_per_gpu_hour)

    def break_even_months(self) -> float:
        return break_even_months(self.capex_usd, self.monthly_opex_usd, self.monthly_cloud_cost())

    def utilisation_for(self, months: float) -> float:
        """The utilisation at which the cluster pays for itself in ``months`` (may exceed 1:
        then it cannot, at these prices)."""
        if months <= 0:
            raise ParameterError("months must be > 0")
        full = self.n_gpus * self.hours_per_month * self.cloud_price_per_gpu_hour
        return (self.capex_usd / months + self.monthly_opex_usd) / full


@dataclass(frozen=True)
class BreakEven:
    """The guide's break-even recomputed, with what it implies and how sensitive it is."""

    assumptions: OnPremAssumptions
    months: float
    guide_months: float
    monthly_cloud_cost_usd: float
    monthly_saving_needed_usd: float  # capex / guide months: what 14 months requires
    guide_lambda_runs_per_month: float  # that saving in the guide's $8,400 Lambda runs
    # input -> (months with it halved, months with it doubled; utilisation capped at 1);
    # monthly_opex_usd, 0 in the guide's case: months with opex at 25% and 50% of the rent
    sensitivity: dict[str, tuple[float, float]]


SENSITIVITY_INPUTS = ("capex_usd", "n_gpus", "cloud_price_per_gpu_hour", "utilisation")


def break_even_sweep(assumptions: OnPremAssumptions, name: str,
                     values: Sequence[float]) -> list[tuple[float, float]]:
    """(value, break-even months) with one input changed to each value."""
    if name not in {f.name for f in fields(OnPremAssumptions)}:
        raise ParameterError(f"unknown input {name!r}")
    out = []
    for v in values:
        v = int(round(v)) if name == "n_gpus" else v
        out.append((v, replace(assumptions, **{name: v}).break_even_months()))
    return out


def guide_break_even(assumptions: OnPremAssumptions | None = None) -> BreakEven:
    """Recompute the guide's "$280K on-prem pays for itself in 14 months" from editable inputs,
    with the sensitivity of the answer to each (halved and doubled; utilisation capped at 1)."""
    a = assumptions or OnPremAssumptions()
    sens = {}
    for name in SENSITIVITY_INPUTS:
        base = getattr(a, name)
        hi = min(base * 2, 1.0) if name == "utilisation" else base * 2
        sens[name] = (break_even_sweep(a, name, [base * 0.5])[0][1],
                      break_even_sweep(a, name, [hi])[0][1])
    rent = a.monthly_cloud_cost()
    quarter, half = break_even_sweep(a, "monthly_opex_usd", [0.25 * rent, 0.5 * rent])
    sens["monthly_opex_usd"] = (quarter[1], half[1])
    needed = a.capex_usd / GUIDE_BREAK_EVEN_MONTHS
    return BreakEven(a, a.break_even_months(), GUIDE_BREAK_EVEN_MONTHS, rent, needed,
                     needed / GUIDE_LAMBDA_RUN_USD, sens)


# --------------------------------------------------------------------------------------------
# Plots (plain parameters in, a matplotlib Figure out: the same in JupyterLab and papermill)
# --------------------------------------------------------------------------------------------

def _figure(width: float = 11, height: float = 4.2, bottom: float = 0.13) -> tuple[Figure, Any]:
    # Figure() rather than pyplot: no global state, nothing shown twice in a notebook. Fixed
    # margins rather than a layout engine: half the drawing time, which widgets feel.
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    fig.subplots_adjust(left=0.08, right=0.98, bottom=bottom, top=0.86, wspace=0.28)
    return fig, fig.subplots(1, 2)


def plot_scaling(model: ScalingModel, max_n: int, *, mark_n: int | None = None,
                 title: str | None = None) -> Figure:
    """Step time (compute, communication, total) and speedup against GPU count."""
    pts = model.table(max_n)
    ns = [p.n_gpus for p in pts]
    fig, (ax, bx) = _figure()
    ax.plot(ns, [p.step_s * 1e3 for p in pts], "-", lw=2, label="step")
    ax.plot(ns, [p.compute_s * 1e3 for p in pts], "--", label="compute / n")
    ax.plot(ns, [p.comm_s * 1e3 for p in pts], ":", label=f"all-reduce ({model.algorithm})")
    best = model.best_n(max_n)
    ax.axvline(best, color="grey", lw=1)
    ax.annotate(f"fastest: {best}", (best, model.step_time(best) * 1e3),
                textcoords="offset points", xytext=(5, 10))
    ax.set_xlabel("GPUs")
    ax.set_ylabel("ms per step")
    ax.set_yscale("log")
    ax.legend()
    ax.grid(True, alpha=0.3)
    bx.plot(ns, [p.speedup for p in pts], "-", lw=2, label="model")
    bx.plot(ns, ns, ":", color="grey", label="perfect")
    bx.set_ylim(0, max(max(p.speedup for p in pts) * 1.3, 2))
    if mark_n is not None and 1 <= mark_n <= max_n:
        bx.plot([mark_n], [model.speedup(mark_n)], "o", color="C3", label=f"{mark_n} GPUs")
    bx.set_xlabel("GPUs")
    bx.set_ylabel("speedup over 1 GPU")
    bx.legend()
    bx.grid(True, alpha=0.3)
    fig.suptitle(title or (f"compute {model.compute_s_per_step * 1e3:g} ms, gradients "
                           f"{model.grad_bytes / 1e6:g} MB, alpha {model.alpha_s * 1e6:g} us/hop, "
                           f"link {model.busbw_gbps:.3g} GB/s"))
    return fig


def plot_cost(model: ScalingModel, max_n: int, steps: float, price_per_gpu_hour: float,
              utilisation: float = 1.0, *, success_rate: float = 1.0,
              mark_n: int | None = None) -> Figure:
    """One job of ``steps`` steps at 1..max_n GPUs: wall time and dollars (per solved run when
    success_rate < 1), with the fastest and the stop-paying GPU counts marked."""
    est = job_estimates(model, max_n, steps, price_per_gpu_hour, utilisation)
    ns = [e.n_gpus for e in est]
    fig, (ax, bx) = _figure()
    ax.plot(ns, [e.hours for e in est], lw=2)
    ax.set_xlabel("GPUs")
    ax.set_ylabel("wall hours")
    ax.set_ylim(0, None)
    ax.grid(True, alpha=0.3)
    dollars = [cost_per_solved_run(e.cost_usd, success_rate) for e in est]
    bx.plot(ns, dollars, lw=2, color="C1")
    bx.set_xlabel("GPUs")
    bx.set_ylabel("$ per solved run" if success_rate < 1 else "$ per run")
    bx.grid(True, alpha=0.3)
    stop = model.where_more_gpus_stop_paying(max_n)
    for axis in (ax, bx):
        axis.axvline(stop.fastest_n, color="grey", lw=1, label=f"fastest ({stop.fastest_n})")
        axis.axvline(stop.stop_at, color="C3", lw=1, ls="--", label=f"stops paying ({stop.stop_at})")
        if mark_n is not None and 1 <= mark_n <= max_n:
            y = est[mark_n - 1].hours if axis is ax else dollars[mark_n - 1]
            axis.plot([mark_n], [y], "o", color="C2", label=f"{mark_n} GPUs")
    ax.legend()
    bx.legend()
    solved = f", success rate {success_rate:.0%}" if success_rate < 1 else ""
    fig.suptitle(f"{steps:,.0f} steps at ${price_per_gpu_hour:.2f}/GPU-hour (an input, not a "
                 f"quote), utilisation {utilisation:.0%}{solved}")
    return fig


def plot_guide_costs(rows: Sequence[GuideCost] | None = None) -> Figure:
    """The guide's table as bars: cost and wall time per configuration, with the implied price
    per GPU-hour. Titled as the guide's figures, which is what they are."""
    rows = list(rows) if rows is not None else load_guide_costs()
    labels = [f"{r.configuration.replace(' (', chr(10) + '(')}\n{r.cloud_provider}" for r in rows]
    fig, (ax, bx) = _figure(12, 5.0, bottom=0.2)
    bars = ax.bar(range(len(rows)), [r.cost_3_days_usd for r in rows], color="C1")
    for bar, r in zip(bars, rows, strict=True):
        ax.annotate(f"${r.price_per_gpu_hour('3 days'):.2f}/GPU-h", (bar.get_x() + 0.4,
                    bar.get_height()), ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("$ (the guide's 'Cost (3 days)')")
    ax.set_ylim(0, max(r.cost_3_days_usd for r in rows) * 1.12)
    bx.bar(range(len(rows)), [r.wall_time_hours for r in rows])
    bx.axhline(GUIDE_RUN_HOURS, color="grey", ls=":", label="3 days")
    bx.set_ylabel("wall time, hours")
    bx.legend()
    for axis in (ax, bx):
        axis.set_xticks(range(len(rows)), labels, fontsize=7)
        axis.grid(True, axis="y", alpha=0.3)
    as_of = sorted({r.as_of for r in rows})
    fig.suptitle(f"The guide's own figures (its invoices, {', '.join(as_of)}), not measured here")
    return fig


def plot_break_even(assumptions: OnPremAssumptions | None = None, horizon_months: int = 36,
                    ) -> Figure:
    """Cumulative cost of buying vs renting, and break-even months against utilisation."""
    a = assumptions or OnPremAssumptions()
    months = list(range(horizon_months + 1))
    fig, (ax, bx) = _figure()
    ax.plot(months, [a.capex_usd + a.monthly_opex_usd * m for m in months], lw=2,
            label="on-prem: capex + opex")
    ax.plot(months, [a.monthly_cloud_cost() * m for m in months], lw=2, label="cloud: rent")
    be = a.break_even_months()
    if be <= horizon_months:
        ax.axvline(be, color="grey", lw=1)
        ax.annotate(f"{be:.1f} months", (be, a.capex_usd), textcoords="offset points",
                    xytext=(5, -15))
    ax.set_xlabel("months")
    ax.set_ylabel("cumulative $")
    ax.legend()
    ax.grid(True, alpha=0.3)
    us = [u / 100 for u in range(2, 101)]
    sweep = break_even_sweep(a, "utilisation", us)
    bx.plot([u * 100 for u, _ in sweep], [min(m, 10 * horizon_months) for _, m in sweep], lw=2)
    bx.axhline(GUIDE_BREAK_EVEN_MONTHS, color="C3", ls="--", label="the guide's 14 months")
    bx.plot([a.utilisation * 100], [min(be, 10 * horizon_months)], "o", color="C2",
            label=f"these inputs ({a.utilisation:.1%})")
    bx.set_yscale("log")
    bx.set_xlabel("utilisation, % of hours you would otherwise rent")
    bx.set_ylabel("break-even, months")
    bx.legend()
    bx.grid(True, alpha=0.3)
    fig.suptitle(f"capex ${a.capex_usd:,.0f} (the guide's), {a.n_gpus} GPUs at "
                 f"${a.cloud_price_per_gpu_hour:.2f}/GPU-h, opex ${a.monthly_opex_usd:,.0f}/month"
                 " (assumptions)")
    return fig


# --------------------------------------------------------------------------------------------
# Widgets
# --------------------------------------------------------------------------------------------

@dataclass
class ScalingWidgets:
    """Sliders and an Output that redraw the scaling and cost plots. ``box`` is what to
    display; ``update()`` is the callback every control calls; ``summary`` is the last state
    drawn (also the Output's text), so a test or a notebook can read it without a browser."""

    box: Any
    controls: dict[str, Any]
    output: Any
    base: ScalingModel
    max_n: int
    steps: float
    model: ScalingModel | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    redraws: int = 0

    def values(self) -> dict[str, Any]:
        return {k: w.value for k, w in self.controls.items()}

    def update(self, change: Any = None) -> dict[str, Any]:
        """Read the controls, recompute, redraw into the Output; returns the new summary."""
        v = self.values()
        self.model = self.base.with_link(busbw_gbps=v["bandwidth_gbps"], alpha_us=v["alpha_us"],
                                         algorithm=v["algorithm"])
        n = v["n_gpus"]
        stop = self.model.where_more_gpus_stop_paying(self.max_n)
        hours = self.model.run_hours(n, self.steps) / v["utilisation"]
        dollars = run_cost(n, self.model.run_hours(n, self.steps), v["price_per_gpu_hour"],
                           v["utilisation"])
        self.summary = {**v, "step_ms": self.model.step_time(n) * 1e3,
                        "speedup": self.model.speedup(n), "hours": hours, "cost_usd": dollars,
                        "fastest_n": stop.fastest_n, "stop_at": stop.stop_at}
        text = (f"{n} GPUs: {self.summary['step_ms']:.3g} ms/step, speedup "
                f"{self.summary['speedup']:.2f}x, {hours:.3g} h, ${dollars:,.0f} for "
                f"{self.steps:,.0f} steps; fastest at {stop.fastest_n} GPUs, more than "
                f"{stop.stop_at} stop paying")
        figs = [plot_scaling(self.model, self.max_n, mark_n=n),
                plot_cost(self.model, self.max_n, self.steps, v["price_per_gpu_hour"],
                          v["utilisation"], mark_n=n)]
        # Set the Output's outputs directly (what Output.append_display_data does): works in a
        # kernel and without one, and leaves the state readable.
        self.output.outputs = tuple(
            {"output_type": "display_data", "metadata": {},
             "data": {"image/png": _png(fig), "text/plain": text if i == 0 else ""}}
            for i, fig in enumerate(figs))
        self.redraws += 1
        return self.summary


def _png(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def widgets_for(model: ScalingModel, max_n: int = 64, steps: float = 100_000,
                price_per_gpu_hour: float = GUIDE_H100_NVLINK_PRICE,
                utilisation: float = 1.0) -> ScalingWidgets:
    """Sliders for GPU count, price per GPU-hour, link bandwidth and latency, utilisation and
    a dropdown for the algorithm, redrawing ``plot_scaling`` and ``plot_cost`` live. The
    default price is the one derived from the guide's Lambda row: an input, not a quote."""
    import ipywidgets as w  # lazily: labkit.cost.model works (and papermill runs) without a browser

    _check_n(max_n)
    bw = model.busbw_gbps if math.isfinite(model.busbw_gbps) else 100.0
    alpha_us = max(model.alpha_s * 1e6, 0.1)
    style = {"description_width": "150px"}
    layout = w.Layout(width="520px")
    slider = {"style": style, "layout": layout, "continuous_update": False}  # redraw on release
    controls = {
        "n_gpus": w.IntSlider(value=min(8, max_n), min=1, max=max_n, description="GPUs",
                              **slider),
        "price_per_gpu_hour": w.FloatSlider(value=price_per_gpu_hour, min=0.25,
                                            max=max(60.0, price_per_gpu_hour), step=0.25,
                                            description="$ per GPU-hour", **slider),
        "bandwidth_gbps": w.FloatLogSlider(value=bw, base=10, min=-3, max=3, step=0.05,
                                           description="link busbw GB/s", **slider),
        "alpha_us": w.FloatLogSlider(value=alpha_us, base=10, min=-1, max=5, step=0.05,
                                     description="latency us/hop", **slider),
        "utilisation": w.FloatSlider(value=utilisation, min=0.05, max=1.0, step=0.05,
                                     description="utilisation", **slider),
        "algorithm": w.Dropdown(options=list(ALGORITHMS), value=model.algorithm,
                                description="all-reduce", style=style),
    }
    output = w.Output()
    ui = ScalingWidgets(w.VBox([*controls.values(), output]), controls, output, model, max_n,
                        steps)
    for control in controls.values():
        control.observe(ui.update, names="value")
    ui.update()
    return ui


def as_dict(obj: Any) -> dict[str, Any]:
    """A result dataclass as strict JSON-able data (for ``save_result``): inf becomes None."""
    return _jsonable(asdict(obj))


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value
