"""The agent control plane on a real redis-server, with real agent processes.

Correctness bounds only (no speed thresholds): a SIGKILLed agent's hash is there until its TTL
runs out after its last beat and gone from then on, on Redis's own clock, so it shows dead then
and never before; SIGTERM ends in ``left`` and exit code 0; nothing keeps running. Where a
check needs beats on time (a live agent shows alive), the heartbeat's measured gap says whether
the machine kept them on time.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
import redis

from labkit.errors import LabkitError, ParameterError, ServiceError
from labkit.orchestration import (
    DEAD,
    JOB_ENV,
    AgentStatus,
    Heartbeat,
    dead_after_s,
    fleet_status,
    forget,
    format_fleet,
    measure_detection,
    spawn_agent,
    status_main,
)
from labkit.orchestration.control_agent import main
from labkit.runtime.ports import free_port
from labkit.services import RedisServer
from labkit.services.base import CHILD_REDIS_URL_ENV

TTL_S, INTERVAL_S = 1.0, 0.25
START_TIMEOUT_S = 60.0
REDIS_MS_S = 0.002  # Redis keeps expiry times in milliseconds


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer() as srv:
        yield srv


@pytest.fixture
def url(server: RedisServer) -> str:
    return server.url


@pytest.fixture
def job(url: str, leftover_processes: Callable[..., list[str]]) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    yield name
    try:
        assert not leftover_processes(name, name=JOB_ENV), "an agent process was left running"
    finally:
        forget(url, name)


def _status(url: str, job: str, name: str) -> AgentStatus | None:
    return next((s for s in fleet_status(url, job) if s.name == name), None)


def _wait_for(what: str, done: Callable[[], bool], timeout_s: float = START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"{what} not within {timeout_s} s"
        time.sleep(0.02)


def _wait_state(url: str, job: str, name: str, state: str,
                timeout_s: float = START_TIMEOUT_S) -> AgentStatus:
    deadline = time.monotonic() + timeout_s
    while True:
        status = _status(url, job, name)
        if status is not None and status.state == state:
            return status
        assert time.monotonic() < deadline, f"{name} not {state} within {timeout_s} s: {status}"
        time.sleep(0.02)


# --------------------------------------------------------------------------------------------
# States


@pytest.mark.slow
def test_states_set_and_read_back(url, job):
    with Heartbeat(url, job, "a1", ttl_s=TTL_S, interval_s=INTERVAL_S, node=0, rank=1) as hb:
        [status] = fleet_status(url, job)
        assert (status.name, status.state, status.pid, status.host) == (
            "a1", "starting", os.getpid(), socket.gethostname())
        assert (status.node, status.rank, status.step, status.last_state) == (0, 1, None, None)
        assert 0 <= status.age_s < TTL_S and status.alive
        assert hb.set_state("running", step=3) is True
        assert _status(url, job, "a1").step == 3
        hb.set_step(5)  # no round trip: the next periodic beat carries it
        beats = hb.beats
        _wait_for("a periodic beat", lambda: hb.beats > beats)
        status = _status(url, job, "a1")
        assert (status.step, status.pid) == (5, os.getpid())
        time.sleep(TTL_S)  # the thread keeps it alive past one TTL ...
        state, gap = _status(url, job, "a1").state, hb.longest_gap_s
        if gap < TTL_S - INTERVAL_S:  # ... while its beats come on time (not on a stalled host)
            assert state == "running", gap
        hb.set_state("draining")
        assert _status(url, job, "a1").state == "draining"
        assert hb.last_error is None and hb.beats >= 3 and hb.failed_beats == 0
    assert _status(url, job, "a1").state == "left"
    time.sleep(TTL_S + 0.3)  # departed cleanly: never turns dead
    status = _status(url, job, "a1")
    assert (status.state, status.step, status.alive) == ("left", 5, False)
    with pytest.raises(ParameterError, match="left"):
        hb.set_state("running")


def test_format_status_main_and_cli(url, job, capsys, monkeypatch):
    assert format_fleet([]) == "no agents"
    with Heartbeat(url, job, "b", ttl_s=TTL_S, interval_s=INTERVAL_S) as hb:
        hb.set_state("running", step=7)
        Heartbeat(url, job, "a", ttl_s=TTL_S, interval_s=INTERVAL_S).leave()
        assert status_main(url, job, as_json=False) == 0
        table = capsys.readouterr().out.splitlines()
        assert table[0].split() == ["NAME", "STATE", "AGE", "STEP", "NODE", "RANK", "PID", "HOST"]
        assert table[1].split()[:2] == ["a", "left"] and table[2].split()[:2] == ["b", "running"]
        assert table[-1] == "2 agents: 1 running, 1 left"
        assert status_main(url, job, as_json=True) == 0
        listed = json.loads(capsys.readouterr().out)
        assert [(s["name"], s["state"], s["step"]) for s in listed] == [
            ("a", "left", None), ("b", "running", 7)]
        monkeypatch.setenv(CHILD_REDIS_URL_ENV, url)
        assert main(["status", "--job", job, "--json"]) == 0
        assert len(json.loads(capsys.readouterr().out)) == 2
    assert forget(url, job) >= 4
    assert fleet_status(url, job) == []


# --------------------------------------------------------------------------------------------
# Agent processes


def test_a_sigkilled_agent_is_dead_within_the_ttl_and_not_before(url, job):
    proc = spawn_agent(url, job, "victim", ttl_s=TTL_S, interval_s=INTERVAL_S, step_s=0.05)
    client = redis.Redis.from_url(url)
    key = f"labkit:fleet:{job}:agent:victim"

    def redis_now_and(*command: str) -> tuple[float, object]:
        (secs, usecs), reply = client.pipeline(transaction=True).time().execute_command(
            *command).execute()
        return secs + usecs / 1e6, reply

    try:
        _wait_state(url, job, "victim", "running")
        proc.kill()
        proc.wait()  # no beat can follow this
        now, left_ms = redis_now_and("PTTL", key)
        expires_at = now + left_ms / 1000  # on Redis's clock
        assert 0 < left_ms <= TTL_S * 1000  # at most one TTL from the kill
        seen: list[AgentStatus] = []
        while not seen or seen[-1].state != DEAD:
            before, _ = redis_now_and("TIME")
            seen.append(_status(url, job, "victim"))
            after, exists = redis_now_and("EXISTS", key)
            if abs(after - expires_at) > REDIS_MS_S:  # there until it expires, then gone
                assert bool(exists) == (after < expires_at), (after - expires_at, exists)
            if seen[-1].state == DEAD:  # never shown dead before its TTL ran out ...
                assert after >= expires_at - REDIS_MS_S, (after - expires_at, seen[-1])
            else:  # ... nor alive after it
                assert before < expires_at + REDIS_MS_S, (before - expires_at, seen[-1])
            assert after < expires_at + 30, f"never shown dead: {seen[-1]}"
            time.sleep(0.02)
    finally:
        client.close()
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    dead = seen[-1]
    assert dead.age_s >= TTL_S - 0.01, dead  # the TTL counts from its last beat
    assert all(s.state == "running" and s.age_s <= TTL_S for s in seen[:-1]), seen
    # It stays dead, with what it did last.
    time.sleep(0.1)
    again = _status(url, job, "victim")
    assert (again.state, again.last_state, again.pid) == (DEAD, "running", proc.pid)
    assert again.age_s >= dead.age_s
    assert "dead (was running)" in format_fleet([again])
    assert dead_after_s(TTL_S) == TTL_S and dead_after_s(TTL_S, 0.05) == TTL_S + 0.05


@pytest.mark.slow
def test_sigterm_drains_then_leaves_with_exit_code_0(url, job):
    proc = spawn_agent(url, job, "worker", ttl_s=TTL_S, interval_s=INTERVAL_S, step_s=0.05)
    try:
        _wait_state(url, job, "worker", "running")
        proc.terminate()
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    assert _status(url, job, "worker").state == "left"
    time.sleep(TTL_S + 0.3)
    assert _status(url, job, "worker").state == "left"  # not dead


def test_an_agent_with_steps_leaves_by_itself(url, job):
    proc = spawn_agent(url, job, "short", ttl_s=TTL_S, interval_s=INTERVAL_S, step_s=0.02,
                       steps=3)
    try:
        assert proc.wait(START_TIMEOUT_S) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    status = _status(url, job, "short")
    assert (status.state, status.step) == ("left", 3)


@pytest.mark.slow
def test_measure_detection_kills_one_stops_one_and_reaps_all(url, job, leftover_processes):
    result = measure_detection(url, job, agents=3, ttl_s=TTL_S, interval_s=INTERVAL_S)
    assert result.bound_s == TTL_S + 0.05
    assert 0 <= result.silent_at_kill_s <= TTL_S
    assert result.silent_at_kill_s + result.detection_s >= TTL_S - 0.01  # dead only past its TTL
    assert 0 <= result.alive_read_s < result.detection_s  # it expired between those two reads
    assert result.terminated_exit_code == 0 and result.left_s < 30
    statuses = {s.name: s for s in result.statuses}
    assert (statuses[result.killed].state, statuses[result.terminated].state) == (DEAD, "left")
    # The third still beats; a machine that held its beat back more than ttl - interval would
    # show it dead while it was running (the trade the TTL makes), so that is all it may show.
    third = statuses["agent-2"]
    assert third.state == "running" or (third.state, third.last_state) == (DEAD, "running")
    assert (result.explain() is None) == (
        TTL_S - INTERVAL_S <= result.detection_s <= result.bound_s)
    assert not leftover_processes(job, name=JOB_ENV)
    assert _wait_state(url, job, "agent-2", "left", 5.0)  # the rest were stopped gracefully


# --------------------------------------------------------------------------------------------
# Errors


@pytest.mark.parametrize(("ttl_s", "interval_s", "match"), [
    (1.0, 1.0, "must exceed interval_s"), (0.5, 1.0, "must exceed"), (1.0, 0, "> 0"),
    (-1.0, 0.5, "> 0"), (float("nan"), 0.5, "finite"), (True, 0.5, "seconds"),
    (1.0, "0.5", "seconds"),
])
def test_invalid_timing_is_a_parameter_error(ttl_s, interval_s, match):
    with pytest.raises(ParameterError, match=match):
        Heartbeat("redis://127.0.0.1:1/0", "job", "a", ttl_s=ttl_s, interval_s=interval_s)
    with pytest.raises(ParameterError):
        spawn_agent("redis://127.0.0.1:1/0", "job", "a", ttl_s=ttl_s, interval_s=interval_s)


def test_invalid_states_and_names_are_parameter_errors():
    hb = Heartbeat("redis://127.0.0.1:1/0", "job", "a", ttl_s=1.0, interval_s=0.25)
    for state in ("dead", "paused", "", None):
        with pytest.raises(ParameterError, match="one of starting, running"):
            hb.set_state(state)
    for job in ("", "a:b", "a*", "x" * 129, None):
        with pytest.raises(ParameterError, match="job must be"):
            Heartbeat("redis://127.0.0.1:1/0", job, "a")
        with pytest.raises(ParameterError):
            fleet_status("redis://127.0.0.1:1/0", job)
    with pytest.raises(ParameterError, match="agents must be"):
        measure_detection("redis://127.0.0.1:1/0", agents=1)


def test_unreachable_redis_is_a_service_error_naming_the_server(capsys):
    port = free_port()
    bad = f"redis://:s3cret-pw@127.0.0.1:{port}/0"
    for call in (lambda: fleet_status(bad, "job"), lambda: forget(bad, "job")):
        with pytest.raises(ServiceError, match=f"127.0.0.1:{port}") as err:
            call()
        assert isinstance(err.value, LabkitError) and "s3cret-pw" not in str(err.value)
        assert "redis://:***@" in str(err.value)
    assert status_main(bad, "job", as_json=False) == 2
    printed = capsys.readouterr()
    assert f"127.0.0.1:{port}" in printed.err and "s3cret-pw" not in printed.err + printed.out
    with pytest.raises(ServiceError, match="not a Redis URL"):
        fleet_status("http://:s3cret-pw@example/0", "job")


def test_a_heartbeat_without_redis_never_raises_nor_hangs():
    bad = f"redis://:s3cret-pw@127.0.0.1:{free_port()}/0"
    hb = Heartbeat(bad, "job", "a", ttl_s=0.5, interval_s=0.1).start()
    assert hb.set_state("running", step=1) is False
    _wait_for("a failed periodic beat", lambda: hb.failed_beats >= 3)  # the thread keeps at it
    began = time.monotonic()
    assert hb.leave() is False
    # leave() waits for the thread at most 2 beat timeouts and an interval, then beats once:
    # far less than 10 of those even on a busy machine, and a hang would never return.
    assert time.monotonic() - began < 10 * (3 * hb._timeout_s + hb.interval_s)
    assert hb.beats == 0 and hb.longest_gap_s == 0.0
    assert hb.last_error and "s3cret-pw" not in hb.last_error
    assert hb._thread is None
