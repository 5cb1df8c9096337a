"""An elastic run as a picture: the step each group reached against seconds since the launch,
coloured by world size, over the world size itself (0: nobody trains), with the scheduler's
changes marked. Lesson 12 draws its main run and its freeze run with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from labkit.course import plots
from labkit.orchestration.elastic_report import ElasticRun

if TYPE_CHECKING:
    from matplotlib.figure import Figure

WORLD_COLORS = {1: "tab:blue", 2: "tab:orange", 3: "tab:green", 4: "tab:red"}


def plot_elastic_run(run: ElasticRun, title: str, blocked_s: float = 0.0) -> Figure:
    """Step and world size against seconds since the launch; each change a dashed red line.
    ``blocked_s`` shades the time after each change the peers sit in a collective (a frozen
    node: until the collective timeout)."""
    offset = run.offset_s  # start-up: torchrun, rendezvous, import torch, first barrier
    timeline = [(t + offset, step, world) for t, step, world in run.timeline()]
    fig, (top, bottom) = plots.figure(nrows=2, width=9, height=5.5)
    for world in sorted({w for _, _, w in timeline}):
        pts = [(t, step) for t, step, w in timeline if w == world]
        top.plot(*zip(*pts, strict=True), ".", ms=3, color=WORLD_COLORS.get(world, "k"),
                 label=f"world {world}")
    xs, ys = [0.0], [0]
    for s in run.segments:
        start, end = s.start_s + offset, s.end_s + offset
        xs += [start, start, end, end]
        ys += [0, s.world, s.world, 0]
    bottom.plot(xs, ys, color="k")
    bottom.fill_between(xs, ys, alpha=0.15, color="k")
    for row in run.change_rows():
        for ax in (top, bottom):
            ax.axvline(row.at_s, color="tab:red", ls="--", lw=1)
            if blocked_s:
                ax.axvspan(row.at_s, row.at_s + blocked_s, color="tab:red", alpha=0.1)
        top.annotate(row.change, (row.at_s, 1), xycoords=("data", "axes fraction"), rotation=90,
                     va="top", ha="right", fontsize=8, color="tab:red")
    top.sharex(bottom)
    top.set_ylabel("step reached")
    top.set_title(title)
    top.legend(fontsize=8, loc="lower right")
    bottom.set_ylabel("world size\n(0: nobody trains)")
    bottom.set_xlabel("seconds since the launch")
    bottom.set_yticks(range(0, max((s.world for s in run.segments), default=0) + 1))
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    return fig
