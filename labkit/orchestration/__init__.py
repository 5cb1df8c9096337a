"""Orchestration (lesson 12): who is alive, who leads, and what happens when nodes come and go.

- ``control``, ``fleet``, ``detection``: agent heartbeats in Redis (states, TTLs), the fleet as
  the control plane sees it, and how long a dead agent takes to show ``dead``;
  ``control_agent`` is a toy agent process and the ``labkit agents`` command.
- ``elastic`` (ranks: ``elastic_rank.py``): torchrun's elastic agent on MIN..MAX simulated nodes
  that join, are preempted, killed or frozen mid-run; steps lost and stalls per change.
- ``election`` (members: ``election_member.py``), ``partition`` (ranks: ``partition_rank.py``),
  ``network_cut``: one node cut off the network for real, a naive and a quorum leader rule, and a
  gloo job that cannot survive the cut.
- ``coordination`` (ranks: ``coordination_rank.py``): round trips of TCPStore, barrier, Redis
  and NATS, the control plane's primitives.

::

    labkit elastic --min-nodes 1 --max-nodes 3 --changes join:2@10,preempt:2@60 --json
    labkit partition election --nodes 3 --rule quorum
    labkit agents status --job J
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from labkit.runtime.lazy import lazy_surface

if TYPE_CHECKING:  # what each name is, for readers and type checkers
    from labkit.orchestration.control import (
        DEAD,
        DRAIN_S,
        JOB_ENV,
        PREFIX,
        STATES,
        STATUS_TIMEOUT_S,
        STOP_GRACE_S,
        Heartbeat,
        dead_after_s,
        spawn_agent,
    )
    from labkit.orchestration.coordination import (
        DEFAULT_SAMPLES,
        DEFAULT_WARMUP,
        GUIDE_FIGURES,
        NATS_TRANSPORTS,
        REDIS_TRANSPORTS,
        TRANSPORTS,
        CoordinationRow,
        format_table,
        measure_coordination,
        parse_transports,
        summarize,
    )
    from labkit.orchestration.detection import (
        DetectionResult,
        measure_detection,
    )
    from labkit.orchestration.elastic import (
        EXIT_GRACE_S,
        HOLD_POLL_S,
        KEEP_ALIVE_WINDOW_S,
        REFORM_EXIT,
        ElasticConfig,
        elastic_limit_s,
        run_elastic,
    )
    from labkit.orchestration.elastic_plan import (
        HORIZON_FILE,
        Action,
        Horizon,
        NodeChange,
        check_plan,
        parse_changes,
        read_horizon,
        write_horizon,
    )
    from labkit.orchestration.elastic_report import (
        PROGRESS_FILE,
        ChangeOutcome,
        ChangeRow,
        ElasticRun,
        Hold,
        Segment,
        holds_of,
        read_progress,
        segments_of,
    )
    from labkit.orchestration.election import (
        ALIVE_S,
        HEARTBEAT_PORT,
        INTERVAL_S,
        PHASE_LIMIT_S,
        RULES,
        STARTUP_LIMIT_S,
        ElectionResult,
        ElectionSample,
        Phase,
        decide,
        election_experiment,
        format_election,
        majority,
        summarize_phase,
    )
    from labkit.orchestration.fleet import (
        AgentStatus,
        fleet_status,
        forget,
        format_fleet,
        status_main,
    )
    from labkit.orchestration.network_cut import (
        PartitionError,
        cut,
        heal,
        heal_quietly,
        require_lab,
    )
    from labkit.orchestration.partition import (
        AFTER_CUT_SLACK_S,
        ITERATION_PAUSE_S,
        WARMUP_ITERATIONS,
        CollectiveResult,
        RankOutcome,
        collective_partition,
        format_collective,
    )

# name -> the module that defines it: a name is imported when first used,
# so importing one module of the folder (a rank script, a child process) imports no other
_HOME = {
    "Action": "labkit.orchestration.elastic_plan",
    "AFTER_CUT_SLACK_S": "labkit.orchestration.partition",
    "AgentStatus": "labkit.orchestration.fleet",
    "ALIVE_S": "labkit.orchestration.election",
    "ChangeOutcome": "labkit.orchestration.elastic_report",
    "ChangeRow": "labkit.orchestration.elastic_report",
    "check_plan": "labkit.orchestration.elastic_plan",
    "collective_partition": "labkit.orchestration.partition",
    "CollectiveResult": "labkit.orchestration.partition",
    "CoordinationRow": "labkit.orchestration.coordination",
    "cut": "labkit.orchestration.network_cut",
    "DEAD": "labkit.orchestration.control",
    "dead_after_s": "labkit.orchestration.control",
    "decide": "labkit.orchestration.election",
    "DEFAULT_SAMPLES": "labkit.orchestration.coordination",
    "DEFAULT_WARMUP": "labkit.orchestration.coordination",
    "DetectionResult": "labkit.orchestration.detection",
    "DRAIN_S": "labkit.orchestration.control",
    "elastic_limit_s": "labkit.orchestration.elastic",
    "ElasticConfig": "labkit.orchestration.elastic",
    "ElasticRun": "labkit.orchestration.elastic_report",
    "election_experiment": "labkit.orchestration.election",
    "ElectionResult": "labkit.orchestration.election",
    "ElectionSample": "labkit.orchestration.election",
    "EXIT_GRACE_S": "labkit.orchestration.elastic",
    "fleet_status": "labkit.orchestration.fleet",
    "forget": "labkit.orchestration.fleet",
    "format_collective": "labkit.orchestration.partition",
    "format_election": "labkit.orchestration.election",
    "format_fleet": "labkit.orchestration.fleet",
    "format_table": "labkit.orchestration.coordination",
    "GUIDE_FIGURES": "labkit.orchestration.coordination",
    "heal": "labkit.orchestration.network_cut",
    "heal_quietly": "labkit.orchestration.network_cut",
    "Heartbeat": "labkit.orchestration.control",
    "HEARTBEAT_PORT": "labkit.orchestration.election",
    "Hold": "labkit.orchestration.elastic_report",
    "HOLD_POLL_S": "labkit.orchestration.elastic",
    "holds_of": "labkit.orchestration.elastic_report",
    "Horizon": "labkit.orchestration.elastic_plan",
    "HORIZON_FILE": "labkit.orchestration.elastic_plan",
    "INTERVAL_S": "labkit.orchestration.election",
    "ITERATION_PAUSE_S": "labkit.orchestration.partition",
    "JOB_ENV": "labkit.orchestration.control",
    "KEEP_ALIVE_WINDOW_S": "labkit.orchestration.elastic",
    "majority": "labkit.orchestration.election",
    "measure_coordination": "labkit.orchestration.coordination",
    "measure_detection": "labkit.orchestration.detection",
    "NATS_TRANSPORTS": "labkit.orchestration.coordination",
    "NodeChange": "labkit.orchestration.elastic_plan",
    "parse_changes": "labkit.orchestration.elastic_plan",
    "parse_transports": "labkit.orchestration.coordination",
    "PartitionError": "labkit.orchestration.network_cut",
    "Phase": "labkit.orchestration.election",
    "PHASE_LIMIT_S": "labkit.orchestration.election",
    "PREFIX": "labkit.orchestration.control",
    "PROGRESS_FILE": "labkit.orchestration.elastic_report",
    "RankOutcome": "labkit.orchestration.partition",
    "read_horizon": "labkit.orchestration.elastic_plan",
    "read_progress": "labkit.orchestration.elastic_report",
    "REDIS_TRANSPORTS": "labkit.orchestration.coordination",
    "REFORM_EXIT": "labkit.orchestration.elastic",
    "require_lab": "labkit.orchestration.network_cut",
    "RULES": "labkit.orchestration.election",
    "run_elastic": "labkit.orchestration.elastic",
    "Segment": "labkit.orchestration.elastic_report",
    "segments_of": "labkit.orchestration.elastic_report",
    "spawn_agent": "labkit.orchestration.control",
    "STARTUP_LIMIT_S": "labkit.orchestration.election",
    "STATES": "labkit.orchestration.control",
    "status_main": "labkit.orchestration.fleet",
    "STATUS_TIMEOUT_S": "labkit.orchestration.control",
    "STOP_GRACE_S": "labkit.orchestration.control",
    "summarize": "labkit.orchestration.coordination",
    "summarize_phase": "labkit.orchestration.election",
    "TRANSPORTS": "labkit.orchestration.coordination",
    "WARMUP_ITERATIONS": "labkit.orchestration.partition",
    "write_horizon": "labkit.orchestration.elastic_plan",
}
__all__ = sorted(_HOME)
__getattr__, __dir__ = lazy_surface(__name__, _HOME)
