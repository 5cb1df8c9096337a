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
    dead_after_s,
    DRAIN_S,
    Heartbeat,
    JOB_ENV,
    PREFIX,
    spawn_agent,
    STATES,
    STATUS_TIMEOUT_S,
    STOP_GRACE_S,
    URL_ENV,
)
from labkit.orchestration.coordination import (
    CoordinationRow,
    DEFAULT_SAMPLES,
    DEFAULT_WARMUP,
    format_table,
    GUIDE_FIGURES,
    measure_coordination,
    NATS_ENV,
    NATS_TRANSPORTS,
    parse_transports,
    REDIS_ENV,
    REDIS_TRANSPORTS,
    summarize,
    TRANSPORTS,
)
from labkit.orchestration.detection import (
    DetectionResult,
    measure_detection,
)
from labkit.orchestration.elastic import (
    ChangeOutcome,
    ChangeRow,
    check_plan,
    elastic_limit_s,
    ElasticConfig,
    ElasticRun,
    Hold,
    Horizon,
    NodeChange,
    parse_changes,
    read_horizon,
    read_progress,
    reference_loss,
    run_elastic,
    Segment,
    write_horizon,
)
from labkit.orchestration.election import (
    ALIVE_S,
    decide,
    election_experiment,
    ElectionResult,
    ElectionSample,
    format_election,
    HEARTBEAT_PORT,
    INTERVAL_S,
    majority,
    Phase,
    PHASE_LIMIT_S,
    RULES,
    STARTUP_LIMIT_S,
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
    cut,
    heal,
    heal_quietly,
    PartitionError,
    require_lab,
)
from labkit.orchestration.partition import (
    AFTER_CUT_SLACK_S,
    collective_partition,
    CollectiveResult,
    format_collective,
    ITERATION_PAUSE_S,
    RankOutcome,
    WARMUP_ITERATIONS,
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
