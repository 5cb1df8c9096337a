"""The seven GPU checks (lesson 11's, ``hang``, lives in ``hang_check``): each runs one CUDA/NCCL path the course relies on, small, and says what
it measured.

A check is a function of a :class:`Context` (how many GPUs, its deadline) that returns a one-line
summary and its measured details, or raises :class:`CheckFailed` (what is wrong, with the
details) or :class:`CheckSkipped`. Any other exception is a failure too: ``labkit.gpu.check``
turns it into one line. Every job is a real torchrun launch through labkit's launcher, with
one rank per local GPU; nothing a check starts outlives it.
"""

from __future__ import annotations

import importlib.util
import math
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from labkit.gpu.hang_check import hang_on_nccl
from labkit.gpu.jobs import run_job
from labkit.gpu.outcome import CheckFailed, CheckSkipped, Context, Outcome  # noqa: F401 (surface)
from labkit.gpu.outcome import fail_if as _fail_if
from labkit.runtime.dist import BACKEND_ENV

if TYPE_CHECKING:
    from labkit.capstone.config import CapstoneConfig
    from labkit.capstone.report import CapstoneReport
    from labkit.collectives.bench import CollectivesReport

BENCH_MIN, BENCH_MAX, BENCH_FACTOR = "1K", "16M", 4  # 8 sizes per collective
BENCH_ITERS, BENCH_WARMUP = 10, 2
EVENT_ITERS, EVENT_WARMUP = 20, 5
DDP_MODEL_MB, DDP_ITERS = 64, 5
CAPSTONE_STEPS = 2560  # 1 actor x 4 envs x 32 steps a rollout: 20 learner updates
VIEW_SAVING_MIN = 0.5  # of one gradient copy: lesson 08 says views save about one copy
EXCERPT_LINES = 20


def dist_setup(ctx: Context) -> Outcome:
    """``dist.setup()`` picks nccl and a GPU of its own for each rank; an all_reduce is right."""
    got, launch = run_job("setup", nproc=ctx.nproc, timeout_s=ctx.left(), env={BACKEND_ENV: ""})
    return judge_setup(got, ctx.gpus, launch.seconds)


def judge_setup(got: dict[str, Any], gpus: int, job_s: float) -> Outcome:
    """The ``setup`` job's result: nccl, rank r on cuda:r, the checked sum right."""
    devices = [f"cuda:{r['cuda_device']}" if r["cuda_device"] >= 0 else "cpu"
               for r in got["ranks"]]
    details = {k: got[k] for k in ("backend", "device", "world_size", "all_reduce_ok",
                                   "nccl_version", "device_name", "ranks")}
    details["job_s"] = round(job_s, 2)
    problems = []
    if got["backend"] != "nccl":
        problems.append(f"dist.setup() chose {got['backend']} for {got['world_size']} rank(s) "
                        f"on {gpus} GPU(s), not nccl")
    wrong = [r["rank"] for r in got["ranks"] if not r["nccl"] or r["cuda_device"] != r["rank"]]
    if wrong:
        problems.append(f"rank(s) {wrong} not on their own GPU (devices {devices})")
    if not got["all_reduce_ok"]:
        problems.append("the all_reduce of known values returned a wrong sum")
    _fail_if(problems, details)
    return f"nccl, {got['world_size']} rank(s) on {', '.join(devices)}; all_reduce right", details


def bench_uses_cuda_events() -> bool:
    """Whether ``labkit bench collectives`` times with CUDA events (read from its rank script)."""
    spec = importlib.util.find_spec("labkit.collectives.bench_rank")
    return bool(spec and spec.origin) and "cuda.Event(" in Path(spec.origin).read_text()


def collectives(ctx: Context) -> Outcome:
    """Every collective of ``labkit bench collectives`` on NCCL, #wrong 0; then the same
    all_reduce timed with the bench's clock and with CUDA events, side by side."""
    from labkit.collectives.bench import run_collectives

    report = run_collectives("all", nproc=ctx.nproc, min_bytes=BENCH_MIN, max_bytes=BENCH_MAX,
                             step_factor=BENCH_FACTOR, iters=BENCH_ITERS,
                             warmup_iters=BENCH_WARMUP, timeout_s=ctx.left(ctx.startup_s))
    details = judge_bench(report)
    size = max(r.size for r in report.rows if r.op == "all_reduce")
    got, _ = run_job("events", nproc=ctx.nproc, timeout_s=ctx.left(), size=size,
                     iters=EVENT_ITERS, warmup=EVENT_WARMUP)
    return with_events(details, got)


def judge_bench(report: CollectivesReport) -> dict[str, Any]:
    """The bench's report: nccl on a GPU, rows for every collective, #wrong 0; its details."""
    from labkit.collectives.formulas import OPS

    ops: dict[str, Any] = {}
    for op in OPS:
        rows = [r for r in report.rows if r.op == op]
        if rows:
            top = max(rows, key=lambda r: r.size)
            ops[op] = {"rows": len(rows), "largest_bytes": top.size,
                       "time_us": round(top.time_us, 2), "algbw_gbps": round(top.algbw, 3),
                       "busbw_gbps": round(top.busbw, 3)}
    uses_events = bench_uses_cuda_events()
    details: dict[str, Any] = {
        "backend": report.backend, "device": report.device, "world_size": report.world_size,
        "rows": len(report.rows), "wrong": report.wrong, "ops": ops,
        "not_run": report.skipped, "bench_s": round(report.seconds, 2),
        "bench_vs_bare": report.bench_vs_bare, "bench_uses_cuda_events": uses_events,
        "bench_timing": "CUDA events" if uses_events else
        "host clock (time.perf_counter) between torch.cuda.synchronize() calls"}
    problems = []
    if report.backend != "nccl" or not report.device.startswith("cuda"):
        problems.append(f"the bench ran on {report.backend} ({report.device}), not nccl on a GPU")
    if missing := [op for op in OPS if op not in ops]:
        problems.append(f"no rows for {missing}")
    if report.wrong:
        problems.append(f"{report.wrong} wrong element(s)")
    _fail_if(problems, details)
    return details


def with_events(details: dict[str, Any], got: dict[str, Any]) -> Outcome:
    """The bench's details plus the ``events`` job's two timings of one all_reduce loop."""
    ratio = got["host_us"] / got["event_us"] if got["event_us"] > 0 else None
    details["events"] = {**got, "host_over_event": None if ratio is None else round(ratio, 3)}
    timing = "CUDA events" if details["bench_uses_cuda_events"] else \
        "the host clock, not CUDA events"
    return (f"{len(details['ops'])} collectives, {details['rows']} rows on nccl "
            f"({details['device']}), #wrong 0; the bench times with {timing}; all_reduce of "
            f"{got['size']} B: host clock {got['host_us']:.1f} us, events "
            f"{got['event_us']:.1f} us"), details


def _log_text(folder: Path) -> tuple[str, int]:
    files = sorted(folder.glob("nccl.*"))
    return "\n".join(f.read_text(errors="replace") for f in files), len(files)


def nccl_debug_log(ctx: Context) -> Outcome:
    """A real NCCL job with ``NCCL_DEBUG=INFO``; its log read by ``parse_debug_log`` must give
    the NCCL version torch reports and an Init COMPLETE record for every rank."""
    folder = Path(tempfile.mkdtemp(prefix="labkit-gpu-nccl-log-"))
    env = {BACKEND_ENV: "nccl", "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,BOOTSTRAP,ENV",
           "NCCL_DEBUG_FILE": str(folder / "nccl.%h.%p.log")}
    try:
        got, launch = run_job("setup", nproc=ctx.nproc, timeout_s=ctx.left(), env=env)
        file_text, files = _log_text(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    lines = [*file_text.splitlines(), *launch.output]  # the files, and any line NCCL printed
    text = "\n".join(line for line in lines if "NCCL" in line)
    return judge_nccl_log(text, got["world_size"], got["nccl_version"], files)


def judge_nccl_log(text: str, world: int, torch_nccl: str | None, files: int) -> Outcome:
    """What ``parse_debug_log`` read: the version torch reports, every rank's Init COMPLETE."""
    from labkit.nccl.debuglog import parse_debug_log

    log = parse_debug_log(text)
    complete = sorted({r.rank for r in log.ranks if r.complete and r.nranks == world})
    details: dict[str, Any] = {
        "log_files": files, "nccl_lines": len(text.splitlines()),
        "parsed_lines": log.parsed_lines, "ignored_lines": log.ignored_lines,
        "version": log.version, "torch_nccl_version": torch_nccl, "nranks": log.nranks,
        "ranks": [asdict(r) for r in log.ranks], "hosts": len(log.hosts),
        "n_channels": log.n_channels, "transports": log.transports, "networks": log.networks,
        "env": log.env}
    problems = []
    if log.version is None:
        problems.append("no 'NCCL version' line found")
    elif torch_nccl and log.version.split("+")[0] != torch_nccl:
        problems.append(f"the log says NCCL {log.version}, torch.cuda.nccl.version() "
                        f"{torch_nccl}")
    if missing := sorted(set(range(world)) - set(complete)):
        problems.append(f"no 'Init COMPLETE' record for rank(s) {missing} of {world}")
    if problems:
        details["excerpt"] = text.splitlines()[:EXCERPT_LINES]
    _fail_if(problems, details)
    return (f"NCCL {log.version}: {len(complete)} of {world} rank(s) Init COMPLETE, "
            f"{log.parsed_lines} lines understood, {log.ignored_lines} not"), details


def ddp_bucket_view(ctx: Context) -> Outcome:
    """DDP on each GPU without and with ``gradient_as_bucket_view``: grads become bucket views,
    and CUDA memory allocated after a step drops by about one gradient copy."""
    got, _ = run_job("ddp", nproc=ctx.nproc, timeout_s=ctx.left(), model_mb=DDP_MODEL_MB,
                     iters=DDP_ITERS)
    return judge_ddp(got)


def judge_ddp(got: dict[str, Any]) -> Outcome:
    """The ``ddp`` job's two rows: views exactly with the option, about one copy saved."""
    off, on = got["rows"]
    grad = on["grad_mb"]
    saved = off["allocated_after_step_mb"] - on["allocated_after_step_mb"]
    details = {**got, "grad_mb": round(grad, 2), "saved_after_step_mb": round(saved, 2),
               "saved_peak_mb": round(off["peak_steady_mb"] - on["peak_steady_mb"], 2),
               "saved_over_grad": round(saved / grad, 3) if grad else None}
    problems = []
    if not on["grads_are_bucket_views"]:
        problems.append("with gradient_as_bucket_view the grads are not views into the buckets")
    if off["grads_are_bucket_views"]:
        problems.append("without gradient_as_bucket_view the grads share the buckets' storage")
    if saved < VIEW_SAVING_MIN * grad:
        problems.append(f"the views saved {saved:.1f} MiB after a step, under "
                        f"{VIEW_SAVING_MIN:g} x the {grad:.1f} MiB of gradients")
    _fail_if(problems, details)
    return (f"gradient_as_bucket_view saved {saved:.1f} MiB allocated per rank after a step "
            f"({saved / grad:.2f} x the {grad:.1f} MiB of gradients) on {got['device']}"), details


def checkpoint(ctx: Context) -> Outcome:
    """CUDA model, Adam state and RNG states through CheckpointManager and back with
    ``torch.load(weights_only=True)``; a step after resuming equals the uninterrupted one."""
    got, _ = run_job("checkpoint", nproc=1, timeout_s=ctx.left())
    return judge_checkpoint(got)


def judge_checkpoint(got: dict[str, Any]) -> Outcome:
    """The ``checkpoint`` job's comparisons: nothing differs, the resumed step is equal."""
    problems = [f"{len(got[k])} tensor(s) differ after loading {how}: {got[k][:5]}"
                for k, how in (("raw_mismatch", "raw"), ("device_mismatch", f"onto {got['device']}"),
                               ("cpu_mismatch", "onto cpu")) if got[k]]
    if not got["cuda_tensors"]:
        problems.append("no tensor of the saved state was on the GPU")
    if not got["resumed_equal"]:
        problems.append("the step after resuming differs from the uninterrupted one")
    _fail_if(problems, got)
    return (f"{got['tensors']} tensors ({got['cuda_tensors']} on {got['device']}), "
            f"{got['bytes']} B, equal after weights_only loads (as saved, onto the GPU, onto "
            "the CPU); resumed step equals the uninterrupted one"), got


def capstone(ctx: Context) -> Outcome:
    """The capstone, small: 1 node x 2 ranks (learner, actor) through Redis, learner on cuda:0,
    no kill, no Prometheus."""
    from labkit.capstone.config import CapstoneConfig
    from labkit.capstone.run import run_capstone

    cfg = CapstoneConfig(nodes=1, ranks_per_node=2, min_nodes=1, steps=CAPSTONE_STEPS,
                         kill_slot=None, max_restarts=0, learner_device="cuda:0",
                         timeout_s=ctx.left(5.0))
    return judge_capstone(run_capstone(cfg, with_prometheus=False), cfg)


def judge_capstone(report: CapstoneReport, cfg: CapstoneConfig) -> Outcome:
    """The capstone's report: learner on cuda:0, every update done, checkpoints, a return."""
    t = report.throughput
    details = {"learner_device": report.config.get("learner_device"),
               "world_size": cfg.world_size, "seconds": report.seconds,
               "updates": t["updates"], "expected_updates": cfg.expected_updates,
               "env_steps_trained": t["env_steps_trained"],
               "trained_steps_per_s": t["trained_steps_per_s"], **report.final_return,
               "checkpoints": report.checkpoints,
               "rank_failures_recorded": report.restarts["rank_failures_recorded"]}
    problems = []
    if details["learner_device"] != "cuda:0":
        problems.append(f"the learner ran on {details['learner_device']!r}, not cuda:0")
    if t["updates"] < cfg.expected_updates:
        problems.append(f"{t['updates']} learner updates, expected {cfg.expected_updates}")
    if not report.checkpoints["count"]:
        problems.append("the learner saved no checkpoint")
    if not math.isfinite(report.final_return["eval_return"]):
        problems.append("the evaluation return is not a number")
    _fail_if(problems, details)
    return (f"{t['updates']} updates, {t['env_steps_trained']} env steps in {report.seconds} s "
            f"with the learner on cuda:0; eval return {report.final_return['eval_return']}"), details


@dataclass(frozen=True)
class Check:
    """One check: its name, what it runs, and how its limit is sized: ``launches`` torchrun
    jobs of ``ranks`` processes each (their start-up allowance) plus ``work_s`` for the work."""

    name: str
    title: str
    run: Callable[[Context], Outcome]
    launches: int = 1
    ranks: int | None = None  # None: one per local GPU
    work_s: float = 30.0


CHECKS = (
    Check("dist-setup", "labkit.runtime.dist.setup picks nccl, one GPU per rank", dist_setup),
    Check("collectives", "labkit bench collectives: every collective on NCCL, CUDA timing",
          collectives, launches=2, work_s=60.0),
    Check("nccl-debug-log", "a live NCCL_DEBUG=INFO log through parse_debug_log",
          nccl_debug_log),
    Check("ddp-bucket-view", "DDP gradient_as_bucket_view: CUDA memory and bucket views",
          ddp_bucket_view, work_s=60.0),
    Check("checkpoint", "CUDA tensors through CheckpointManager, weights_only=True loads",
          checkpoint, ranks=1),
    Check("capstone", "a short capstone with the learner on cuda:0", capstone, ranks=2,
          work_s=90.0),
    Check("hang", "lesson 11's extra_collective on NCCL: live watch, NCCL flight recorder, "
          "torchfrtrace", hang_on_nccl, ranks=3, work_s=60.0),
)
CHECK_NAMES = tuple(c.name for c in CHECKS)
