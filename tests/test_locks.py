"""Locks and races on a real redis-server, with real agent processes and torchrun ranks.

Invariants only (no speed thresholds): the unlocked read-modify-write loses updates, every
correct mechanism loses none, fencing refuses every stale write, the guide's all_reduce "lock"
lets several ranks in at once and hangs the others when one rank skips it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Iterator

import pytest

from labkit.errors import LabkitError, ParameterError, ServiceError
from labkit.locks import (
    FencedLock,
    FencedStore,
    LockExperimentError,
    LockTimeoutError,
    StaleTokenError,
    add_arguments,
    deadlock_experiment,
    guide_lock_overlap,
    guide_lock_skip,
    race_experiment,
    run,
    stale_write_experiment,
)
from labkit.runtime.ports import free_port
from labkit.services import RedisServer
from labkit.services.base import CHILD_REDIS_URL_ENV


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer() as srv:
        yield srv


@pytest.fixture
def url(server: RedisServer) -> Iterator[str]:
    yield server.url
    client = server.client()
    try:
        assert not list(client.scan_iter(match="labkit:locks:*")), "an experiment left keys"
    finally:
        client.close()


# --------------------------------------------------------------------------------------------
# The race, and what fixes it


def test_unlocked_read_modify_write_loses_updates(url):
    result = race_experiment(url, "none", agents=3, increments=40, think_s=0.005)
    assert result.expected == 120
    assert result.final < result.expected
    assert result.lost_updates == result.expected - result.final > 0


@pytest.mark.parametrize("method", ["redis_lock", "fenced", "lua", "watch"])
def test_correct_mechanisms_lose_nothing(url, method):
    result = race_experiment(url, method, agents=3, increments=30, think_s=0.002)
    assert (result.final, result.lost_updates) == (90, 0)
    assert result.rejected_writes == 0 and result.expired_locks == 0  # TTL 10 s >> 2 ms
    if method != "watch":
        assert result.retries == 0


def round_trip_s(server: RedisServer, pings: int = 20) -> float:
    """The median PING round trip to ``server`` now, in seconds."""
    client = server.client()
    try:
        times = []
        for _ in range(pings):
            began = time.perf_counter()
            client.ping()
            times.append(time.perf_counter() - began)
    finally:
        client.close()
    return statistics.median(times)


@pytest.mark.slow
def test_a_lock_ttl_shorter_than_the_work_loses_updates_unless_fenced(server, url):
    plain = race_experiment(url, "redis_lock", agents=3, increments=30, think_s=0.003,
                            ttl_s=0.002)
    assert plain.expired_locks == plain.expected  # every holding outlived its TTL ...
    assert plain.lost_updates > 0  # ... and the next holder's read-modify-write overlapped
    # Fenced: a TTL far above an ordinary holding's few round trips (measured now), and every
    # fifth holding paused past it once. The paused holding expires by construction, a rival
    # takes the lock meanwhile, and the redo, unpaused, fits: refusals, then progress.
    ttl = max(0.02, 50 * round_trip_s(server))
    fenced = race_experiment(url, "fenced", agents=3, increments=20, think_s=0.0, ttl_s=ttl,
                             pause_every=5, pause_s=2 * ttl)
    assert fenced.lost_updates == 0 and fenced.final == 60  # stale accesses refused, redone
    assert fenced.expired_locks >= 3 * 4  # every paused holding outlived its lock ...
    assert fenced.rejected_writes >= 1  # ... and a rival's newer token refused its late access


# --------------------------------------------------------------------------------------------
# Fencing


@pytest.mark.slow
def test_fencing_tokens_grow_and_the_store_refuses_older_ones(server):
    client = server.client()
    try:
        lock, store = FencedLock(client, "unit:lock", ttl_s=5), FencedStore(client)
        with lock as first:
            store.write("unit:res", "one", first)
        with lock as second:
            assert second > first
            assert store.read("unit:res", second) == b"one"
            store.write("unit:res", "two", second)
            store.write("unit:res", "two again", second)  # the same holder writes again
        with pytest.raises(StaleTokenError, match="token"):
            store.write("unit:res", "late", first)
        with pytest.raises(StaleTokenError):
            store.read("unit:res", first)
        assert client.get("unit:res") == b"two again"
    finally:
        client.delete("unit:lock", "unit:lock:fence", "unit:res", "unit:res:fence-seen")
        client.close()


@pytest.mark.slow
def test_fencing_refuses_every_stale_write_of_a_holder_paused_past_its_ttl(url):
    result = stale_write_experiment(url, rounds=3, ttl_s=0.2, pause_s=0.5)
    assert result.stale_writes_attempted == 3
    assert result.stale_writes_rejected == 3 and result.stale_writes_accepted == 0
    assert result.rejected_fraction == 1.0
    assert result.new_holder_writes == result.new_holder_writes_accepted == 3
    assert result.fenced_kept_new_value == 3
    assert result.unfenced_stale_overwrites == 3  # the same late write, unfenced, clobbers
    assert result.late_releases_failed == 3  # redis-py only notices at release: too late


# --------------------------------------------------------------------------------------------
# Lock ordering


def test_opposite_lock_orders_end_in_a_timeout_error_naming_the_locks(url):
    result = deadlock_experiment(url, ordered=False, wait_s=1.0)
    assert result.all_held_one  # each waited, holding its first lock, until the other held one
    assert result.timed_out and not result.finished
    assert result.describe().startswith("deadlock")
    errors = [a["error"] for a in result.agents if not a["ok"]]
    assert errors and all("'a'" in e and "'b'" in e and "deadlock" in e for e in errors)
    with pytest.raises(LockTimeoutError, match="global order"):
        result.check()


def test_one_global_lock_order_finishes(url):
    result = deadlock_experiment(url, ordered=True, wait_s=5.0)
    assert result.finished and not result.timed_out
    assert result.describe().startswith("sorted order: every agent got every lock")
    assert all(a["order"] == ["a", "b"] for a in result.agents)
    assert result.check() is result


# --------------------------------------------------------------------------------------------
# The guide's all_reduce "lock" in torchrun ranks


@pytest.mark.slow
def test_guide_lock_lets_every_rank_in_at_once(url):
    result = guide_lock_overlap(url, ranks=2, rounds=5, think_s=0.05)
    assert result.max_inside > 1, result.describe()  # a lock would keep this at 1
    assert result.rounds_all_inside >= 1
    assert result.lost_updates == result.expected - result.final > 0


@pytest.mark.slow
def test_a_rank_that_skips_the_guide_lock_hangs_the_others_until_the_timeout(url):
    result = guide_lock_skip(url, ranks=2, skip_rank=0, collective_timeout_s=3.0)
    assert result.skip_rank == 0
    assert [w["rank"] for w in result.waiting] == [1]
    assert result.all_failed and result.timeout_errors >= 1
    # With more ranks the first to time out exits, and the others may see "Connection closed
    # by peer" a moment later; at least one reports the timeout.
    assert any("timed out" in w["error"].lower() for w in result.waiting)
    for waited in result.waiting:
        assert 3.0 * 0.9 <= waited["seconds"] <= 3.0 + 30.0  # blocked until the timeout


def test_guide_rank_max_inside_counts_simultaneous_intervals():
    from labkit.locks.guide import max_inside

    assert max_inside([(0, 1), (1, 2), (2, 3)]) == 1  # touching is not overlapping
    assert max_inside([(0, 2), (1, 3), (1.5, 1.6)]) == 3


# --------------------------------------------------------------------------------------------
# Errors, processes, CLI


def test_unreachable_redis_is_a_clear_service_error():
    port = free_port()
    with pytest.raises(ServiceError, match="unreachable") as err:
        race_experiment(f"redis://:s3cret-pw@127.0.0.1:{port}/0", "none", agents=1,
                        increments=1)
    assert isinstance(err.value, LabkitError)
    assert "s3cret-pw" not in str(err.value)


@pytest.mark.parametrize("kwargs", [
    {"method": "spinlock"}, {"agents": 0}, {"agents": 2.5}, {"increments": -1},
    {"think_s": -0.1}, {"ttl_s": 0},
])
def test_race_parameters_are_validated(kwargs):
    args = {"url": "redis://127.0.0.1:1/0", "method": "none", **kwargs}
    with pytest.raises(ParameterError):
        race_experiment(**args)


def test_other_parameters_are_validated():
    with pytest.raises(ParameterError, match="exceed ttl_s"):
        stale_write_experiment("redis://127.0.0.1:1/0", ttl_s=1.0, pause_s=0.5)
    with pytest.raises(ParameterError, match="distinct"):
        deadlock_experiment("redis://127.0.0.1:1/0", ordered=True, locks=("a", "a"))
    with pytest.raises(ParameterError, match="mutual exclusion"):
        deadlock_experiment("redis://127.0.0.1:1/0", ordered=False, wait_s=5, ttl_s=1)
    with pytest.raises(ParameterError):
        guide_lock_skip("redis://127.0.0.1:1/0", ranks=2, skip_rank=2)
    with pytest.raises(ParameterError, match="lock holder"):
        race_experiment("redis://127.0.0.1:1/0", "lua", pause_every=5, pause_s=0.1)


def test_agents_past_their_timeout_are_killed(url, leftover_processes):
    with pytest.raises(LockExperimentError, match="still running"):
        race_experiment(url, "none", agents=2, increments=10_000, think_s=0.01, timeout_s=1.0)
    assert leftover_processes(url, name=CHILD_REDIS_URL_ENV) == []


@pytest.mark.slow
def test_cli_prints_the_comparison_as_json(url, monkeypatch, capsys):
    monkeypatch.setenv("REDIS_URL", url)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--agents", "2", "--increments", "20", "--think-ms", "5",
                              "--methods", "none,lua", "--stale-rounds", "1",
                              "--guide-ranks", "0", "--json"])
    assert run(args) == 0
    report = json.loads(capsys.readouterr().out)
    rows = {row["method"]: row for row in report["race"]}
    assert rows["none"]["lost_updates"] > 0 and rows["lua"]["lost_updates"] == 0
    assert report["stale_writes"]["rejected_fraction"] == 1.0
    assert report["deadlock"]["ordered"]["finished"]
    assert report["deadlock"]["unordered"]["timed_out"]
    assert "guide_lock" not in report
