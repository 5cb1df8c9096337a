"""Lesson 14's figures: plain parameters in, a matplotlib ``Figure`` out (the same in JupyterLab
and papermill)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

from labkit.cost.guide_table import GUIDE_RUN_HOURS, GuideCost, load_guide_costs
from labkit.cost.money import (
    GUIDE_BREAK_EVEN_MONTHS,
    OnPremAssumptions,
    break_even_sweep,
    cost_per_solved_run,
    job_estimates,
)
from labkit.cost.scaling import ScalingModel


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
    fig.suptitle(f"{steps:,.0f} steps at ${price_per_gpu_hour:.2f}/GPU-hour (an input), "
                 f"utilisation {utilisation:.0%}{solved}")
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
