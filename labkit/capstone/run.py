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
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from labkit.errors import LaunchError
from labkit.reliability.cadence import add_cadence_arguments, cadence_fields
from labkit.runtime.fleet import Fleet
from labkit.runtime.launch import Echo
from labkit.runtime.rank_script import rank_script
from labkit.runtime.runlog import LogTail, read_records

if TYPE_CHECKING:
    pass
from labkit.capstone.config import LOG_FILE, PIDS_DIR, PORTS_ENV, CapstoneConfig, Kill
from labkit.capstone.report import CapstoneReport, build_report, contiguous_runs
from labkit.rl.staleness import METHODS
from labkit.runtime.config import add_config_arguments, config_from_args

RANK_SCRIPT = rank_script(__name__)


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
    from labkit.services.base import CHILD_REDIS_URL_ENV, HOST
    from labkit.services.prometheus import PrometheusServer, ScrapeTarget
    from labkit.services.redis_server import REDIS_URL_ENV, RedisServer

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
            on_tick=scheduler, env={CHILD_REDIS_URL_ENV: url, PORTS_ENV: ",".join(map(str, ports))})
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
        for begin, stop in contiguous_runs([float(t) - start for t, _ in entry["values"]]):
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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``labkit capstone``: one per ``CapstoneConfig`` field, its comment as help."""
    add_config_arguments(
        parser, CapstoneConfig, skip=("workdir", "checkpoint_every_updates", "checkpoint_every_s"),
        flags={"nodes": "--nnodes", "ranks_per_node": "--nproc-per-node", "timeout_s": "--timeout",
               "method": "--staleness"},
        aliases={"nodes": ["--nodes"], "ranks_per_node": ["--ranks-per-node"]},
        choices={"method": METHODS})
    add_cadence_arguments(parser, default_updates=CapstoneConfig.checkpoint_every_updates,
                          what="learner update")
    parser.add_argument("--no-prometheus", action="store_true")
    parser.add_argument("--out", help="write capstone_report.json and .png here")
    parser.add_argument("--json", action="store_true", help="print the whole report")


def run(args: argparse.Namespace) -> int:
    """``labkit capstone``."""
    kill_slot = None if args.kill_slot is None or args.kill_slot < 0 else args.kill_slot
    cfg = config_from_args(CapstoneConfig, args, kill_slot=kill_slot,
                           **cadence_fields(args, CapstoneConfig.checkpoint_every_updates))
    report = run_capstone(cfg, with_prometheus=not args.no_prometheus,
                          echo=None if args.json else print, out_dir=args.out)
    print(json.dumps(report.to_dict() if args.json else report.summary(), indent=2))
    return 0
