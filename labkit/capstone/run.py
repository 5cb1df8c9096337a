"""The capstone: the whole system at once, on simulated nodes, with a rank killed mid-run.

    labkit capstone --nodes 3 --ranks-per-node 2 --kill-slot 3 --kill-at-update 30 --json

``nodes`` torchrun agents x ``ranks_per_node`` ranks (c10d rendezvous, ``max_restarts``): one
learner (node 0, local rank 0) and actors on every other slot, talking through Redis as in the
async lessons: rollouts through the stream buffer (consumer group, at-least-once, de-duplicated),
weights as one versioned frame written under the learner's fenced lease, a learner heartbeat,
credit-based flow control, V-trace for stale rollouts (``labkit.capstone.run_rank`` has the rules).
The learner checkpoints on a cadence and acks what it trained on only once a checkpoint holds
it. Every rank serves Prometheus metrics on a fixed port per slot and a real Prometheus scrapes
them (``labkit.observability.observe``). Once the learner reaches ``kill_at_update``, the launcher SIGKILLs
one rank (``kill_slot``); torchrun restarts the group, the learner resumes from its last
checkpoint and replays what it had not checkpointed. :class:`CapstoneReport` is the one report:
throughput, lag, restarts, lost work, final return, as JSON and a figure.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from labkit.errors import LaunchError, ParameterError
from labkit.reliability.cadence import add_cadence_arguments, cadence_fields, cadence_of
from labkit.rl.staleness import StalenessConfig
from labkit.runtime.launch import Echo, Fleet
from labkit.runtime.rank_script import rank_script
from labkit.runtime.runlog import LogTail, read_records
from labkit.training.train import Hyper

if TYPE_CHECKING:
    from matplotlib.figure import Figure

LOG_FILE = "capstone.jsonl"  # the learner's progress log: one JSON line per update and event
PIDS_DIR = "pids"  # each rank writes pids/slot{N}.json: who to kill
PORTS_ENV = "LABKIT_CAPSTONE_PORTS"  # the metrics port of every slot, comma-separated
RANK_SCRIPT = rank_script(__name__)
REPORT_FILE, FIGURE_FILE = "capstone_report.json", "capstone_report.png"


@dataclass(frozen=True)
class RedisKeys:
    """Every Redis key of one capstone run lives under ``namespace`` (the torchrun run id)."""

    namespace: str

    @property
    def generation(self) -> str:
        return f"{self.namespace}:generation"  # INCR by each learner that starts

    @property
    def lease(self) -> str:
        return f"{self.namespace}:learner-lease"

    @property
    def collected(self) -> str:
        return f"{self.namespace}:collected"  # hash: slot -> env steps pushed (HINCRBY)

    def starts(self, slot: int | str) -> str:
        return f"{self.namespace}:starts:{slot}"  # INCR by each incarnation of a slot

    def seq(self, slot: int) -> str:
        return f"{self.namespace}:seq:{slot}"  # INCR per rollout: the next sequence number


def redis_keys(run_id: str) -> RedisKeys:
    return RedisKeys(f"capstone:{run_id}")


@dataclass
class CapstoneConfig:
    """One capstone run. ``steps`` is the budget of env steps the learner trains on."""

    nodes: int = 3
    ranks_per_node: int = 2
    min_nodes: int = 3  # below ``nodes``: an elastic job (torchrun --nnodes=MIN:MAX)
    steps: int = 150_000
    kill_slot: int | None = 3  # node 1, local rank 1: an actor; 0 kills the learner; None: none
    kill_at_update: int = 30
    checkpoint_every_updates: int | None = 10  # after every N-th learner update ...
    checkpoint_every_s: float | None = None  # ... or every S seconds; neither: only at the end
    max_restarts: int = 2
    learner_batch: int = 0  # rollouts per update; 0 = one per actor
    max_inflight: int = 2  # rollouts an actor may be ahead of the learner
    staleness: StalenessConfig = field(default_factory=lambda: StalenessConfig("vtrace"))
    hyper: Hyper = field(default_factory=lambda: Hyper(envs_per_agent=4))
    lease_ttl_s: float = 10.0  # the learner's lease: renewed every 0.25 s
    learner_timeout_s: float = 30.0  # actors stop when the learner is silent this long
    seed: int = 0
    timeout_s: float = 600.0  # the whole launch
    workdir: str = ""  # checkpoints and the progress log (set by run_capstone)

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks_per_node

    @property
    def actors(self) -> int:
        return self.world_size - 1

    @property
    def batch_rollouts(self) -> int:
        return self.learner_batch or self.actors

    @property
    def steps_per_update(self) -> int:
        return self.batch_rollouts * self.hyper.envs_per_agent * self.hyper.rollout_len

    @property
    def expected_updates(self) -> int:
        return math.ceil(self.steps / self.steps_per_update)

    def validate(self) -> None:
        """Raises ParameterError for a run that cannot work, before anything starts."""
        if self.nodes < 1 or self.ranks_per_node < 1 or self.world_size < 2:
            raise ParameterError("need at least 2 ranks (a learner and an actor): "
                                 f"nodes={self.nodes}, ranks_per_node={self.ranks_per_node}")
        if not 1 <= self.min_nodes <= self.nodes:
            raise ParameterError(f"min_nodes must be in 1..nodes ({self.nodes}), "
                                 f"got {self.min_nodes}")
        if self.kill_slot is not None:
            if not 0 <= self.kill_slot < self.world_size:
                raise ParameterError(f"kill_slot must be a slot in 0..{self.world_size - 1} "
                                     f"(node * ranks_per_node + local rank), got {self.kill_slot}")
            if self.max_restarts < 1:
                raise ParameterError("a kill needs max_restarts >= 1, or the job just ends")
            if not 1 <= self.kill_at_update < self.expected_updates:
                raise ParameterError(
                    f"kill_at_update must be in 1..{self.expected_updates - 1}: {self.steps} "
                    f"steps at {self.steps_per_update} per update make about "
                    f"{self.expected_updates} updates")
        if self.max_restarts < 0 or self.max_inflight < 1:
            raise ParameterError("need max_restarts >= 0 and max_inflight >= 1")
        cadence_of(self).validate()
        if self.learner_batch < 0 or self.steps < 1:
            raise ParameterError("need learner_batch >= 0 and steps >= 1")
        if self.lease_ttl_s < 1 or self.learner_timeout_s <= 0 or self.timeout_s <= 0:
            raise ParameterError("need lease_ttl_s >= 1 (renewed every 0.25 s) and positive "
                                 "timeouts")
        h = self.hyper
        if h.envs_per_agent < 1 or h.rollout_len < 2 or h.hidden < 1 or h.lr <= 0:
            raise ParameterError("need envs_per_agent >= 1, rollout_len >= 2, hidden >= 1, lr > 0")
        self.staleness.validate()

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> CapstoneConfig:
        raw = json.loads(text)
        raw["staleness"] = StalenessConfig(**raw["staleness"])
        raw["hyper"] = Hyper(**raw["hyper"])
        return cls(**raw)


@dataclass(frozen=True)
class Kill:
    """What the launcher did: SIGKILL to ``slot``'s process once the learner reached ``update``."""

    slot: int
    node: int
    rank: int
    pid: int
    update: int
    t: float  # unix time


class _KillScheduler:
    """``on_tick``: follows the learner's log (reading only what is new) and kills the rank."""

    def __init__(self, cfg: CapstoneConfig, log: Path, pids: Path) -> None:
        self.cfg, self.tail, self.pids = cfg, LogTail(log), pids
        self.update = 0
        self.kill: Kill | None = None

    def __call__(self, fleet: Fleet) -> None:
        if self.cfg.kill_slot is None or self.kill is not None:
            return
        for record in self.tail.new_records():
            self.update = max(self.update, int(record.get("update", 0)))
        if self.update < self.cfg.kill_at_update:
            return
        who = json.loads((self.pids / f"slot{self.cfg.kill_slot}.json").read_text())
        fleet.kill_rank(who["node"], who["pid"])
        self.kill = Kill(self.cfg.kill_slot, who["node"], who["rank"], who["pid"], self.update,
                         time.time())


def _free_ports(n: int) -> list[int]:
    from labkit.runtime.ports import free_port

    ports: list[int] = []
    while len(ports) < n:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


def run_capstone(cfg: CapstoneConfig | None = None, *, with_prometheus: bool = True,
                 echo: Echo | None = None, out_dir: str | os.PathLike[str] | None = None
                 ) -> CapstoneReport:
    """Runs the capstone as a real torchrun job and returns its report (also saved as JSON and
    PNG in ``out_dir`` when given). Redis is ``$REDIS_URL`` or a server started for the run;
    Prometheus is the real binary when installed (else the report says so and uses the
    learner's log alone). Nothing the run started outlives it."""
    from labkit.observability.rules import RULES_FILE
    from labkit.runtime.launch import launch_local
    from labkit.services.prometheus import PrometheusServer, ScrapeTarget
    from labkit.services.servers import HOST, REDIS_URL_ENV, RedisServer
    from labkit.training.train import REDIS_ENV

    cfg = CapstoneConfig.from_json((cfg or CapstoneConfig()).to_json())  # ours to set workdir
    cfg.validate()
    scratch = Path(tempfile.mkdtemp(prefix="labkit-capstone-"))
    cfg.workdir = str(scratch / "work")
    Path(cfg.workdir).mkdir()
    run_dir = scratch / "run"
    ports = _free_ports(cfg.world_size)
    use_prom, note = False, "with_prometheus=False: the report uses the learner's log alone"
    if with_prometheus:
        use_prom, found = PrometheusServer.available()
        note = (f"a real Prometheus ({found}) scraped every rank each second" if use_prom
                else f"{found}; the report uses the learner's log alone")
    server = prom = None
    scheduler = _KillScheduler(cfg, Path(cfg.workdir) / LOG_FILE, run_dir / PIDS_DIR)
    series: dict[str, list[list[float]]] = {}
    alerts: list[dict[str, Any]] = []
    try:
        url = os.environ.get(REDIS_URL_ENV)
        if not url:
            server = RedisServer().start()
            url = server.url
        if use_prom:
            rpn = cfg.ranks_per_node
            prom = PrometheusServer(targets=[
                ScrapeTarget(f"{HOST}:{port}", {"rank": str(slot), "node": str(slot // rpn),
                                                "role": "learner" if slot == 0 else "actor"})
                for slot, port in enumerate(ports)], rule_files=[RULES_FILE]).start()
        started = time.time()
        result = launch_local(
            RANK_SCRIPT, cfg.to_json(), nnodes=cfg.min_nodes,
            max_nnodes=cfg.nodes if cfg.min_nodes < cfg.nodes else None,
            nodes_started=cfg.nodes, nproc_per_node=cfg.ranks_per_node,
            max_restarts=cfg.max_restarts, timeout_s=cfg.timeout_s, echo=echo, run_dir=run_dir,
            on_tick=scheduler, env={REDIS_ENV: url, PORTS_ENV: ",".join(map(str, ports))})
        ended = time.time()
        log = read_records(Path(cfg.workdir) / LOG_FILE)
        if prom is not None:  # up to the learner's last record: ranks exiting is not an outage
            last = max((r["t"] for r in log), default=ended)
            series, alerts = _prometheus_history(prom, started, min(ended, last + 1.0))
    finally:
        if prom is not None:
            prom.stop()
        if server is not None:
            server.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    if not isinstance(result.published, dict):
        result.check()  # the failing rank's traceback, if one failed
        raise LaunchError("the learner published no result; last output:\n"
                          + "\n".join(result.output[-20:]))
    report = build_report(cfg, log, result.published, scheduler.kill, started, ended,
                          source="prometheus" if use_prom else "log", note=note, series=series,
                          alerts=alerts, failures=len(result.failures),
                          endpoints=[f"{HOST}:{p}" for p in ports])
    if out_dir is not None:
        report.save(out_dir)
    return report


PROMQL = {
    "collected_steps_per_s": 'sum(rate(labkit_env_steps_total{role="actor"}[3s]))',
    "trained_steps_per_s": 'sum(rate(labkit_env_steps_total{role="learner"}[3s]))',
    "ranks_up": 'sum(up{job="labkit"})',
    "policy_lag": 'max(labkit_policy_lag_steps{role="learner"})',
}


def _prometheus_history(prom: Any, start: float, end: float
                        ) -> tuple[dict[str, list[list[float]]], list[dict[str, Any]]]:
    """Each PROMQL series over the run (seconds from ``start``, value), and the alerts that
    went pending or fired (Prometheus' own ALERTS series), as stretches of time with the ranks
    they concerned."""
    series = {}
    for name, expr in PROMQL.items():
        result = prom.query_range(expr, start, end, 1.0)
        values = result[0]["values"] if result else []
        series[name] = [[round(float(t) - start, 2), float(v)] for t, v in values
                        if v not in ("NaN", "+Inf", "-Inf")]
    stretches = []  # (alert, state, rank, from, to): one per rank and unbroken stretch
    for entry in prom.query_range("ALERTS", start, end, 1.0):
        labels = entry["metric"]
        for begin, stop in _runs([float(t) - start for t, _ in entry["values"]]):
            stretches.append((labels.get("alertname", ""), labels.get("alertstate", ""),
                              labels.get("rank", ""), begin, stop))
    alerts: list[dict[str, Any]] = []  # stretches of the same alert and state that overlap
    for alert, state, rank, begin, stop in sorted(stretches, key=lambda s: (s[0], s[1], s[3])):
        last = alerts[-1] if alerts else None
        same = last is not None and (last["alert"], last["state"]) == (alert, state)
        if same and begin <= last["to_s"] + 1.5:
            last["ranks"] = sorted({*last["ranks"], rank}, key=lambda r: (len(r), r))
            last["to_s"] = round(max(last["to_s"], stop), 1)
        else:
            alerts.append({"alert": alert, "state": state, "ranks": [rank],
                           "from_s": round(begin, 1), "to_s": round(stop, 1)})
    return series, sorted(alerts, key=lambda a: (a["from_s"], a["alert"], a["state"]))


def _runs(times: list[float], gap_s: float = 1.5) -> list[tuple[float, float]]:
    """Sorted sample times as (first, last) of each stretch without a gap over ``gap_s``."""
    runs: list[tuple[float, float]] = []
    for t in sorted(times):
        if runs and t - runs[-1][1] <= gap_s:
            runs[-1] = (runs[-1][0], t)
        else:
            runs.append((t, t))
    return runs


def _with_breaks(points: list[list[float]], gap_s: float = 1.5) -> tuple[list[float], list[float]]:
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


# --------------------------------------------------------------------------------------------
# The report


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
                    bx.plot(*_with_breaks(pts), style, label=name.replace("_", " "))
            up = series.get("ranks_up", [])
            if up:
                twin = bx.twinx()
                twin.plot(*_with_breaks(up), ":", color="C3", label="ranks up")
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


def _pct(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


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
            "mean": round(statistics.fmean(lags), 3), "p50": _pct(lags, 0.5),
            "p90": _pct(lags, 0.9), "max": lags[-1],
            "p50_age_s": round(_pct(ages, 0.5), 4), "p90_age_s": round(_pct(ages, 0.9), 4),
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


# --------------------------------------------------------------------------------------------
# CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = CapstoneConfig()
    parser.add_argument("--nodes", type=int, default=d.nodes)
    parser.add_argument("--ranks-per-node", type=int, default=d.ranks_per_node)
    parser.add_argument("--min-nodes", type=int, default=d.min_nodes,
                        help="below --nodes: an elastic job")
    parser.add_argument("--steps", type=int, default=d.steps, help="env steps to train on")
    parser.add_argument("--kill-slot", type=int, default=d.kill_slot,
                        help="node * ranks_per_node + local rank; -1: no kill")
    parser.add_argument("--kill-at-update", type=int, default=d.kill_at_update)
    add_cadence_arguments(parser, default_updates=d.checkpoint_every_updates,
                          what="learner update")
    parser.add_argument("--max-restarts", type=int, default=d.max_restarts)
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument("--timeout", type=float, default=d.timeout_s)
    parser.add_argument("--no-prometheus", action="store_true")
    parser.add_argument("--out", help="write capstone_report.json and .png here")
    parser.add_argument("--json", action="store_true", help="print the whole report")


def run(args: argparse.Namespace) -> int:
    """``labkit capstone``."""
    cfg = CapstoneConfig(
        nodes=args.nodes, ranks_per_node=args.ranks_per_node, min_nodes=args.min_nodes,
        steps=args.steps, kill_slot=None if args.kill_slot < 0 else args.kill_slot,
        kill_at_update=args.kill_at_update,
        **cadence_fields(args, CapstoneConfig.checkpoint_every_updates),
        max_restarts=args.max_restarts, seed=args.seed, timeout_s=args.timeout)
    report = run_capstone(cfg, with_prometheus=not args.no_prometheus,
                          echo=None if args.json else print, out_dir=args.out)
    print(json.dumps(report.to_dict() if args.json else report.summary(), indent=2))
    return 0


__all__ = ["CapstoneConfig", "CapstoneReport", "Kill", "build_report",
           "redis_keys", "run_capstone"]
