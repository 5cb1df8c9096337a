"""What a run costs, per run and per solved run, and when an on-prem cluster pays for itself.

Every price here is either the guide's (attributed, dated) or an assumption you are meant to
edit; public list prices, with their sources and dates, are in ``labkit.cost.prices``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING

from labkit.errors import ParameterError

if TYPE_CHECKING:

    pass
from labkit.cost.guide_table import GUIDE_RUN_HOURS
from labkit.cost.scaling import ScalingModel, _check_n

HOURS_PER_MONTH = 8760.0 / 12  # 730: an average month, for monthly cloud spend


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
