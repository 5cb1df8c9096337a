"""The lessons' figures, drawn one way: matplotlib's ``Figure`` API (no pyplot state, the same in
JupyterLab and papermill), a figure made by :func:`figure` and filled by the helpers below.

    fig, (left, right) = plots.figure(2, width=12)
    plots.bars(left, labels, rates, ylabel="env steps / s", title="throughput")
    plots.learning_curves(right, {"sync": curve, "async": other}, x="seconds")
    fig                       # the cell's last value: the notebook shows it

Curves are lists of dicts (``{"env_steps": ..., "seconds": ..., "mean_return": ...}``), the shape
every training result in the lab has; a heat map takes a matrix with None where nothing was
measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def figure(ncols: int = 1, *, width: float = 8.0, height: float = 4.2, nrows: int = 1,
           sharey: bool = False, **subplots: Any) -> tuple[Figure, list[Axes]]:
    """A figure with ``nrows x ncols`` axes (as a flat list) and a layout that fits its labels;
    ``subplots`` go to ``Figure.subplots`` (``width_ratios=[3, 1]``, ``sharex=True``). In a
    notebook the figure shows as a cell's last value, or with ``display(fig)``."""
    from matplotlib.figure import Figure

    _shown_as_png()
    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(nrows, ncols, sharey=sharey, squeeze=False, **subplots)
    return fig, [ax for row in axes for ax in row]


def _shown_as_png() -> None:
    """In IPython, show a ``Figure`` as a PNG (what ``%matplotlib inline`` sets up), so a
    figure displays without pyplot ever being imported."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return
    from IPython.core.pylabtools import print_figure
    from matplotlib.figure import Figure

    png = shell.display_formatter.formatters["image/png"]
    if Figure not in png.type_printers:
        png.for_type(Figure, lambda fig: print_figure(fig, "png", bbox_inches="tight"))


def learning_curves(ax: Axes, curves: Mapping[str, Sequence[Mapping[str, float]]], *,
                    x: str = "env_steps", y: str = "mean_return", solved: float | None = None,
                    styles: Mapping[str, Mapping[str, Any]] | None = None,
                    xlabel: str | None = None, ylabel: str = "mean return, last 20 episodes",
                    title: str | None = None) -> Axes:
    """One line per labelled curve (points with keys ``x`` and ``y``); ``solved`` draws the
    return that counts as solved."""
    for label, curve in curves.items():
        ax.plot([p[x] for p in curve], [p[y] for p in curve], label=label,
                **dict((styles or {}).get(label, {})))
    if solved is not None:
        ax.axhline(solved, color="k", ls=":", lw=1, label=f"solved ({solved:g})")
    ax.set_xlabel(xlabel or {"env_steps": "env steps (all agents)",
                             "seconds": "seconds since the agents started"}.get(x, x))
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    return ax


def lines(ax: Axes, series: Mapping[str, tuple[Sequence[float], Sequence[float]]], *,
          xlabel: str = "", ylabel: str = "", title: str | None = None, xlog: int | None = None,
          ylog: int | None = None, marker: str = "o") -> Axes:
    """One line per labelled ``(xs, ys)``; ``xlog=2`` (or 10) for a log axis of that base."""
    for label, (xs, ys) in series.items():
        ax.plot(xs, ys, marker=marker, label=label)
    if xlog:
        ax.set_xscale("log", base=xlog)
    if ylog:
        ax.set_yscale("log", base=ylog)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if len(series) > 1:
        ax.legend()
    return ax


def bars(ax: Axes, labels: Sequence[str], values: Sequence[float], *, ylabel: str = "",
         title: str | None = None, colors: Sequence[str] | None = None) -> Axes:
    """A bar per label."""
    ax.bar(list(labels), list(values), color=list(colors) if colors else None)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    return ax


def heatmap(ax: Axes, matrix: Sequence[Sequence[float | None]], *,
            label: Callable[[float], str] = lambda v: f"{v:.3g}",
            mark: Callable[[float], bool] | None = None, log: bool = False,
            vmin: float | None = None, vmax: float | None = None, colorbar: str = "",
            xlabel: str = "", ylabel: str = "", title: str | None = None) -> Axes:
    """A square matrix as colours with each value written in its cell; None (nothing measured,
    the diagonal of a pair matrix) is shown as ``-``. ``mark`` outlines the cells it is true
    for in red."""
    import numpy as np
    from matplotlib.colors import LogNorm, Normalize
    from matplotlib.patches import Rectangle

    m = np.array([[np.nan if v is None else float(v) for v in row] for row in matrix])
    seen = m[~np.isnan(m)]
    lo = vmin if vmin is not None else (float(seen.min()) if seen.size else 1.0)
    hi = vmax if vmax is not None else (float(seen.max()) if seen.size else 1.0)
    norm = LogNorm(vmin=lo, vmax=hi) if log else Normalize(vmin=lo, vmax=hi)
    image = ax.imshow(m, cmap="viridis", norm=norm)
    for i, row in enumerate(m):
        for j, v in enumerate(row):
            if math.isnan(v):
                ax.text(j, i, "-", ha="center", va="center", color="grey")
                continue
            bright = norm(v) > 0.6
            ax.text(j, i, label(v), ha="center", va="center", fontsize=8,
                    color="black" if bright else "white")
            if mark is not None and mark(v):
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red",
                                       lw=2.5))
    ax.set_xticks(range(m.shape[1]))
    ax.set_yticks(range(m.shape[0]))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=10)
    ax.figure.colorbar(image, ax=ax, label=colorbar)
    return ax


def vline(ax: Axes, x: float, label: str, color: str = "tab:red") -> Axes:
    """A dotted vertical marker with a legend entry (a kill, a resume, a threshold)."""
    ax.axvline(x, color=color, ls=":", label=label)
    ax.legend()
    return ax
