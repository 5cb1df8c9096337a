"""labkit.training.run: both modes as real torchrun jobs at toy size, and the configs that must fail.

Learning is checked as movement, not as a score: after a small budget the mean return must
be well above a random policy's (about 22 on CartPole-v1)."""

from __future__ import annotations

import argparse
from concurrent.futures import ThreadPoolExecutor

import pytest

from labkit.errors import ParameterError
from labkit.rl.agents import random_policy_return
from labkit.rl.hyper import Hyper
from labkit.rl.staleness import StalenessConfig
from labkit.runtime.failures import RankFailedError
from labkit.training.run import TrainConfig, add_arguments, config_from_args, train

LEARNED = 2 * random_policy_return()  # twice what random actions score, measured here


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"mode": "async", "agents": 0}, "at least one agent"),
    ({"agents": 2, "straggler_rank": 2}, "outside the agents"),
    ({"straggler_rank": 0, "straggler_factor": 0.5}, "straggler-factor"),
    ({"staleness": StalenessConfig("vtrace")}, "only applies to --mode async"),
    ({"steps": 10}, "less than one rollout"),
    ({"mode": "async", "staleness": StalenessConfig("newest")}, "unknown staleness method"),
    ({"mode": "ring"}, "mode must be"),
    ({"agents": 3, "nnodes": 2}, "do not split evenly"),
])
def test_invalid_configs_fail_before_launch(kwargs: dict, message: str) -> None:
    with pytest.raises(ParameterError, match=message):
        train(TrainConfig(**kwargs))


def test_config_round_trips_through_json() -> None:
    cfg = TrainConfig(mode="async", agents=3, staleness=StalenessConfig("drop", max_lag=2),
                      hyper=Hyper(lr=1e-3))
    assert TrainConfig.from_json(cfg.to_json()) == cfg
    assert cfg.world_size == 4 and TrainConfig(agents=3).world_size == 3


def test_cli_arguments_make_the_config() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--mode", "async", "--agents", "4", "--straggler-rank", "3",
                              "--straggler-factor", "4", "--staleness", "vtrace", "--lr", "0.001",
                              "--normalize-advantages"])
    cfg = config_from_args(args)
    assert (cfg.mode, cfg.agents, cfg.straggler_rank, cfg.straggler_factor) == ("async", 4, 3, 4)
    assert cfg.staleness.method == "vtrace" and cfg.hyper.lr == 0.001
    assert cfg.hyper.normalize_advantages is True and cfg.hyper.rollout_len == Hyper().rollout_len


def small(**kwargs) -> TrainConfig:
    return TrainConfig(**{"agents": 2, "steps": 24_576, "seed": 1, **kwargs})


@pytest.mark.slow
def test_sync_learns_and_repeats_bit_for_bit(leftover_processes, tmp_path) -> None:
    # Four independent jobs, run at once: their start-ups overlap.
    with ThreadPoolExecutor(4) as pool:
        first, again, once_more, other_seed = pool.map(
            lambda args: train(small(**args[0]), run_dir=tmp_path / args[1]), [
                ({"straggler_rank": 1, "straggler_factor": 2}, "a"),
                ({"steps": 2048}, "b"),
                ({"steps": 2048, "straggler_rank": 0, "straggler_factor": 2}, "c"),
                ({"steps": 2048, "seed": 2}, "d")])
    assert first["env_steps"] >= 24_576 and first["updates"] == 48
    assert first["final_mean_return"] > LEARNED
    assert first["straggler_delay_s"] > 0 and first["lag_hist"] == {"0": 48}
    # Same seed and world size: the same parameters, whatever the straggler did to the timing.
    assert again["params_sha256"] == once_more["params_sha256"]
    assert again["params_sha256"] != other_seed["params_sha256"]
    for run in "abcd":
        assert not leftover_processes(tmp_path / run)


@pytest.mark.slow
def test_async_learns_and_measures_lag(leftover_processes, tmp_path) -> None:
    result = train(small(mode="async", staleness=StalenessConfig("vtrace")), run_dir=tmp_path)
    assert result["world_size"] == 3 and result["env_steps_consumed"] >= 24_576
    assert result["env_steps"] >= result["env_steps_consumed"]
    assert result["final_mean_return"] > LEARNED
    per_rollout = Hyper().envs_per_agent * Hyper().rollout_len
    assert sum(result["lag_hist"].values()) * per_rollout == result["env_steps_consumed"]
    assert result["mean_lag"] >= 0 and result["max_lag"] >= result["p50_lag"]
    assert not leftover_processes(tmp_path)


@pytest.mark.slow
def test_a_silent_learner_stops_the_actors_with_its_name(leftover_processes, tmp_path) -> None:
    cfg = small(mode="async", faults="stall:rank=0,step=2", learner_timeout_s=3.0, timeout_s=120)
    with pytest.raises(RankFailedError, match=r"LearnerLostError.*learner \(rank 0\)"):
        train(cfg, run_dir=tmp_path)
    assert not leftover_processes(tmp_path)


@pytest.mark.slow
def test_redis_going_away_mid_run_is_a_clear_error(monkeypatch, tmp_path, leftover_processes) -> None:
    """Stop the server while actors and learner talk through it: a rank fails naming Redis."""
    import threading

    import redis

    from labkit.services import RedisServer

    server = RedisServer().start()
    monkeypatch.setenv("REDIS_URL", server.url)
    done = threading.Event()

    def stop_once_training() -> None:  # mid-run on any machine: after the learner's 2nd version
        client = redis.Redis.from_url(server.url)
        while not done.is_set():
            versions = [int(client.get(key) or 0) for key in client.scan_iter(match="*:version")]
            if max(versions, default=0) >= 2:
                server.stop()
                return
            done.wait(0.05)

    stopper = threading.Thread(target=stop_once_training, daemon=True)
    stopper.start()
    try:
        with pytest.raises(RankFailedError, match=r"lost Redis at redis://"):
            train(small(mode="async", steps=2_000_000, timeout_s=300), run_dir=tmp_path)
    finally:
        done.set()
        stopper.join(timeout=10)
        server.stop()
    assert not leftover_processes(tmp_path)


@pytest.mark.slow
def test_one_sync_rank_equals_the_same_updates_in_this_process(leftover_processes, tmp_path) -> None:
    """The distributed trainer against a plain single-process reference (picotron's habit): one
    sync rank under torchrun and DDP, and SyncAgent stepping the same updates here, end with
    bitwise-equal parameters."""
    from labkit.reliability.checkpoint import params_sha256
    from labkit.rl.agents import seed_everything
    from labkit.training.run import sync_iterations
    from labkit.training.sync import SyncAgent

    cfg = TrainConfig(agents=1, steps=1024, seed=3)
    ranked = train(cfg, run_dir=tmp_path / "run")
    seed_everything(cfg.seed)
    agent = SyncAgent.fresh(cfg.hyper, cfg.seed, rank=0)
    agent.step_locally(0, sync_iterations(cfg))
    agent.pool.close()
    assert ranked["updates"] == sync_iterations(cfg) == 4
    assert ranked["params_sha256"] == params_sha256(agent.model)
    assert not leftover_processes(tmp_path / "run")
