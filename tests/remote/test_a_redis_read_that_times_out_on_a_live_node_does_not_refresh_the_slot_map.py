"""A raw RESP read that times out on a node (slow but alive: it took the
connection and has not answered) is an ordinary read failure: the backend
raises RemoteError without refreshing redis-py's slot map or reading a
second time. Before, a timeout was ``Unreachable`` like a refused, reset or
closed connection: each refreshed the map and read once more, so a slow node
cost a map refresh and a second full timeout. A refused connection still
refreshes the map and reads the owner it names then."""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.remote.conftest import new_peer
from tests.remote.peers import RedisCluster
from tests.remote.test_a_redis_read_from_a_node_that_is_gone_refreshes_the_slot_map import (
    _dead_port,
    _owner,
    _point_slot_at,
)
from tests.remote.test_redis_reads_land_in_reused_buffers_and_follow_moved_slots import _backend
from tiermem.server.tiers.remote.base import RemoteError
from tiermem.server.tiers.remote.redis_cluster import RedisClusterBackend
from tiermem.server.tiers.remote.resp import BufferPool, RawGetter, RespError, Unreachable

READ_TIMEOUT_S = 0.5


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port of 127.0.0.1 that takes connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield int(server.getsockname()[1])
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        server.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[RedisCluster]:
    peer = new_peer("redis_cluster", tmp_path / "redis")
    if not isinstance(peer, RedisCluster):
        raise TypeError("new_peer gave another store")
    peer.start()
    try:
        yield peer
    finally:
        peer.stop()


def _count_refreshes(backend: RedisClusterBackend, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    manager = backend._client.nodes_manager
    real = manager.initialize
    calls: list[int] = []

    def initialize(*args: object, **kw: object) -> object:
        calls.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(manager, "initialize", initialize)
    return calls


def test_a_read_timeout_is_an_ordinary_error_not_an_unreachable_node(silent_port: int) -> None:
    getter = RawGetter(READ_TIMEOUT_S, "", BufferPool())
    try:
        with pytest.raises(RespError) as info:
            getter.get(["k"], [("127.0.0.1", silent_port)])
        assert not isinstance(info.value, Unreachable)
    finally:
        getter.close()


def test_a_slow_node_fails_the_read_without_a_refresh_and_a_refused_one_refreshes(
    cluster: RedisCluster, silent_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = _backend(cluster)  # op_timeout_s=2.0: the raw reads' socket timeout
    try:
        name = f"t/{uuid.uuid4().hex}"
        value = os.urandom(4096)
        assert backend.put_many([name], [value]) == [True]
        owner = _owner(backend, name)
        refreshes = _count_refreshes(backend, monkeypatch)

        _point_slot_at(backend, name, silent_port)  # the map names a node that is slow
        started = time.monotonic()
        with pytest.raises(RemoteError):
            backend.get_many([name])
        assert refreshes == []  # no refresh, no second read
        assert time.monotonic() - started < 2 * 2.0  # one timeout, not two
        assert _owner(backend, name) == silent_port

        _point_slot_at(backend, name, _dead_port())  # a node that is gone
        got = backend.get_many([name])[0]
        assert got is not None and bytes(got[0]) == value
        assert refreshes == [1]
        assert _owner(backend, name) == owner
    finally:
        backend.close()
