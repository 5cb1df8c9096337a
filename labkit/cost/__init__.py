"""Scaling and cost (lesson 14): when more GPUs slow a step down, and what a run costs.

- ``guide_table``: the guide's cost table as data (``data/guide_costs.csv``), checked against itself.
- ``scaling``: alpha-beta all-reduce times and ``ScalingModel`` (where more GPUs stop paying).
- ``money``: run cost, cost per solved run, on-prem break-even from editable assumptions.
- ``plots`` and ``widgets``: the lesson's figures and the sliders that redraw them.

Each part is usable without the others::

    from labkit import cost
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

from labkit.cost.guide_table import (
    GUIDE_COST_COLUMNS,
    GUIDE_COSTS_CSV,
    GUIDE_RUN_HOURS,
    GuideCheck,
    GuideCost,
    guide_cost_checks,
    load_guide_costs,
)
from labkit.cost.money import (
    ASSUMED_ONPREM_GPUS,
    GUIDE_BREAK_EVEN_MONTHS,
    GUIDE_CAPEX_USD,
    GUIDE_H100_NVLINK_PRICE,
    GUIDE_IMPLIED_UTILISATION,
    GUIDE_LAMBDA_RUN_USD,
    HOURS_PER_MONTH,
    SENSITIVITY_INPUTS,
    BreakEven,
    OnPremAssumptions,
    RunEstimate,
    break_even_months,
    break_even_sweep,
    cost_per_solved_run,
    guide_break_even,
    job_estimates,
    run_cost,
)
from labkit.cost.plots import (
    plot_break_even,
    plot_cost,
    plot_guide_costs,
    plot_scaling,
)
from labkit.cost.scaling import (
    ALGORITHMS,
    ALPHA_BETA_RESULT,
    DEFAULT_LAB_FIT,
    LAB_POLICY_BATCH,
    LAB_POLICY_GRAD_BYTES,
    LAB_POLICY_HIDDEN,
    LAB_POLICY_PARAMS,
    LAB_POLICY_STEP_S,
    LabFit,
    ScalingModel,
    ScalingPoint,
    SlowdownDemo,
    StopPaying,
    allreduce_hops,
    allreduce_time,
    lab_alpha_beta,
    lab_scaling_model,
    measure_policy_step_s,
    more_gpus_slower,
)
from labkit.cost.widgets import (
    ScalingWidgets,
    widgets_for,
)

__all__ = [
    "ALGORITHMS",
    "allreduce_hops",
    "allreduce_time",
    "ALPHA_BETA_RESULT",
    "ASSUMED_ONPREM_GPUS",
    "break_even_months",
    "break_even_sweep",
    "BreakEven",
    "cost_per_solved_run",
    "DEFAULT_LAB_FIT",
    "guide_break_even",
    "GUIDE_BREAK_EVEN_MONTHS",
    "GUIDE_CAPEX_USD",
    "guide_cost_checks",
    "GUIDE_COST_COLUMNS",
    "GUIDE_COSTS_CSV",
    "GUIDE_H100_NVLINK_PRICE",
    "GUIDE_IMPLIED_UTILISATION",
    "GUIDE_LAMBDA_RUN_USD",
    "GUIDE_RUN_HOURS",
    "GuideCheck",
    "GuideCost",
    "HOURS_PER_MONTH",
    "job_estimates",
    "lab_alpha_beta",
    "LAB_POLICY_BATCH",
    "LAB_POLICY_GRAD_BYTES",
    "LAB_POLICY_HIDDEN",
    "LAB_POLICY_PARAMS",
    "LAB_POLICY_STEP_S",
    "lab_scaling_model",
    "LabFit",
    "load_guide_costs",
    "measure_policy_step_s",
    "more_gpus_slower",
    "OnPremAssumptions",
    "plot_break_even",
    "plot_cost",
    "plot_guide_costs",
    "plot_scaling",
    "run_cost",
    "RunEstimate",
    "ScalingModel",
    "ScalingPoint",
    "ScalingWidgets",
    "SENSITIVITY_INPUTS",
    "SlowdownDemo",
    "StopPaying",
    "widgets_for",
]
