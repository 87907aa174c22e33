"""A raw RESP read (``resp.RawGetter``) that cannot reach the node redis-py's
slot map names for a value (stopped, failed over, its slots moved) refreshes
the slot map, as redis-py's own commands do after a connection error, and
reads the value once more from the node that owns its slot now. Before, the
read failed on every try until something else refreshed the map (the test
clusters have no replicas, so a failover is played by moving a slot and
stopping its old node, or by a stale entry naming a port nobody listens on).
"""

from __future__ import annotations

import os
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.remote.conftest import new_peer
from tests.remote.peers import RedisCluster
from tests.remote.test_redis_reads_land_in_reused_buffers_and_follow_moved_slots import (
    PrefixLander,
    _backend,
    _move_slot,
)
from tiermem.server.tiers.remote.redis_cluster import RedisClusterBackend
from tiermem.server.tiers.remote.resp import BufferPool, RawGetter, Unreachable

MiB = 1 << 20


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[RedisCluster]:
    """A cluster of the test's own (one of its nodes is stopped)."""
    peer = new_peer("redis_cluster", tmp_path / "redis")
    if not isinstance(peer, RedisCluster):
        raise TypeError("new_peer gave another store")
    peer.start()
    try:
        yield peer
    finally:
        peer.stop()


def _dead_port() -> int:
    """A port of 127.0.0.1 nobody listens on (connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _owner(backend: RedisClusterBackend, name: str) -> int:
    port: int = backend._client.get_node_from_key(name).port
    return port


def _point_slot_at(backend: RedisClusterBackend, name: str, port: int) -> None:
    """Make the backend's slot map name ``port`` as the owner of ``name``'s slot."""
    from redis.cluster import ClusterNode

    client = backend._client
    node = ClusterNode("127.0.0.1", port, server_type="primary")  # type: ignore[no-untyped-call]
    client.nodes_manager.slots_cache[client.keyslot(name)] = [node]


def test_a_refused_connection_is_reported_as_an_unreachable_node() -> None:
    getter = RawGetter(2.0, "", BufferPool())
    try:
        with pytest.raises(Unreachable):
            getter.get(["k"], [("127.0.0.1", _dead_port())])
    finally:
        getter.close()


def test_a_read_from_a_node_that_is_gone_refreshes_the_map_and_reads_the_owner(
    cluster: RedisCluster,
) -> None:
    backend = _backend(cluster)
    try:
        names = [f"t/{uuid.uuid4().hex}/{i}" for i in range(4)]
        values = [b"LAND" + os.urandom(12 + MiB) for _ in names]
        assert backend.put_many(names, values) == [True] * len(names)
        owner = _owner(backend, names[0])
        _point_slot_at(backend, names[0], _dead_port())  # a stale map
        got = backend.get_many(names)
        assert [bytes(g[0]) for g in got if g is not None] == values
        assert _owner(backend, names[0]) == owner  # the map was refreshed
        # with a lander: the second try reads values whole (nothing lands twice)
        _point_slot_at(backend, names[1], _dead_port())
        into = backend.get_many_into(names, PrefixLander(declined=-1))
        assert [bytes(g[0]) for g in into if isinstance(g, tuple)] == values
    finally:
        backend.close()


def test_a_stopped_node_whose_slot_moved_is_read_around(cluster: RedisCluster) -> None:
    backend = _backend(cluster)
    try:
        name = f"t/{uuid.uuid4().hex}"
        value = os.urandom(MiB)
        assert backend.put_many([name], [value]) == [True]
        old = _owner(backend, name)
        _move_slot(cluster, name)  # the backend's map still names the old owner
        for port in cluster.ports:  # the others keep serving once it is marked failed
            subprocess.run(
                ["redis-cli", "-p", str(port), "CONFIG", "SET", "cluster-require-full-coverage",
                 "no"],
                check=True, capture_output=True,
            )  # fmt: skip
        cluster.kill_node(old)
        got = backend.get_many([name])[0]
        assert got is not None and bytes(got[0]) == value
        assert _owner(backend, name) != old
    finally:
        backend.close()
