"""A Redis Cluster that lost a node without a replica answers every command
with CLUSTERDOWN. That is the store failing, never an answer: ``exists`` must
not read it as "evicted", ``put`` not as a value refused, ``delete`` not as
done. Before the fix all three were taken as answers, and a LookupPrefix
during the outage removed the catalog entries of blocks the surviving nodes
still held (as if the store had evicted them)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
import torch

from tests.remote.conftest import redis_unavailable, remote_config, sample
from tests.remote.peers import RedisCluster
from tiermem.client import Client, KvBlock, KvScope, Tier, TiermemClientError
from tiermem.kv_keys import key_prefix
from tiermem.server.app import Daemon
from tiermem.server.config import RedisClusterConfig
from tiermem.server.model import Kind, ObjectKey
from tiermem.server.tiers.remote import remote_name
from tiermem.server.tiers.remote.base import RemoteError
from tiermem.server.tiers.remote.redis_cluster import RedisClusterBackend

MiB = 1 << 20
SCOPE = KvScope("down-model", dtype="float32")
SMALL_NODE = {
    "dram": {"capacity_bytes": 8 * MiB, "high_watermark": 0.6, "low_watermark": 0.3},
    "ssd": {"enabled": False},
}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[RedisCluster]:
    why = redis_unavailable()
    if why:
        pytest.skip(why)
    rc = RedisCluster(tmp_path / "rc").start()
    yield rc
    rc.stop()


def _port_of(rc: RedisCluster, names: list[str]) -> dict[str, int]:
    client = redis.RedisCluster(host="127.0.0.1", port=rc.ports[0])
    try:
        return {n: client.get_node_from_key(n).port for n in names}
    finally:
        client.close()


def test_the_backend_raises_for_every_command_a_down_cluster_answers(
    cluster: RedisCluster,
) -> None:
    backend = RedisClusterBackend(RedisClusterConfig(nodes=cluster.nodes), op_timeout_s=2.0)
    try:
        names = [f"down-test/{i}" for i in range(30)]
        values = [f"value {i}".encode() for i in range(30)]
        assert backend.put_many(names, values) == [True] * 30
        victim = cluster.ports[0]
        held = [n for n, port in _port_of(cluster, names).items() if port != victim]
        assert held
        cluster.kill_node(victim)
        cluster.wait_state("fail")
        with pytest.raises(RemoteError, match="ClusterDown"):
            backend.exists_many(held)
        with pytest.raises(RemoteError, match="ClusterDown"):
            backend.put_many(held[:1], [b"replacement"])
        with pytest.raises(RemoteError, match="ClusterDown"):
            backend.delete_many(held)
        cluster.restart()  # the victim comes back empty, the others kept theirs
        assert backend.exists_many(held) == [True] * len(held)
        got = backend.get_many(held)
        by_name = dict(zip(names, values, strict=True))
        for name, value in zip(held, got, strict=True):
            assert value is not None and bytes(value[0]) == by_name[name]
            backend.release(value[1])
    finally:
        backend.close()


def test_a_value_the_store_will_not_keep_is_still_a_refusal(cluster: RedisCluster) -> None:
    backend = RedisClusterBackend(RedisClusterConfig(nodes=cluster.nodes), op_timeout_s=2.0)
    try:
        for port in cluster.ports:  # full: SET answers OOM, the cluster is fine
            node = redis.Redis(port=port)
            node.config_set("maxmemory-policy", "noeviction")
            node.config_set("maxmemory", 1)
            node.close()
        assert backend.put_many(["oom/a", "oom/b"], [b"x" * 1000, b"y" * 1000]) == [False, False]
        assert backend.exists_many(["oom/a"]) == [False]
    finally:
        backend.close()


def test_a_prefix_lookup_while_the_cluster_is_down_forgets_no_block(
    cluster: RedisCluster, make_remote_daemon: Callable[..., Daemon]
) -> None:
    remote = remote_config(cluster, share=False)
    daemon = make_remote_daemon(
        "a", remote, tiers=SMALL_NODE, background={"migrate_interval_s": 60}
    )
    victim = cluster.ports[0]
    prefix = key_prefix(SCOPE.model, 1, 0, SCOPE.dtype, "")

    def name(h: int) -> str:
        key = ObjectKey("default", Kind.KV_BLOCK, f"{prefix}{h:016x}")
        return remote_name(remote["deployment"], key)

    # a chain whose blocks all live on nodes that survive
    candidates = list(range(1, 200))
    ports = _port_of(cluster, [name(h) for h in candidates])
    chain = [h for h in candidates if ports[name(h)] != victim][:4]
    filler = [h for h in candidates if h not in chain][:12]
    with Client(daemon.address) as client:
        for hashes in (chain, filler[:4], filler[4:8], filler[8:]):
            client.kv.put_blocks(
                SCOPE, [KvBlock(h, torch.full((MiB // 4,), float(h))) for h in hashes]
            )
            daemon.maintain()  # the oldest blocks go to the remote tier
        hit = client.kv.lookup_prefix(SCOPE, chain)
        assert hit.stored_chunks == 4 and set(hit.tiers) == {Tier.REMOTE}, hit
        cluster.kill_node(victim)
        cluster.wait_state("fail")
        with contextlib.suppress(TiermemClientError):  # may answer or refuse; not forget
            client.kv.lookup_prefix(SCOPE, chain)
        assert sample(daemon, "tiermem_remote_stale_entries_total") == 0
        cluster.restart()
        hit = client.kv.lookup_prefix(SCOPE, chain)
        assert hit.stored_chunks == 4, hit
        got = client.kv.get_blocks(SCOPE, chain)
        for h, block in zip(chain, got, strict=True):
            assert block.found
            assert torch.equal(block.tensor(), torch.full((MiB // 4,), float(h)))
