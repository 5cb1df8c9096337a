"""What warm ranks save: one no-op ``%%torchrun`` cell (``pass``) on N nodes x P ranks, as a cold
job of its own and on a warm group, measured side by side in the same run (``labkit bench cell``).

The cold cell goes the way the magic sends it (``cell_script`` then ``launch_code``: torchrun
agents, ranks, the job's end); the warm cell goes to a group started once before the first
round (its start is reported, not counted per cell). Rounds alternate cold, warm, so load
drifts on the machine hit both alike; we report medians and every round. The lesson's goal for
a warm cell, at most a tenth of a cold one and under half a second, is checked against what
was measured, never assumed.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field

from labkit.errors import ParameterError
from labkit.runtime.launch import launch_code
from labkit.runtime.warm import DEFAULT_TIMEOUT_S, WarmGroup

NOOP_CELL = "pass\n"
GOAL_RATIO = 0.1  # a warm cell at most this fraction of a cold one ...
GOAL_S = 0.5  # ... and under this many seconds


@dataclass
class CellBench:
    """Medians (seconds) of a no-op cell, cold and warm, with every round and the goal's verdict."""

    nnodes: int
    nproc_per_node: int
    repeats: int
    cold_s: float
    warm_s: float
    ratio: float  # warm_s / cold_s
    goal_met: bool  # ratio <= GOAL_RATIO and warm_s < GOAL_S
    group_start_s: float  # starting the warm group, once
    cold_runs_s: list[float] = field(default_factory=list)
    warm_runs_s: list[float] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"benchmark": "cell", **asdict(self)}

    def summary(self) -> str:
        verdict = "met" if self.goal_met else "NOT met"
        return (f"no-op cell on {self.nnodes} x {self.nproc_per_node}: cold {self.cold_s:.3f} s, "
                f"warm {self.warm_s * 1000:.1f} ms ({self.ratio:.4f}x; median of "
                f"{self.repeats}); goal (warm <= {GOAL_RATIO:g}x cold and < {GOAL_S:g} s) "
                f"{verdict}; the group took {self.group_start_s:.1f} s to start, once")


def measure_cell(repeats: int = 5, nnodes: int = 2, nproc_per_node: int = 2,
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> CellBench:
    """Median seconds of a no-op cell, cold and on a warm group, in alternating rounds."""
    if repeats < 1:
        raise ParameterError(f"--repeats must be >= 1, got {repeats}")
    from labkit.runtime.magic import cell_script  # the cell as the magic turns it into a script

    group = WarmGroup(nnodes, nproc_per_node, timeout_s=timeout_s)
    started = group.start(echo=None)
    cold, warm = [], []
    try:
        for _ in range(repeats):
            began = time.perf_counter()
            launch_code(cell_script(NOOP_CELL, {}), nnodes=nnodes, nproc_per_node=nproc_per_node,
                        timeout_s=timeout_s, echo=None).check()
            cold.append(time.perf_counter() - began)
            began = time.perf_counter()
            group.run_cell(NOOP_CELL, echo=None)
            warm.append(time.perf_counter() - began)
    finally:
        group.stop("the benchmark ended")
    cold_s, warm_s = statistics.median(cold), statistics.median(warm)
    ratio = warm_s / cold_s
    return CellBench(nnodes, nproc_per_node, repeats, round(cold_s, 4), round(warm_s, 6),
                     round(ratio, 6), ratio <= GOAL_RATIO and warm_s < GOAL_S, round(started, 3),
                     [round(s, 4) for s in cold], [round(s, 6) for s in warm])
