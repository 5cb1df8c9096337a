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

from labkit.orchestration.control import (
    DEAD,
    DRAIN_S,
    JOB_ENV,
    PREFIX,
    STATES,
    STATUS_TIMEOUT_S,
    STOP_GRACE_S,
    URL_ENV,
    Heartbeat,
    dead_after_s,
    spawn_agent,
)
from labkit.orchestration.coordination import (
    DEFAULT_SAMPLES,
    DEFAULT_WARMUP,
    GUIDE_FIGURES,
    NATS_ENV,
    NATS_TRANSPORTS,
    REDIS_ENV,
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
    ChangeOutcome,
    ChangeRow,
    ElasticConfig,
    ElasticRun,
    Hold,
    Horizon,
    NodeChange,
    Segment,
    check_plan,
    elastic_limit_s,
    parse_changes,
    read_horizon,
    read_progress,
    reference_loss,
    run_elastic,
    write_horizon,
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

__all__ = [
    "AFTER_CUT_SLACK_S",
    "AgentStatus",
    "ALIVE_S",
    "ChangeOutcome",
    "ChangeRow",
    "check_plan",
    "collective_partition",
    "CollectiveResult",
    "CoordinationRow",
    "cut",
    "DEAD",
    "dead_after_s",
    "decide",
    "DEFAULT_SAMPLES",
    "DEFAULT_WARMUP",
    "DetectionResult",
    "DRAIN_S",
    "elastic_limit_s",
    "ElasticConfig",
    "ElasticRun",
    "election_experiment",
    "ElectionResult",
    "ElectionSample",
    "fleet_status",
    "forget",
    "format_collective",
    "format_election",
    "format_fleet",
    "format_table",
    "GUIDE_FIGURES",
    "heal",
    "heal_quietly",
    "Heartbeat",
    "HEARTBEAT_PORT",
    "Hold",
    "Horizon",
    "INTERVAL_S",
    "ITERATION_PAUSE_S",
    "JOB_ENV",
    "majority",
    "measure_coordination",
    "measure_detection",
    "NATS_ENV",
    "NATS_TRANSPORTS",
    "NodeChange",
    "parse_changes",
    "parse_transports",
    "PartitionError",
    "Phase",
    "PHASE_LIMIT_S",
    "PREFIX",
    "RankOutcome",
    "read_horizon",
    "read_progress",
    "REDIS_ENV",
    "REDIS_TRANSPORTS",
    "reference_loss",
    "require_lab",
    "RULES",
    "run_elastic",
    "Segment",
    "spawn_agent",
    "STARTUP_LIMIT_S",
    "STATES",
    "status_main",
    "STATUS_TIMEOUT_S",
    "STOP_GRACE_S",
    "summarize",
    "summarize_phase",
    "TRANSPORTS",
    "URL_ENV",
    "WARMUP_ITERATIONS",
    "write_horizon",
]
