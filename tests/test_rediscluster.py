"""The list and stream buffers, unchanged, on a real 3-master Redis Cluster on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import torch
from redis.cluster import RedisCluster

from labkit.buffers.base import ExperienceBuffer
from labkit.buffers.frame import Experience
from labkit.buffers.kinds import open_buffer
from labkit.buffers.redis_list import list_key
from labkit.buffers.redis_stream import StreamBuffer, stream_key
from labkit.errors import ServiceError
from labkit.services.redis_cluster import BUS_OFFSET, RedisClusterServer, find_redis_cli

AGENTS = list(range(8))
M = 25


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisClusterServer]:
    with RedisClusterServer() as srv:
        yield srv


@pytest.fixture
def rc(cluster: RedisClusterServer) -> Iterator[RedisCluster]:
    client = cluster.client()
    client.flushall(target_nodes=RedisCluster.PRIMARIES)
    yield client
    client.close()


def exp(agent: int, seq: int) -> Experience:
    base = 1000 * agent + seq
    return Experience(agent, seq, policy_version=3, timestamp=float(base), tensors={
        "obs": torch.arange(4, dtype=torch.int32) + base,
        "r": torch.full((2, 3), base / 8, dtype=torch.bfloat16),
    })  # fmt: skip


def same(got: Experience, want: Experience) -> bool:
    return (
        (got.agent_id, got.seq, got.policy_version, got.timestamp)
        == (want.agent_id, want.seq, want.policy_version, want.timestamp)
        and list(got.tensors) == list(want.tensors)
        and all(
            got.tensors[n].dtype == t.dtype and torch.equal(got.tensors[n], t)
            for n, t in want.tensors.items()
        )
    )


def drain(buf: ExperienceBuffer, batch: int = 7) -> list[Experience]:
    got: list[Experience] = []
    while items := buf.pull(batch):
        got += items
        buf.ack(items)
    return got


@pytest.mark.slow
def test_cluster_is_up_with_three_masters(cluster: RedisClusterServer, rc: RedisCluster):
    assert len(cluster.nodes) == 3 and len(set(cluster.ports)) == 3
    assert all(p + BUS_OFFSET <= 65535 for p in cluster.ports)
    assert rc.cluster_info()["cluster_state"] == "ok"
    assert len(rc.get_primaries()) == 3
    assert cluster.password not in repr(cluster)
    by_url = RedisCluster.from_url(cluster.url)  # discovers the other nodes from the first
    by_url.set("x", "1")
    assert rc.get("x") == b"1" and len(by_url.get_primaries()) == 3
    by_url.close()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["list", "stream"])
def test_buffers_run_unchanged_on_the_cluster(cluster, rc, kind):
    producers = [open_buffer(kind, rc, agent_id=a) for a in AGENTS]
    for a, buf in enumerate(producers):
        for start in range(0, M, 10):  # a few batches each
            buf.push([exp(a, s) for s in range(start, min(start + 10, M))])

    key = list_key if kind == "list" else stream_key
    keys = [key("lab", a) for a in AGENTS]
    owners = {k: rc.get_node_from_key(k).name for k in keys}
    assert len(set(owners.values())) >= 2  # the agents' keys live on several shards
    for k in keys:
        assert rc.keyslot(k) == rc.keyslot("{" + k.split("{")[1])  # only the tag is hashed
    per_node = {n.port: n.client().dbsize() for n in cluster.nodes}
    assert sum(per_node.values()) == len(AGENTS) and sum(v > 0 for v in per_node.values()) >= 2

    learner = open_buffer(kind, rc, agent_id=0, agents=AGENTS)
    got = drain(learner)
    assert len(got) == len(AGENTS) * M
    assert len({(e.agent_id, e.seq) for e in got}) == len(got)  # no duplicates
    assert all(same(e, exp(e.agent_id, e.seq)) for e in got)  # exact payloads
    assert learner.pull(10) == [] and learner.stats().pulled == len(AGENTS) * M
    if isinstance(learner, StreamBuffer):
        assert learner.pending() == 0 and learner.stats().duplicates == 0


def test_stream_reclaim_works_on_the_cluster(rc):
    for a in AGENTS:
        StreamBuffer(rc, agent_id=a).push([exp(a, s) for s in range(5)])
    dead = StreamBuffer(rc, agent_id=0, agents=AGENTS, consumer="dead")
    lost = dead.pull(12)  # never acked
    heir = StreamBuffer(rc, agent_id=0, agents=AGENTS, consumer="heir")
    assert heir.reclaim(min_idle_ms=0) == len(lost) == 12
    got = drain(heir)
    assert sorted((e.agent_id, e.seq) for e in got) == [(a, s) for a in AGENTS for s in range(5)]
    assert heir.stats().redelivered == 12 and heir.pending() == 0


@pytest.mark.slow
def test_multi_key_commands_across_agents_fail_crossslot(cluster, rc):
    a, b = stream_key("lab", 0), stream_key("lab", 1)
    other = next(k for k in (stream_key("lab", i) for i in AGENTS) if rc.keyslot(k) != rc.keyslot(a))
    node = rc.get_node_from_key(a)
    direct = redis.Redis(host=node.host, port=node.port, password=cluster.password)
    with pytest.raises(redis.exceptions.ClusterCrossSlotError, match="same slot"):
        direct.delete(a, other)  # the server's "-CROSSSLOT Keys in request don't hash to ..."
    direct.close()
    pipe = rc.pipeline(transaction=True)  # why each buffer's MULTI touches one key only
    pipe.xlen(a)
    pipe.xlen(other)
    with pytest.raises(redis.exceptions.CrossSlotTransactionError):
        pipe.execute()
    # One agent's keys share the {tag}: multi-key commands on them are fine.
    assert rc.keyslot(a) == rc.keyslot(list_key("lab", 0)) != rc.keyslot(b)
    assert rc.exists(a, list_key("lab", 0)) == 0


@pytest.mark.slow
def test_stop_leaves_no_process_and_no_temp_dir():
    cluster = RedisClusterServer(masters=3).start()
    pids = [n.pid for n in cluster.nodes]
    dirs = [n.tmpdir for n in cluster.nodes]
    assert all(pids) and all(d is not None and (d / "nodes.conf").exists() for d in dirs)
    conf = (dirs[0] / "redis.conf").read_text()
    assert "cluster-enabled yes" in conf and "masterauth" in conf
    cluster.stop()
    cluster.stop()  # idempotent
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)
    assert not any(d.exists() for d in dirs if d is not None)
    with pytest.raises(ServiceError, match="not started"):
        _ = cluster.url


def test_clear_errors_when_redis_cli_fails_or_is_missing(tmp_path, monkeypatch):
    fake = tmp_path / "redis-cli"
    fake.write_text("#!/bin/sh\necho '[ERR] Node 127.0.0.1:1 is not empty.' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr("labkit.services.redis_cluster.find_redis_cli", lambda _binary: fake)
    cluster = RedisClusterServer()
    with pytest.raises(ServiceError, match=r"(?s)cluster create failed.*is not empty"):
        cluster.start()
    assert cluster.nodes == []  # the started nodes were stopped again
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    with pytest.raises(ServiceError, match="redis-cli not found"):
        find_redis_cli(tmp_path / "nowhere" / "redis-server")
    with pytest.raises(ServiceError, match="at least 3 masters"):
        RedisClusterServer(masters=2)
