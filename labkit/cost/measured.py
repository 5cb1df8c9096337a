"""The scaling model against what was measured: the lab's own all-reduce fit and policy step
(this run's when notebook 03 saved one, else the development machine's, said which), a model
built from them, the model's all-reduce times next to the measured ones, and what one more rank
adds to an all-reduce (``rank_cost``: the ring model's marginal cost, the 64th GPU's included).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from labkit.errors import ParameterError

if TYPE_CHECKING:

    from labkit.collectives.alphabeta import AlphaBeta
from labkit.cost.scaling import ScalingModel, allreduce_hops, allreduce_time

ALPHA_BETA_RESULT = "alpha_beta_all_reduce"  # the name notebook 03 saves its fit under

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


def link_of(fit: AlphaBeta) -> tuple[float, float]:
    """(alpha per hop in s, beta in s per byte) of a measured all-reduce fit, as
    :meth:`ScalingModel.from_alpha_beta` derives them."""
    model = ScalingModel.from_alpha_beta(fit, compute_s_per_step=1.0, grad_bytes=0.0)
    return model.alpha_s, model.beta_s_per_byte


def compare_to_measured(reports: Mapping[int, Any], links: Mapping[str, tuple[float, float]],
                        algorithm: str = "ring") -> list[dict[str, Any]]:
    """One row per measured all-reduce (``reports``: world size -> a collectives report with
    ``rows``): ``n``, ``hops``, ``size``, ``measured_us``, and for each labelled link
    ``(alpha_s, beta_s_per_byte)`` the model's time (``<label>``, us) and ``<label> ratio``
    (model / measured: 1 is a perfect prediction, 2 twice too slow)."""
    rows = []
    for n, report in reports.items():
        for measured in report.rows:
            row = {"n": n, "hops": allreduce_hops(n, algorithm), "size": measured.size,
                   "measured_us": measured.time_us}
            for label, (alpha_s, beta) in links.items():
                model_us = allreduce_time(n, measured.size, alpha_s, beta, algorithm) * 1e6
                row[label], row[f"{label} ratio"] = model_us, model_us / measured.time_us
            rows.append(row)
    return rows


@dataclass(frozen=True)
class RankCost:
    """What one more rank adds to one all-reduce of ``size`` bytes, per rank added from
    ``n_from`` to ``n_to`` ranks: the ring model's microseconds on a fit and those measured
    here (None, with ``reason``, when the sweep has no such pair), and the model's price of the
    64th GPU (its two hops, ``2 * hop_us``, and what is left of its bandwidth share)."""

    size: int
    n_from: int  # 1 when the sweep has one world size: a single rank all-reduces nothing
    n_to: int
    model_us: float | None
    measured_us: float | None
    sixty_fourth_us: float
    hop_us: float
    reason: str = ""


def rank_cost(reports: Mapping[int, Any], fit: AlphaBeta, nbytes: float = LAB_POLICY_GRAD_BYTES,
              algorithm: str = "ring") -> RankCost:
    """The marginal all-reduce cost of a rank, model (``fit``) against measurement
    (``reports``: world size -> a collectives report with ``rows``), at the measured size
    nearest ``nbytes``, between the two largest world sizes (or 1 and the only one)."""
    alpha_s, beta = link_of(fit)

    def model_us(n: int, size: float) -> float:
        return allreduce_time(n, size, alpha_s, beta, algorithm) * 1e6

    sizes = sorted({row.size for report in reports.values() for row in report.rows})
    if not sizes or nbytes <= 0:
        raise ParameterError("need a measured all_reduce sweep and a positive size")
    size = min(sizes, key=lambda s: abs(math.log(s / nbytes)))
    n_to = max(reports)
    n_from = max((n for n in reports if n < n_to), default=1)
    sixty_fourth = model_us(64, size) - model_us(63, size)

    def measured(n: int) -> float | None:
        if n == 1:
            return 0.0
        return next((row.time_us for row in reports[n].rows if row.size == size), None)

    if n_to <= n_from:
        return RankCost(size, n_from, n_to, None, None, sixty_fourth, alpha_s * 1e6,
                        f"one rank only ({n_to}): no rank was added")
    added = n_to - n_from
    model = (model_us(n_to, size) - model_us(n_from, size)) / added
    low, high = measured(n_from), measured(n_to)
    if low is None or high is None:
        return RankCost(size, n_from, n_to, model, None, sixty_fourth, alpha_s * 1e6,
                        f"no all_reduce of {size:,} B at both {n_from} and {n_to} ranks")
    return RankCost(size, n_from, n_to, model, (high - low) / added, sixty_fourth, alpha_s * 1e6)
