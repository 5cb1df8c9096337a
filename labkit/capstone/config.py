"""The capstone's contract, shared by the driver and its ranks: the config, the Redis keys of one run,
the planned kill, and the names of the files and variables the ranks use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from labkit.errors import ParameterError
from labkit.reliability.cadence import cadence_of
from labkit.rl.hyper import Hyper
from labkit.rl.staleness import StalenessConfig
from labkit.runtime.config import from_json, to_json

if TYPE_CHECKING:
    pass

LOG_FILE = "capstone.jsonl"  # the learner's progress log: one JSON line per update and event

PIDS_DIR = "pids"  # each rank writes pids/slot{N}.json: who to kill

PORTS_ENV = "LABKIT_CAPSTONE_PORTS"  # the metrics port of every slot, comma-separated

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

    nodes: int = 3  # simulated nodes, one torchrun agent each
    ranks_per_node: int = 2  # ranks per node; slot 0 (node 0, local rank 0) is the learner
    min_nodes: int = 3  # below nodes: an elastic job (torchrun --nnodes=MIN:MAX)
    steps: int = 150_000  # env steps the learner trains on
    kill_slot: int | None = 3  # node * ranks_per_node + local rank to SIGKILL (3: an actor; 0: the learner; -1: none)
    kill_at_update: int = 30  # ... once the learner reached this update
    checkpoint_every_updates: int | None = 10  # after every N-th learner update ...
    checkpoint_every_s: float | None = None  # ... or every S seconds; neither: only at the end
    max_restarts: int = 2  # torchrun restarts after a rank dies
    learner_batch: int = 0  # rollouts per update; 0 = one per actor
    max_inflight: int = 2  # rollouts an actor may be ahead of the learner
    staleness: StalenessConfig = field(default_factory=lambda: StalenessConfig("vtrace"))
    hyper: Hyper = field(default_factory=lambda: Hyper(envs_per_agent=4))
    lease_ttl_s: float = 10.0  # the learner's lease: renewed every 0.25 s
    learner_timeout_s: float = 30.0  # actors stop when the learner is silent this long
    seed: int = 0  # seeds every actor's environments and the model
    learner_device: str = ""  # the learner's torch device, e.g. cuda:0 ("": the one dist.setup gives its rank)
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
        self.hyper.validate()
        self.staleness.validate()

    def to_json(self) -> str:
        return to_json(self)

    @classmethod
    def from_json(cls, text: str) -> CapstoneConfig:
        return from_json(cls, text)


@dataclass(frozen=True)
class Kill:
    """What the launcher did: SIGKILL to ``slot``'s process once the learner reached ``update``."""

    slot: int
    node: int
    rank: int
    pid: int
    update: int
    t: float  # unix time
