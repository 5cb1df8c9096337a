"""labkit.scaling.ddp: real gloo launches at 2 ranks, toy sizes (a 32 MB MLP, a 64-wide agent).

The three launches run at once (nothing here is timed against a threshold; resident memory is
per process), so the module stays well under a minute and a half on a 2-core machine. The
invariants, with generous margins: views make every grad part of its bucket and save about one
gradient copy; all agent modes run; DDP and FSDP replicas agree, local agents differ; each FSDP
rank holds half of the model; the collectives counted are the ones each design calls. Every
rank of those launches also checks, as it leaves, that its process group is gone with all its
gloo threads (``ddp_rank.leave``); one more process shows that check fails when it should.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict

import pytest

from labkit.errors import ParameterError
from labkit.scaling.ddp import (
    add_arguments,
    bucket_view_saving,
    measure_agents,
    measure_bucket_view,
    measure_ddp,
    problems,
)

MODEL_MB = 32


@pytest.fixture(scope="module")
def result() -> dict:
    with ThreadPoolExecutor(3) as pool:
        off = pool.submit(measure_bucket_view, 2, MODEL_MB, False)
        on = pool.submit(measure_bucket_view, 2, MODEL_MB, True)
        agents = pool.submit(measure_agents, 2, 64, 32, 5, 2)
        views = [asdict(off.result()), asdict(on.result())]
        return {"bucket_view": views, "bucket_view_saving": bucket_view_saving(views),
                "agents": {r["mode"]: r for r in agents.result()}}


@pytest.mark.slow
def test_grads_become_bucket_views_only_with_the_option(result: dict) -> None:
    off, on = result["bucket_view"]
    assert not (off["views_after_iter0"] or off["views_after_iter1"]
                or off["grads_are_bucket_views"])
    assert on["views_after_iter0"] and on["views_after_iter1"] and on["grads_are_bucket_views"]
    assert on["grad_mb"] == pytest.approx(MODEL_MB, rel=0.05)
    # where the gradient bytes live: the buckets themselves, or storages of their own
    assert on["grad_storage_mb"] == pytest.approx(on["bucket_mb"], rel=0.01)
    assert off["grad_storage_mb"] == pytest.approx(off["grad_mb"], rel=0.01)


@pytest.mark.slow
def test_views_save_about_one_gradient_copy(result: dict) -> None:
    off, on = result["bucket_view"]
    saving, grad = result["bucket_view_saving"], result["bucket_view_saving"]["grad_mb"]
    for key in ("saved_after_first_iter_mb", "saved_steady_mb", "saved_peak_mb"):
        assert 0.5 * grad < saving[key] < 1.5 * grad, (key, saving)
    # parameters + buckets + grads against parameters + buckets
    assert off["rss_steady_mb"] > 2.5 * grad and on["rss_steady_mb"] > 1.5 * grad


@pytest.mark.slow
def test_all_agent_modes_ran(result: dict) -> None:
    rows = result["agents"]
    assert set(rows) == {"local", "ddp", "fsdp"}
    for row in rows.values():
        assert row["world_size"] == 2 and row["steps"] == 5
        assert 0 < row["step_ms_median"] <= row["step_ms_p90"]
        assert row["ratio_vs_ddp"] > 0 and row["params"] == 4 * 64 + 64 + 64 * 64 + 64 + 64 * 2 + 2
    assert rows["ddp"]["ratio_vs_ddp"] == 1


@pytest.mark.slow
def test_fsdp_shards_ddp_and_local_do_not(result: dict) -> None:
    rows = result["agents"]
    fsdp = rows["fsdp"]
    assert 0.4 < fsdp["local_param_fraction_min"] <= fsdp["local_param_fraction"] < 0.6
    assert rows["ddp"]["local_param_fraction"] == rows["local"]["local_param_fraction"] == 1


@pytest.mark.slow
def test_replicas_agree_except_independent_agents(result: dict) -> None:
    rows = result["agents"]
    assert rows["ddp"]["replicas_identical"] and rows["fsdp"]["replicas_identical"]
    assert not rows["local"]["replicas_identical"]
    assert rows["fsdp"]["max_abs_diff_vs_ddp"] <= 1e-4  # FSDP computes what DDP does, sharded
    assert problems({"bucket_view": result["bucket_view"],
                     "agents": list(rows.values())}) == []


@pytest.mark.slow
def test_collectives_each_design_calls(result: dict) -> None:
    rows = result["agents"]
    local, ddp, fsdp = rows["local"], rows["ddp"], rows["fsdp"]
    assert local["collective_calls_per_step"] == 0 and local["bus_bytes_per_step"] == 0
    assert ddp["collectives"] == {"all_reduce": 1}  # one bucket: the whole small model
    assert ddp["payload_bytes_per_step"] == ddp["param_bytes"]
    assert ddp["bus_bytes_per_step"] == ddp["param_bytes"]  # 2 (n - 1) / n = 1 at n = 2
    assert set(fsdp["collectives"]) == {"all_gather", "reduce_scatter"}
    assert fsdp["payload_bytes_per_step"] >= 2 * fsdp["param_bytes"]


def test_bad_parameters_are_rejected() -> None:
    with pytest.raises(ParameterError):
        measure_agents(2, modes=["local", "zero"])
    with pytest.raises(ParameterError):
        measure_agents(2, steps=0)
    with pytest.raises(ParameterError):
        measure_bucket_view(2, model_mb=0)
    with pytest.raises(ParameterError):
        measure_ddp(part="everything")


def test_cli_arguments() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--nproc", "4", "--model-mb", "16", "--agent-hidden", "128",
                              "--steps", "10", "--modes", "ddp,fsdp_root", "--json"])
    assert (args.nproc, args.model_mb, args.agent_hidden, args.steps) == (4, 16.0, 128, 10)
    assert (args.modes, args.json, args.part, args.zero_grad_in_place) == (
        "ddp,fsdp_root", True, "all", False)


HOLDS_THE_GROUP = """\
import torch
import torch.distributed as dist

from labkit.scaling import ddp_rank
from labkit.runtime.dist import setup

setup("gloo")  # a world of one, no torchrun
dist.all_reduce(torch.ones(1))
held = dist.group.WORLD  # what a leftover module or cache would keep
try:
    ddp_rank.leave()
except RuntimeError as exc:
    print("held:", exc)
del held
print("released:", ddp_rank.gloo_threads())
"""


@pytest.mark.slow
def test_leaving_while_something_holds_the_group_is_an_error() -> None:
    """A group that outlives teardown keeps its gloo threads, the ones that abort a process
    when they free a tensor during interpreter shutdown; the ranks' exit check sees them."""
    proc = subprocess.run([sys.executable, "-c", HOLDS_THE_GROUP], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    held, released = proc.stdout.splitlines()
    assert held.startswith("held: the process group outlived destroy_process_group: gloo "
                           "threads ['"), held
    assert "pt_gloo_runloop" in held
    assert released == "released: []"
