"""Scaling and cost (lesson 14): when more GPUs slow a step down, and what a run costs.

- ``guide_table``: the guide's cost table as data (``data/guide_costs.csv``), checked against itself.
- ``scaling``: alpha-beta all-reduce times and ``ScalingModel`` (where more GPUs stop paying).
- ``measured``: the model from this run's measurements, and against them.
- ``money``: run cost, cost per solved run, on-prem break-even from editable assumptions.
- ``prices``: public list prices and hardware costs, each with its source and date.
- ``plots`` and ``widgets``: the lesson's figures and the sliders that redraw them.

Each part is usable without the others::

    from labkit import cost
    rows = cost.load_guide_costs()                 # the guide's table (its figures, March 2026)
    model = cost.ScalingModel(compute_s_per_step=1.0, alpha_s=300e-6,
                              beta_s_per_byte=1 / 10e9, grad_bytes=100e6)
    model.best_n(128), model.where_more_gpus_stop_paying(128)
    cost.guide_break_even().months                 # the guide's "$280K, pays off in 14 months"
    cost.plot_scaling(model, 128)                  # a matplotlib Figure; widgets_for(model) for sliders

Every price here is one of three kinds, and says which: the guide's (attributed, dated: "our AWS
and GCP invoices for March 2026"), a public list price with its source and date (``LIST_PRICES``,
``CAPEX_REFERENCES``), or an assumption you are meant to edit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from labkit.runtime.lazy import lazy_surface

if TYPE_CHECKING:  # what each name is, for readers and type checkers
    from labkit.cost.guide_table import (
        GUIDE_COST_COLUMNS,
        GUIDE_COSTS_CSV,
        GUIDE_RUN_HOURS,
        INSTANCE_FACTS,
        GuideCheck,
        GuideCost,
        InstanceFact,
        guide_cost_checks,
        instance_fact,
        instance_mismatches,
        load_guide_costs,
    )
    from labkit.cost.measured import (
        ALPHA_BETA_RESULT,
        DEFAULT_LAB_FIT,
        LAB_POLICY_BATCH,
        LAB_POLICY_GRAD_BYTES,
        LAB_POLICY_HIDDEN,
        LAB_POLICY_PARAMS,
        LAB_POLICY_STEP_S,
        LabFit,
        RankCost,
        compare_to_measured,
        lab_alpha_beta,
        lab_scaling_model,
        link_of,
        measure_policy_step_s,
        rank_cost,
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
    from labkit.cost.prices import (
        CAPEX_REFERENCES,
        DEFAULT_LIST_PRICE,
        GUIDE_ROW_LIST_PRICE,
        LIST_PRICES,
        CapexReference,
        ListPrice,
        PriceChoice,
        PriceComparison,
        choose_price,
        guide_vs_list,
        list_price,
    )
    from labkit.cost.scaling import (
        ALGORITHMS,
        ScalingModel,
        ScalingPoint,
        SlowdownDemo,
        StopPaying,
        allreduce_hops,
        allreduce_time,
        more_gpus_slower,
    )
    from labkit.cost.widgets import (
        ScalingWidgets,
        widgets_for,
    )

# name -> the module that defines it: a name is imported when first used,
# so importing one module of the folder (a rank script, a child process) imports no other
_HOME = {
    "CAPEX_REFERENCES": "labkit.cost.prices",
    "CapexReference": "labkit.cost.prices",
    "choose_price": "labkit.cost.prices",
    "DEFAULT_LIST_PRICE": "labkit.cost.prices",
    "GUIDE_ROW_LIST_PRICE": "labkit.cost.prices",
    "guide_vs_list": "labkit.cost.prices",
    "INSTANCE_FACTS": "labkit.cost.guide_table",
    "instance_fact": "labkit.cost.guide_table",
    "instance_mismatches": "labkit.cost.guide_table",
    "InstanceFact": "labkit.cost.guide_table",
    "list_price": "labkit.cost.prices",
    "LIST_PRICES": "labkit.cost.prices",
    "ListPrice": "labkit.cost.prices",
    "PriceChoice": "labkit.cost.prices",
    "PriceComparison": "labkit.cost.prices",
    "ALGORITHMS": "labkit.cost.scaling",
    "allreduce_hops": "labkit.cost.scaling",
    "allreduce_time": "labkit.cost.scaling",
    "compare_to_measured": "labkit.cost.measured",
    "link_of": "labkit.cost.measured",
    "ALPHA_BETA_RESULT": "labkit.cost.measured",
    "ASSUMED_ONPREM_GPUS": "labkit.cost.money",
    "break_even_months": "labkit.cost.money",
    "break_even_sweep": "labkit.cost.money",
    "BreakEven": "labkit.cost.money",
    "cost_per_solved_run": "labkit.cost.money",
    "DEFAULT_LAB_FIT": "labkit.cost.measured",
    "guide_break_even": "labkit.cost.money",
    "GUIDE_BREAK_EVEN_MONTHS": "labkit.cost.money",
    "GUIDE_CAPEX_USD": "labkit.cost.money",
    "guide_cost_checks": "labkit.cost.guide_table",
    "GUIDE_COST_COLUMNS": "labkit.cost.guide_table",
    "GUIDE_COSTS_CSV": "labkit.cost.guide_table",
    "GUIDE_H100_NVLINK_PRICE": "labkit.cost.money",
    "GUIDE_IMPLIED_UTILISATION": "labkit.cost.money",
    "GUIDE_LAMBDA_RUN_USD": "labkit.cost.money",
    "GUIDE_RUN_HOURS": "labkit.cost.guide_table",
    "GuideCheck": "labkit.cost.guide_table",
    "GuideCost": "labkit.cost.guide_table",
    "HOURS_PER_MONTH": "labkit.cost.money",
    "job_estimates": "labkit.cost.money",
    "lab_alpha_beta": "labkit.cost.measured",
    "LAB_POLICY_BATCH": "labkit.cost.measured",
    "LAB_POLICY_GRAD_BYTES": "labkit.cost.measured",
    "LAB_POLICY_HIDDEN": "labkit.cost.measured",
    "LAB_POLICY_PARAMS": "labkit.cost.measured",
    "LAB_POLICY_STEP_S": "labkit.cost.measured",
    "lab_scaling_model": "labkit.cost.measured",
    "LabFit": "labkit.cost.measured",
    "load_guide_costs": "labkit.cost.guide_table",
    "measure_policy_step_s": "labkit.cost.measured",
    "rank_cost": "labkit.cost.measured",
    "RankCost": "labkit.cost.measured",
    "more_gpus_slower": "labkit.cost.scaling",
    "OnPremAssumptions": "labkit.cost.money",
    "plot_break_even": "labkit.cost.plots",
    "plot_cost": "labkit.cost.plots",
    "plot_guide_costs": "labkit.cost.plots",
    "plot_scaling": "labkit.cost.plots",
    "run_cost": "labkit.cost.money",
    "RunEstimate": "labkit.cost.money",
    "ScalingModel": "labkit.cost.scaling",
    "ScalingPoint": "labkit.cost.scaling",
    "ScalingWidgets": "labkit.cost.widgets",
    "SENSITIVITY_INPUTS": "labkit.cost.money",
    "SlowdownDemo": "labkit.cost.scaling",
    "StopPaying": "labkit.cost.scaling",
    "widgets_for": "labkit.cost.widgets",
}
__all__ = sorted(_HOME)
__getattr__, __dir__ = lazy_surface(__name__, _HOME)
