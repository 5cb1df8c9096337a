"""ipywidgets sliders that redraw lesson 14's scaling and cost plots."""

from __future__ import annotations

import base64
import io
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

from labkit.cost.money import run_cost
from labkit.cost.plots import plot_cost, plot_scaling
from labkit.cost.prices import DEFAULT_LIST_PRICE
from labkit.cost.scaling import ALGORITHMS, ScalingModel, _check_n


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
                price_per_gpu_hour: float = DEFAULT_LIST_PRICE.per_gpu_hour,
                utilisation: float = 1.0) -> ScalingWidgets:
    """Sliders for GPU count, price per GPU-hour, link bandwidth and latency, utilisation and
    a dropdown for the algorithm, redrawing ``plot_scaling`` and ``plot_cost`` live. The
    default price is ``DEFAULT_LIST_PRICE`` (a dated list price, see ``labkit.cost.prices``)."""
    import ipywidgets as w  # lazily: labkit.cost works (and papermill runs) without a browser

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
                                            max=max(60.0, price_per_gpu_hour), step=0.01,
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
