"""The capstone's one report: throughput, lag, restarts, lost work and final return, as JSON and a
figure, built from the learner's progress log and what the ranks published.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from labkit.errors import LaunchError, ParameterError

if TYPE_CHECKING:
    from matplotlib.figure import Figure
from labkit.capstone.config import FIGURE_FILE, REPORT_FILE, CapstoneConfig, Kill
from labkit.runtime.stats import percentile


def contiguous_runs(times: list[float], gap_s: float = 1.5) -> list[tuple[float, float]]:
    """Sorted sample times as (first, last) of each stretch without a gap over ``gap_s``."""
    runs: list[tuple[float, float]] = []
    for t in sorted(times):
        if runs and t - runs[-1][1] <= gap_s:
            runs[-1] = (runs[-1][0], t)
        else:
            runs.append((t, t))
    return runs


def with_breaks(points: list[list[float]], gap_s: float = 1.5) -> tuple[list[float], list[float]]:
    """x and y for a line that stops where samples are missing (NaN breaks it)."""
    xs: list[float] = []
    ys: list[float] = []
    for t, v in points:
        if xs and t - xs[-1] > gap_s:
            xs.append(math.nan)
            ys.append(math.nan)
        xs.append(t)
        ys.append(v)
    return xs, ys


@dataclass
class CapstoneReport:
    """What the run did, in five parts (throughput, lag, restarts, lost work, final return),
    plus what the figure draws."""

    config: dict[str, Any]
    seconds: float
    throughput: dict[str, Any]
    lag: dict[str, Any]
    restarts: dict[str, Any]
    lost_work: dict[str, Any]
    final_return: dict[str, Any]
    checkpoints: dict[str, Any]
    kill: dict[str, Any] | None
    metrics: dict[str, Any]
    timeline: dict[str, list[Any]]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> dict[str, Any]:
        """The report without the timeline and config: what a person reads first."""
        out = self.to_dict()
        for key in ("timeline", "config"):
            out.pop(key)
        out["metrics"] = {k: v for k, v in self.metrics.items() if k != "series"}
        return out

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> CapstoneReport:
        """A report saved by :meth:`save` (its ``capstone_report.json``), e.g. a notebook's run."""
        try:
            data = json.loads(Path(path).read_text())
            return cls(**{f.name: data[f.name] for f in fields(cls)})
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ParameterError(f"{path} is not a capstone report ({type(exc).__name__}: "
                                 f"{exc})") from None

    def save(self, out_dir: str | os.PathLike[str]) -> tuple[Path, Path]:
        """``capstone_report.json`` and ``capstone_report.png`` in ``out_dir``."""
        folder = Path(out_dir)
        folder.mkdir(parents=True, exist_ok=True)
        report = folder / REPORT_FILE
        report.write_text(json.dumps(self.to_dict(), indent=2))
        figure = folder / FIGURE_FILE
        self.figure().savefig(figure, dpi=100)
        return report, figure

    def figure(self) -> Figure:
        """Return, throughput and lag over the run's seconds, the kill and restart marked."""
        from matplotlib.figure import Figure

        fig = Figure(figsize=(11, 8.5))
        fig.subplots_adjust(left=0.08, right=0.92, bottom=0.07, top=0.93, hspace=0.35)
        ax, bx, cx = fig.subplots(3, 1, sharex=True)
        tl = self.timeline
        for gen in sorted(set(tl["generation"])):
            pts = [(t, r) for t, r, g in zip(tl["t"], tl["mean_return"], tl["generation"],
                                             strict=True) if g == gen and r is not None]
            if pts:
                ax.plot(*zip(*pts, strict=True), "-", lw=2,
                        label=f"learner {gen}" + (" (resumed)" if gen > 1 else ""))
        for t in tl["checkpoints"]:
            ax.axvline(t, color="grey", lw=0.6, alpha=0.5)
        from labkit.rl.agents import SOLVED_WINDOW

        ax.set_ylabel(f"mean return\n(last {SOLVED_WINDOW} episodes)")
        ax.set_title(f"{self.config['nodes']} nodes x {self.config['ranks_per_node']} ranks: "
                     f"final eval return {self.final_return['eval_return']:.1f}, "
                     f"{self.restarts['group_restarts']} restart(s), "
                     f"{self.lost_work['lost_updates']} update(s) lost")
        series = self.metrics.get("series", {})
        if series.get("collected_steps_per_s"):
            for name, style in (("collected_steps_per_s", "-"), ("trained_steps_per_s", "--")):
                pts = series.get(name, [])
                if pts:
                    bx.plot(*with_breaks(pts), style, label=name.replace("_", " "))
            up = series.get("ranks_up", [])
            if up:
                twin = bx.twinx()
                twin.plot(*with_breaks(up), ":", color="C3", label="ranks up")
                twin.set_ylabel("ranks up (Prometheus)", color="C3")
                twin.set_ylim(-0.2, self.config["nodes"] * self.config["ranks_per_node"] + 0.5)
            bx.set_ylabel("env steps / s\n(Prometheus rate)")
        else:
            bx.plot(tl["t"][1:], tl["steps_per_s"][1:], "-", label="trained steps/s (log)")
            bx.set_ylabel("env steps / s\n(learner log)")
        bx.legend(loc="upper left")
        cx.plot(tl["t"], tl["mean_lag"], ".", ms=3, label="mean lag of the batch")
        for gen in sorted(set(tl["generation"])):  # one line per learner: no line over the stall
            pts = [(t, m) for t, m, g in zip(tl["t"], tl["max_lag"], tl["generation"],
                                             strict=True) if g == gen]
            cx.plot(*zip(*pts, strict=True), "-", lw=0.8, alpha=0.6, color="C1",
                    label="max lag of the batch" if gen == 1 else None)
        cx.set_ylabel("policy lag\n(versions)")
        cx.set_xlabel("seconds since launch")
        cx.legend(loc="upper left")
        for axis in (ax, bx, cx):
            axis.grid(True, alpha=0.3)
            if self.kill is not None:
                axis.axvline(self.kill["at_s"], color="C3", lw=1.5)
            stall = self.lost_work.get("stall_window_s")
            if stall:
                axis.axvspan(stall[0], stall[1], color="C3", alpha=0.08)
        if self.kill is not None:
            ax.annotate(f"SIGKILL slot {self.kill['slot']}", (self.kill["at_s"], 0),
                        xycoords=("data", "axes fraction"), xytext=(4, 6),
                        textcoords="offset points", color="C3")
        ax.legend(loc="lower right")
        return fig


def build_report(cfg: CapstoneConfig, log: list[dict[str, Any]], published: dict[str, Any],
                 kill: Kill | None, started: float, ended: float, *, source: str, note: str,
                 series: dict[str, list[list[float]]], alerts: list[dict[str, Any]],
                 failures: int, endpoints: list[str] | None = None) -> CapstoneReport:
    """The report from the learner's log, its published result and what the launcher did."""
    updates = [r for r in log if "update" in r]
    starts = [r for r in log if r.get("event") == "start"]
    saves = [r for r in log if r.get("event") == "checkpoint"]
    if not updates:
        raise LaunchError("the learner logged no update")

    def rel(t: float) -> float:
        return round(t - started, 3)

    first, last = updates[0], updates[-1]
    span = max(last["t"] - first["t"], 1e-9)
    # The stall: from the last update before a restart to the first one after it.
    stall_s, stall_window, lost_s = 0.0, None, 0.0
    for restart in starts[1:]:
        before = [u for u in updates if u["generation"] < restart["generation"]]
        after = [u for u in updates if u["generation"] == restart["generation"]]
        if before and after:
            stall_s += after[0]["t"] - before[-1]["t"]
            stall_window = [rel(before[-1]["t"]), rel(after[0]["t"])]
            previous = [u for u in before if u["generation"] == restart["generation"] - 1]
            redone = [u for u in previous if u["update"] > restart["from_update"]]
            if redone:  # the time the previous learner spent on the updates now redone
                base = [u for u in previous if u["update"] == restart["from_update"]]
                lost_s += redone[-1]["t"] - (base[-1]["t"] if base else previous[0]["t"])
    trained = published["env_steps_trained"]
    lags = sorted(x for u in updates for x in u["lags"])
    ages = sorted(x for u in updates for x in u["ages"])
    ckpt_times = [s["seconds"] for s in saves]
    timeline: dict[str, list[Any]] = {
        "t": [rel(u["t"]) for u in updates], "update": [u["update"] for u in updates],
        "version": [u["version"] for u in updates],
        "generation": [u["generation"] for u in updates],
        "mean_return": [u["mean_return"] for u in updates],
        "mean_lag": [round(statistics.fmean(u["lags"]), 3) for u in updates],
        "max_lag": [max(u["lags"]) for u in updates],
        "steps_per_s": [0.0] + [
            round((b["env_steps"] - a["env_steps"]) / max(b["t"] - a["t"], 1e-9), 1)
            for a, b in zip(updates, updates[1:], strict=False)],
        "checkpoints": [rel(s["t"]) for s in saves],
    }
    restarted = starts[1:]
    return CapstoneReport(
        config={k: v for k, v in asdict(cfg).items() if k != "workdir"},
        seconds=round(ended - started, 2),
        throughput={
            "env_steps_trained": trained,
            "env_steps_collected": published["env_steps_collected"],
            "updates": published["updates"],
            "trained_steps_per_s": round(trained / span, 1),
            "trained_steps_per_s_without_stall": round(trained / max(span - stall_s, 1e-9), 1),
            "updates_per_s": round(len(updates) / span, 2),
            "first_update_at_s": rel(first["t"]),
        },
        lag={
            "mean": round(statistics.fmean(lags), 3), "p50": percentile(lags, 50),
            "p90": percentile(lags, 90), "max": lags[-1],
            "p50_age_s": round(percentile(ages, 50), 4), "p90_age_s": round(percentile(ages, 90), 4),
            "staleness": cfg.staleness.method,
            "rollouts_dropped": sum(u.get("dropped", 0) for u in updates),
        },
        restarts={
            "group_restarts": len(restarted),
            "learner_generations": len(starts),
            "rank_starts": {str(k): v for k, v in sorted(published["starts"].items(),
                                                          key=lambda kv: int(kv[0]))},
            "rank_failures_recorded": failures,
            "lease_wait_s": [s["lease_wait_s"] for s in starts],
        },
        lost_work={
            "resumed_from_update": [s["from_update"] for s in restarted],
            "reached_update": [s["reached"] for s in restarted],
            "lost_updates": sum(s["lost_updates"] for s in restarted),
            "lost_update_seconds": round(lost_s, 2),
            "replayed_rollouts": sum(s["replayed"] for s in restarted),
            "stall_s": round(stall_s, 2),
            "stall_window_s": stall_window,
            "duplicates_skipped": published["duplicates_skipped"],
            "collected_not_trained_steps": max(0, published["env_steps_collected"] - trained),
        },
        final_return={
            "eval_return": published["eval_return"],
            "final_mean_return": published["final_mean_return"],
            "steps_to_solved": published["steps_to_solved"],
            "episodes": published["episodes"],
        },
        checkpoints={
            "count": len(saves), "every_updates": cfg.checkpoint_every_updates,
            "every_s": cfg.checkpoint_every_s,
            "mean_save_s": round(statistics.fmean(ckpt_times), 4) if ckpt_times else None,
            "max_save_s": max(ckpt_times) if ckpt_times else None,
        },
        kill=None if kill is None else {
            "slot": kill.slot, "node": kill.node, "rank": kill.rank, "pid": kill.pid,
            "at_update": kill.update, "at_s": rel(kill.t),
            "role": "learner" if kill.slot == 0 else "actor"},
        metrics={"source": source, "note": note, "endpoints": endpoints or [], "alerts": alerts,
                 "series": series},
        timeline=timeline,
    )
