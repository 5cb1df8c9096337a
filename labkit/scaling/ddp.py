"""DDP for agents, done right: what ``gradient_as_bucket_view`` saves, and DDP vs FSDP for many
small independent agent models. Run-book::

    labkit bench ddp --nproc 2 --model-mb 64 --json             # both parts
    labkit bench ddp --part bucket-view --model-mb 64
    labkit bench ddp --part agents --agent-hidden 256 --steps 20 --modes local,ddp,fsdp,fsdp_root

``bucket-view``. DDP allreduces flat buckets, and those buckets are one copy of the gradients.
Without the option every ``p.grad`` is a tensor of its own, copied into its bucket before the
allreduce and back after: two copies. With ``gradient_as_bucket_view=True`` DDP makes each grad
a view into its bucket at the end of iteration 0 (autograd made the grads there), so from then
on there is one copy: the saving is about the gradient size (the guide's "1.8GB per GPU on our
7B model" is their number). Each mode is its own launch of ``nproc`` ranks (gloo), so memory
freed by one never hides in the other. Resident MB per rank over a warmed-up baseline, the max
over ranks; ranks run with ``MALLOC_MMAP_THRESHOLD_`` fixed at 1 MiB, so a freed tensor leaves
RSS instead of staying in malloc's heap. The view check is exact: every bucket's grads share
one storage of the bucket's size. CPU RSS counts touched pages: right after ``DDP(...)`` the
buckets are allocated but not yet resident.

``agents``. The guide: "Use DDP, FSDP adds 18% for 16 agents" (their number). Independent
agents each train their own policy: ``local`` (no communication) is what they need. DDP makes
the ranks one model with averaged gradients; FSDP shards one model too large for a device, so
for a small one it only adds collectives. All modes run in one launch on the same model, data
and steps: per step the slowest rank's time (a barrier before each step, untimed), median and
p90, and the collectives of one step counted as they reach the c10d dispatcher: payload bytes
(the full-size tensor of each call) and bus bytes (payload x nccl-tests' bus factor, what a ring
sends per rank). FSDP is FSDP2 ``fully_shard`` on a CPU device mesh with gloo, per Linear and
then the root (``fsdp``, the usual recipe) or on the root only (``fsdp_root``). Checks: DDP and
FSDP replicas agree and FSDP ends where DDP does; each FSDP rank holds ~1/N of the parameters.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from labkit.errors import LaunchError, ParameterError
from labkit.runtime.rank_script import rank_script

RANK_SCRIPT = rank_script(__name__)
AGENT_MODES = ("local", "ddp", "fsdp", "fsdp_root")
DEFAULT_AGENT_MODES = ("local", "ddp", "fsdp")
PARTS = ("all", "bucket-view", "agents")
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(1 << 20)}  # tensors >= 1 MiB: mmap, unmapped on free
FSDP_TOLERANCE = 1e-4  # FSDP vs DDP after the same steps: only summation order may differ


@dataclass
class BucketViewRow:
    """One launch: DDP with or without ``gradient_as_bucket_view``; RSS MB per rank, max."""

    world_size: int
    gradient_as_bucket_view: bool
    set_to_none: bool  # optimizer.zero_grad(set_to_none=...) between iterations
    layers: int  # Linear(1024, 1024) layers
    grad_mb: float  # one copy of the gradients (= parameters, float32)
    bucket_mb: float
    buckets: int
    grad_storage_mb: float  # distinct storages behind p.grad after step (the buckets with views)
    rss_built_mb: float  # after DDP(...): parameters
    rss_built_peak_mb: float  # DDP's broadcast of rank 0's parameters needs a flat copy
    rss_after_first_iter_mb: float
    rss_first_iter_peak_mb: float
    rss_rebuild_iter_peak_mb: float  # iteration 1: DDP rebuilds its buckets
    rss_steady_mb: float  # after the last iteration
    rss_peak_mb: float  # peak over iterations 2..4
    views_after_iter0: bool
    views_after_iter1: bool
    grads_are_bucket_views: bool  # after the last iteration


@dataclass
class AgentRow:
    """One mode of training a small agent policy; times are the slowest rank's per step."""

    world_size: int
    mode: str
    hidden: int
    batch: int
    steps: int
    params: int
    param_bytes: int
    local_param_fraction: float  # parameters held on a rank / model, max over ranks
    local_param_fraction_min: float
    step_ms_median: float
    step_ms_p90: float
    ratio_vs_ddp: float | None  # step_ms_median / ddp's
    collective_calls_per_step: int
    payload_bytes_per_step: int
    bus_bytes_per_step: int
    replicas_identical: bool  # every rank holds the same parameters after the steps
    max_abs_diff_vs_ddp: float | None  # FSDP modes: final parameters against DDP's
    collectives: dict[str, int] = field(default_factory=dict)


def _launch(config: dict[str, Any], nproc: int, timeout_s: float) -> list[dict]:
    from labkit.runtime.launch import launch_local

    result = launch_local(RANK_SCRIPT, json.dumps(config), nproc_per_node=nproc,
                          timeout_s=timeout_s, env=MALLOC_ENV, echo=None, check=True)
    got = result.published
    if not isinstance(got, list) or not got:
        raise LaunchError(f"ddp ranks published nothing; output:\n{result.output[-20:]}")
    return got


def _rounded(row: dict[str, Any], digits: int = 2, keep: tuple[str, ...] = ()) -> dict[str, Any]:
    """Floats rounded to ``digits``, except the keys in ``keep`` (tiny values that matter)."""
    return {k: round(v, digits) if isinstance(v, float) and k not in keep else v
            for k, v in row.items()}


def measure_bucket_view(nproc: int = 2, model_mb: float = 64,
                        gradient_as_bucket_view: bool = True, set_to_none: bool = True,
                        timeout_s: float = 600.0) -> BucketViewRow:
    """One launch of ``nproc`` ranks training an MLP of ``model_mb`` under DDP."""
    if nproc < 1 or model_mb <= 0:
        raise ParameterError(f"need nproc >= 1 and model_mb > 0, got {nproc} and {model_mb}")
    config = {"bench": "bucket_view", "model_mb": model_mb, "set_to_none": set_to_none,
              "gradient_as_bucket_view": gradient_as_bucket_view}
    got = _rounded(_launch(config, nproc, timeout_s)[0])
    names = {f.name for f in fields(BucketViewRow)}
    return BucketViewRow(**{k: v for k, v in got.items() if k in names},
                         gradient_as_bucket_view=gradient_as_bucket_view, set_to_none=set_to_none)


def measure_bucket_views(nproc: int = 2, model_mb: float = 64, set_to_none: bool = True
                         ) -> list[dict]:
    """Without, then with ``gradient_as_bucket_view``: two launches, as JSON-able dicts."""
    return [asdict(measure_bucket_view(nproc, model_mb, view, set_to_none))
            for view in (False, True)]


def bucket_view_saving(rows: list[dict]) -> dict[str, float]:
    """MB per rank the views save (without minus with), next to the gradient size."""
    off = next(r for r in rows if not r["gradient_as_bucket_view"])
    on = next(r for r in rows if r["gradient_as_bucket_view"])
    keys = ("rss_after_first_iter_mb", "rss_steady_mb", "rss_peak_mb")
    saved = {f"saved_{k[4:]}": round(off[k] - on[k], 2) for k in keys}
    return {"grad_mb": on["grad_mb"], **saved}


def measure_agents(nproc: int = 2, hidden: int = 256, batch: int = 64, steps: int = 20,
                   warmup: int = 5, modes: tuple[str, ...] | list[str] = DEFAULT_AGENT_MODES,
                   timeout_s: float = 600.0) -> list[dict]:
    """Every mode of ``modes`` in one launch of ``nproc`` ranks, as JSON-able dicts."""
    unknown = sorted(set(modes) - set(AGENT_MODES))
    if unknown or not modes:
        raise ParameterError(f"modes must be among {', '.join(AGENT_MODES)}, got {list(modes)}")
    if nproc < 1 or hidden < 1 or batch < 1 or steps < 1 or warmup < 0:
        raise ParameterError("need nproc, hidden, batch, steps >= 1 and warmup >= 0")
    ordered = [m for m in AGENT_MODES if m in modes]  # DDP before FSDP: its reference
    config = {"bench": "agents", "modes": ordered, "hidden": hidden, "batch": batch,
              "steps": steps, "warmup": warmup}
    got = _launch(config, nproc, timeout_s)
    ddp_ms = next((r["step_ms_median"] for r in got if r["mode"] == "ddp"), None)
    names = {f.name for f in fields(AgentRow)}
    rows = []
    for r in got:
        ratio = r["step_ms_median"] / ddp_ms if ddp_ms else None
        row = AgentRow(**{k: v for k, v in r.items() if k in names}, hidden=hidden, batch=batch,
                       steps=steps, ratio_vs_ddp=ratio)
        rows.append(_rounded(asdict(row), 3, keep=("max_abs_diff_vs_ddp",)))
    return rows


def problems(result: dict[str, Any]) -> list[str]:
    """What contradicts the design in a ``measure_ddp`` result (empty: all as expected)."""
    found = []
    for r in result.get("bucket_view", []):
        if r["grads_are_bucket_views"] != r["gradient_as_bucket_view"]:
            found.append(f"gradient_as_bucket_view={r['gradient_as_bucket_view']}: "
                         f"grads_are_bucket_views={r['grads_are_bucket_views']}")
    for r in result.get("agents", []):
        if r["mode"] != "local" and not r["replicas_identical"]:
            found.append(f"{r['mode']}: ranks hold different parameters after the steps")
        diff = r["max_abs_diff_vs_ddp"]
        if diff is not None and diff > FSDP_TOLERANCE:
            found.append(f"{r['mode']}: parameters differ from DDP's by {diff:.3g}")
        if r["mode"].startswith("fsdp") and r["world_size"] > 1 \
                and r["local_param_fraction"] > 1.5 / r["world_size"]:
            found.append(f"{r['mode']}: a rank holds {r['local_param_fraction']:.0%} of the model")
    return found


def measure_ddp(part: str = "all", nproc: int = 2, model_mb: float = 64, hidden: int = 256,
                batch: int = 64, steps: int = 20, warmup: int = 5,
                modes: tuple[str, ...] | list[str] = DEFAULT_AGENT_MODES,
                set_to_none: bool = True) -> dict[str, Any]:
    """Both parts (or one): ``{"bucket_view": rows, "bucket_view_saving": {...}, "agents":
    rows}``."""
    if part not in PARTS:
        raise ParameterError(f"part must be one of {', '.join(PARTS)}, got {part!r}")
    result: dict[str, Any] = {}
    if part in ("all", "bucket-view"):
        result["bucket_view"] = measure_bucket_views(nproc, model_mb, set_to_none)
        result["bucket_view_saving"] = bucket_view_saving(result["bucket_view"])
    if part in ("all", "agents"):
        result["agents"] = measure_agents(nproc, hidden, batch, steps, warmup, modes)
    return result


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``labkit bench ddp``."""
    parser.add_argument("--part", default="all", choices=PARTS, help="which measurement")
    parser.add_argument("--nproc-per-node", "--nproc", dest="nproc", type=int, default=2,
                        help="ranks (agents) on this node")
    parser.add_argument("--model-mb", type=float, default=64,
                        help="bucket-view: float32 parameters of the MLP, MB")
    parser.add_argument("--zero-grad-in-place", action="store_true",
                        help="bucket-view: zero_grad(set_to_none=False) instead of None")
    parser.add_argument("--agent-hidden", type=int, default=256, help="agents: hidden width")
    parser.add_argument("--agent-batch", type=int, default=64, help="agents: batch per rank")
    parser.add_argument("--steps", type=int, default=20, help="agents: timed steps per mode")
    parser.add_argument("--warmup", type=int, default=5, help="agents: untimed steps first")
    parser.add_argument("--modes", default=",".join(DEFAULT_AGENT_MODES),
                        help=f"agents: comma-separated, of {','.join(AGENT_MODES)}")
    parser.add_argument("--json", action="store_true", help="print JSON")


def _table(rows: list[dict], cols: tuple[str, ...]) -> None:
    width = max(len(c) for c in cols)
    print("  ".join(f"{c:>{width}}" for c in cols))
    for row in rows:
        print("  ".join(f"{row[c]!s:>{width}}" for c in cols))


def run(args: argparse.Namespace) -> int:
    """``labkit bench ddp``; exit status 1 when a check in :func:`problems` fails."""
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    result = measure_ddp(args.part, args.nproc, args.model_mb, args.agent_hidden,
                         args.agent_batch, args.steps, args.warmup, modes,
                         set_to_none=not args.zero_grad_in_place)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        if "bucket_view" in result:
            _table(result["bucket_view"], ("gradient_as_bucket_view", "grad_mb",
                                           "rss_after_first_iter_mb", "rss_steady_mb",
                                           "rss_peak_mb", "grads_are_bucket_views"))
            print("saved per rank:", result["bucket_view_saving"], "\n")
        if "agents" in result:
            _table(result["agents"], ("mode", "step_ms_median", "step_ms_p90", "ratio_vs_ddp",
                                      "collective_calls_per_step", "bus_bytes_per_step",
                                      "local_param_fraction", "replicas_identical"))
    found = problems(result)
    for problem in found:
        print(f"check failed: {problem}", file=sys.stderr)
    return 1 if found else 0
