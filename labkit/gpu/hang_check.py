"""The GPU check for lesson 11: one hang scenario on NCCL through the very code that runs it on
gloo (``labkit.hangs.run_scenario(..., backend="nccl")``), watched live, with PyTorch's NCCL
flight recorder dumped on the watch's request and on NCCL's own timeout, then read by
``torchfrtrace``.

``extra_collective`` (rank 2 calls one all_reduce more) needs three GPUs, one per rank; on NCCL
the extra call returns at once (it is queued on a stream), so only the counts show it until
NCCL's watchdog times out, dumps and tears the process down.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from labkit.gpu.outcome import CheckSkipped, Context, Outcome, fail_if

if TYPE_CHECKING:
    from labkit.hangs.run import HangReport

SCENARIO = "extra_collective"
NCCL_TIMEOUT_S = 20.0  # the collective timeout: above NCCL's communicator set-up on first use


def hang_on_nccl(ctx: Context) -> Outcome:
    """``extra_collective`` on NCCL, one GPU per rank, watched live."""
    from labkit.hangs import SCENARIOS, run_scenario

    spec = SCENARIOS[SCENARIO]
    if ctx.gpus < spec.world_size:
        raise CheckSkipped(f"{SCENARIO} needs {spec.world_size} GPUs (one per rank); this host "
                           f"has {ctx.gpus}")
    return judge_hang(run_scenario(SCENARIO, timeout_s=NCCL_TIMEOUT_S, backend="nccl"))


def judge_hang(report: HangReport) -> Outcome:
    """Passed when the live watch named the rank that is ahead within half the timeout and
    every rank left an NCCL flight-recorder dump that torch's analyzer read."""
    torch = report.torch
    writers = report.torch_writers
    details: dict[str, Any] = {
        "recorder": {"rank": report.culprit_rank, "kind": report.kind, "seq": report.seq},
        "watch": report.watch.to_dict() if report.watch else report.watch_error,
        "watch_within_s": report.watch_within_s, "timeout_s": report.timeout_s,
        "torch": torch.to_dict() if torch else None, "torch_gaps": report.torch_gaps,
        "backends": sorted({w["backend"] for w in writers.values()}),
    }
    problems = []
    if not report.watch_named or not report.watch_in_half:
        problems.append(f"the live watch did not name rank {report.expected_culprit_rank} "
                        f"within half the timeout ({report.watch_within_s} s)")
    if sorted(writers) != list(range(report.world_size)) or details["backends"] != ["nccl"]:
        problems.append(f"NCCL flight-recorder dumps from ranks {sorted(writers)} "
                        f"(backends {details['backends']})")
    if torch is None or not torch.ran:
        problems.append("torch's analyzer did not run")
    fail_if(problems, details)
    assert torch is not None
    return (f"the watch named rank {report.watch.culprit_rank} ({report.watch.kind}) after "
            f"{report.watch_within_s} s of a {report.timeout_s:g} s timeout; torchfrtrace: "
            f"{torch.cli_says}"), details
