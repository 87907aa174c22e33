"""The Redis Cluster backend reads values over raw RESP connections into reused
buffers (``tiers/remote/resp.py``): values come back byte-exact, a missing name
is None, released buffers are reused, a slot moved to another node (MOVED) is
followed through redis-py, and a reply cut short is an error, never a shorter
value. With a lander (``get_many_into``), a value's bytes past its head are
received straight into the buffer the lander gives for it; values it declines
come whole, as without one."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.remote.conftest import new_peer
from tests.remote.peers import RedisCluster
from tiermem.server.config import RedisClusterConfig
from tiermem.server.tiers.remote.base import LANDED
from tiermem.server.tiers.remote.redis_cluster import RedisClusterBackend
from tiermem.server.tiers.remote.resp import BufferPool, RawGetter, Redirected, RespError

MiB = 1 << 20


def _own_cluster(directory: Path) -> Iterator[RedisCluster]:
    peer = new_peer("redis_cluster", directory)
    if not isinstance(peer, RedisCluster):
        raise TypeError("new_peer gave another store")
    peer.start()
    try:
        yield peer
    finally:
        peer.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    yield from _own_cluster(tmp_path_factory.mktemp("redis"))


def _backend(peer: RedisCluster) -> RedisClusterBackend:
    return RedisClusterBackend(RedisClusterConfig(nodes=peer.nodes), op_timeout_s=2.0)


def test_values_are_byte_exact_missing_ones_none_and_buffers_reused(
    cluster: RedisCluster,
) -> None:
    backend = _backend(cluster)
    try:
        names = [f"t/{uuid.uuid4().hex}/{i}" for i in range(12)]
        values = [os.urandom(MiB + i * 4099) for i in range(len(names))]
        assert backend.put_many(names, values) == [True] * len(names)
        got = backend.get_many([*names, "t/absent"])
        assert got[-1] is None
        owners = []
        for item, value in zip(got[:-1], values, strict=True):
            assert item is not None
            view, owner = item
            assert bytes(view) == value
            owners.append(owner)
        for owner in owners:
            backend.release(owner)
        again = backend.get_many(names)
        reused = {id(item[1]) for item in again if item is not None} & {id(o) for o in owners}
        assert reused, "released buffers were not reused"
        assert [bytes(item[0]) for item in again if item is not None] == values
    finally:
        backend.close()


class PrefixLander:
    """Lands values that start with b"LAND" past their first 16 bytes, except
    the one at ``declined``."""

    head_bytes = 4

    def __init__(self, declined: int) -> None:
        self.declined = declined
        self.heads: dict[int, bytes] = {}
        self.buffers: dict[int, bytearray] = {}

    def head_length(self, index: int, fixed: memoryview, value_len: int) -> int:
        return 16 if bytes(fixed) == b"LAND" else -1

    def target(self, index: int, head: memoryview, value_len: int) -> memoryview | None:
        self.heads[index] = bytes(head)
        if index == self.declined:
            return None
        self.buffers[index] = bytearray(value_len - len(head))
        return memoryview(self.buffers[index])


def test_payloads_land_past_their_head_in_the_buffers_the_lander_gives(
    cluster: RedisCluster,
) -> None:
    backend = _backend(cluster)
    try:
        names = [f"t/{uuid.uuid4().hex}/{i}" for i in range(6)]
        values = [b"LAND" + os.urandom(12 + MiB + i * 4099) for i in range(len(names))]
        values[4] = os.urandom(MiB)  # no head the lander knows
        assert backend.put_many(names, values) == [True] * len(names)
        lander = PrefixLander(declined=2)
        got = backend.get_many_into([*names, "t/absent"], lander)
        assert got[-1] is None
        for i, value in enumerate(values):
            item = got[i]
            if i in (2, 4):  # declined, or not landable: whole, as get_many gives it
                assert isinstance(item, tuple) and bytes(item[0]) == value
                backend.release(item[1])
            else:
                assert item is LANDED
                assert lander.heads[i] == value[:16]
                assert bytes(lander.buffers[i]) == value[16:]
        assert sorted(lander.heads) == [0, 1, 2, 3, 5]
    finally:
        backend.close()


def _cli(peer: RedisCluster, port: int, *args: str) -> str:
    out = subprocess.run(
        ["redis-cli", "-p", str(port), *args], check=True, capture_output=True, text=True
    )
    return out.stdout.strip()


def _move_slot(peer: RedisCluster, key: str) -> None:
    """Migrate the slot holding ``key`` (and the key) to another node, as a
    resharding does."""
    slot = _cli(peer, peer.ports[0], "CLUSTER", "KEYSLOT", key)
    owners = {p: _cli(peer, p, "CLUSTER", "MYID") for p in peer.ports}  # port -> node id
    src = next(p for p in peer.ports if _cli(peer, p, "CLUSTER", "COUNTKEYSINSLOT", slot) != "0")
    dst = next(p for p in peer.ports if p != src)
    _cli(peer, dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", owners[src])
    _cli(peer, src, "CLUSTER", "SETSLOT", slot, "MIGRATING", owners[dst])
    _cli(peer, src, "MIGRATE", "127.0.0.1", str(dst), "", "0", "5000", "KEYS", key)
    for p in peer.ports:
        _cli(peer, p, "CLUSTER", "SETSLOT", slot, "NODE", owners[dst])


def test_a_moved_slot_is_followed_through_the_cluster_client(cluster: RedisCluster) -> None:
    backend = _backend(cluster)
    try:
        name = f"t/{uuid.uuid4().hex}"
        value = os.urandom(MiB)
        assert backend.put_many([name], [value]) == [True]
        assert (got := backend.get_many([name])[0]) is not None and bytes(got[0]) == value
        _move_slot(cluster, name)
        # the backend's slot map still names the old node, which answers MOVED
        first = backend.get_many([name])[0]
        assert first is not None and bytes(first[0]) == value
        second = backend.get_many([name])[0]  # redis-py refreshed its map meanwhile
        assert second is not None and bytes(second[0]) == value
    finally:
        backend.close()


def test_an_error_reply_is_a_redirection_for_the_caller_to_follow(
    cluster: RedisCluster,
) -> None:
    getter = RawGetter(2.0, "", BufferPool())
    try:
        wrong = [("127.0.0.1", port) for port in cluster.ports]
        name = f"t/{uuid.uuid4().hex}"
        # one of the three nodes does not own the name's slot: it answers MOVED
        # even though the key does not exist
        with pytest.raises(Redirected):
            for node in wrong:
                getter.get([name], [node])
    finally:
        getter.close()


def _server(reply: bytes) -> tuple[socket.socket, threading.Thread]:
    """A TCP server on 127.0.0.1 that reads one request, sends ``reply`` and closes."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener, thread


@pytest.mark.parametrize(
    "reply",
    [b"$100\r\n" + b"x" * 50, b"$10\r\n0123456789XY", b"+OK\r\n", b"$notanumber\r\n"],
    ids=["cut-short", "no-crlf-after-value", "not-a-bulk-reply", "bad-length"],
)
def test_a_broken_reply_is_an_error_and_never_a_partial_value(reply: bytes) -> None:
    listener, thread = _server(reply)
    pool = BufferPool()
    getter = RawGetter(2.0, "", pool)
    try:
        with pytest.raises(RespError):
            getter.get(["k"], [listener.getsockname()[:2]])
    finally:
        getter.close()
        listener.close()
        thread.join(5)
