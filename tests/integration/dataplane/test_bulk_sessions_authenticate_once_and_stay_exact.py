"""Bulk sessions: the client opens one per connection with its credentials and
then puts and gets without a gRPC call each, byte-exact. Every request is
checked like its gRPC twin; a malformed request gets INVALID_ARGUMENT and the
session is closed with nothing stored; idle sessions expire (the client opens
a new one); a daemon without sessions is served through tickets."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

import numpy as np
import pytest

from tests.integration.dataplane.helpers import MiB, header, key, read_status, wait_for
from tiermem.client import Client, Kind, NotFoundError, TiermemClientError
from tiermem.client.fastpath import ObjectRef, PutItem
from tiermem.dataplane_wire import (
    FLAG_ACCEPT_WITH_RESULT,
    OP_GET,
    OP_PUT,
    SESSION_TICKET,
    frame,
    preamble,
    request,
)
from tiermem.server.app import Daemon
from tiermem.v1 import dataplane_pb2

TOKENS = [
    {"name": "alice", "token": "t-alice", "namespaces": ["a"], "roles": ["read", "write"]},
]


def sessions_opened(daemon: Daemon) -> int:
    return int(daemon.metrics.bulk_sessions._value.get())


def open_session(
    daemon: Daemon, credential: bytes = b"", acting: bytes = b""
) -> tuple[socket.socket, dataplane_pb2.TransferStatus]:
    dp = daemon.dataplane
    assert dp is not None
    host, _, port = dp.transfers.address.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.sendall(preamble(SESSION_TICKET, credential) + frame(acting))
    return sock, read_status(sock)


def closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def values(n: int, size: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size, dtype=np.uint8).tobytes() for _ in range(n)]


def test_puts_and_gets_round_trip_byte_exact_through_one_session(
    daemon: Daemon, client: Client
) -> None:
    sizes = [1, 100 << 10, 256 << 10, 3 * MiB + 7]  # inline and streamed values
    data = [v[:s] for v, s in zip(values(len(sizes), max(sizes), 1), sizes, strict=True)]
    items = [PutItem(Kind.KV_BLOCK, f"s{i}", d) for i, d in enumerate(data)]
    infos = client.dataplane.put_many(items, path="bulk")
    assert [i.size_bytes for i in infos] == sizes
    refs = [ObjectRef(Kind.KV_BLOCK, f"s{i}") for i in range(len(sizes))]
    for _ in range(3):
        got = client.dataplane.get_many(refs, path="bulk")
        assert [bytes(f.data) for f in got] == data
    single = client.dataplane.get_many(refs[2:3], out=[bytearray(300 << 10)], path="bulk")
    assert bytes(single[0].data) == data[2]
    assert sessions_opened(daemon) == 1  # one authentication for every request
    assert client.path_stats()["bulk"]["puts"] >= 3
    with pytest.raises(NotFoundError):
        client.dataplane.get_many([ObjectRef(Kind.KV_BLOCK, "absent")], path="bulk")
    assert bytes(client.dataplane.get_many(refs[:1], path="bulk")[0].data) == data[0]
    assert sessions_opened(daemon) == 1  # a refused request leaves the session open


@pytest.mark.parametrize(
    "bad",
    [
        request(OP_PUT, b"\xff\xff\xff"),  # not a BeginPutRequest
        request(OP_GET, b"\x0a\x05trunc"),  # a truncated key
        bytes([9, 0, 0, 0]) + (4).to_bytes(4, "little") + b"oops",  # unknown op
        bytes([OP_PUT, 0, 0, 0]) + (1 << 30).to_bytes(4, "little"),  # oversize
    ],
)
def test_a_malformed_request_gets_invalid_argument_and_ends_the_session(
    daemon: Daemon, client: Client, bad: bytes
) -> None:
    client.put(Kind.KV_BLOCK, "kept", b"k" * (200 << 10))
    sock, opened = open_session(daemon)
    assert opened.code == "OK"
    with sock:
        sock.sendall(bad)
        status = read_status(sock)
        assert status.code == "INVALID_ARGUMENT", status
        assert "session closed" in status.message
        assert closed(sock)
    assert client.get(Kind.KV_BLOCK, "kept") == b"k" * (200 << 10)
    dp = daemon.dataplane
    assert dp is not None and dp.budget.used_bytes == 0


def test_a_session_put_cut_off_midway_stores_nothing(daemon: Daemon) -> None:
    sock, opened = open_session(daemon)
    assert opened.code == "OK"
    put = dataplane_pb2.BeginPutRequest(objects=[header("cut", 2 * MiB)])
    with sock:
        sock.sendall(request(OP_PUT, put.SerializeToString()))
        assert read_status(sock).code == "OK"
        sock.sendall(b"\x01" * MiB)
    dp = daemon.dataplane
    assert dp is not None
    wait_for(lambda: dp.budget.used_bytes == 0, "the broken put to give back its space")
    with Client(daemon.address) as c, pytest.raises(NotFoundError):
        c.stat(Kind.KV_BLOCK, "cut")


def test_sessions_need_valid_credentials_and_check_every_namespace(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(namespaces=["default", "a"], security={"tokens": TOKENS})
    for credential in (b"", b"Bearer wrong"):
        sock, status = open_session(daemon, credential)
        with sock:
            assert status.code == "UNAUTHENTICATED", status
            assert closed(sock)
    sock, status = open_session(daemon, b"Bearer t-alice")
    assert status.code == "OK"
    with sock:
        get = dataplane_pb2.BeginGetRequest(keys=[key("x")])  # namespace "default"
        sock.sendall(request(OP_GET, get.SerializeToString()))
        refused = read_status(sock)
        assert refused.code == "PERMISSION_DENIED", refused
        mine = dataplane_pb2.BeginGetRequest(keys=[key("x")])
        mine.keys[0].namespace = "a"
        sock.sendall(request(OP_GET, mine.SerializeToString()))
        assert read_status(sock).code == "NOT_FOUND"  # still open, checked as alice
    with Client(daemon.address, token="t-alice", namespace="a") as c:
        c.dataplane.put_many([PutItem(Kind.KV_BLOCK, "y", b"y" * (300 << 10))], path="bulk")
        got = c.dataplane.get_many([ObjectRef(Kind.KV_BLOCK, "y")], path="bulk")
        assert bytes(got[0].data) == b"y" * (300 << 10)
        with pytest.raises(TiermemClientError) as info:
            c.dataplane.get_many([ObjectRef(Kind.KV_BLOCK, "y", namespace="default")], path="bulk")
        assert info.value.code == "PERMISSION_DENIED"
    assert sessions_opened(daemon) == 2


def test_an_idle_session_expires_and_the_client_opens_a_new_one(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(dataplane={"bulk": {"idle_timeout_s": 0.3}})
    sock, status = open_session(daemon)
    assert status.code == "OK"
    with sock:
        sock.settimeout(10)
        assert closed(sock)  # the daemon closed it after 0.3 s without a request
    with Client(daemon.address) as c:
        c.dataplane.put_many([PutItem(Kind.KV_BLOCK, "z", b"1" * (300 << 10))], path="bulk")
        time.sleep(0.6)
        c.dataplane.put_many([PutItem(Kind.KV_BLOCK, "z", b"2" * (300 << 10))], path="bulk")
        assert c.get(Kind.KV_BLOCK, "z") == b"2" * (300 << 10)
    assert sessions_opened(daemon) == 3


def test_a_daemon_without_sessions_is_served_through_tickets(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(dataplane={"bulk": {"sessions": False}})
    sock, status = open_session(daemon)
    with sock:
        assert status.code == "NOT_FOUND"
    with Client(daemon.address) as c:
        data = values(2, 400 << 10, 5)
        c.dataplane.put_many(
            [PutItem(Kind.KV_BLOCK, f"t{i}", d) for i, d in enumerate(data)], path="bulk"
        )
        got = c.dataplane.get_many([ObjectRef(Kind.KV_BLOCK, f"t{i}") for i in range(2)])
        assert [bytes(f.data) for f in got] == data
        assert c.path_stats()["bulk"]["gets"] == 2 or c.path_stats()["shm"]["gets"] == 2
    assert sessions_opened(daemon) == 0
    assert daemon.metrics.bulk_transfers.labels("put", "ok")._value.get() == 1


@pytest.mark.parametrize("size", [256 << 10, 6 * MiB])  # bytes sent with the request, or after OK
def test_a_refused_put_leaves_the_session_in_step(
    daemon: Daemon, client: Client, size: int
) -> None:
    old, new = values(2, size, 6)
    client.dataplane.put_many([PutItem(Kind.KV_BLOCK, "first", old)], path="bulk")
    with pytest.raises(TiermemClientError) as info:
        client.dataplane.put_many(
            [PutItem(Kind.KV_BLOCK, "first", new, if_absent=True)], path="bulk"
        )
    assert info.value.code == "ALREADY_EXISTS"
    client.dataplane.put_many([PutItem(Kind.KV_BLOCK, "second", new)], path="bulk")
    got = client.dataplane.get_many(
        [ObjectRef(Kind.KV_BLOCK, "first"), ObjectRef(Kind.KV_BLOCK, "second")], path="bulk"
    )
    assert [bytes(f.data) for f in got] == [old, new]
    assert sessions_opened(daemon) == 1


def test_a_pipelined_put_flagged_so_gets_its_acceptance_with_its_result(daemon: Daemon) -> None:
    """With FLAG_ACCEPT_WITH_RESULT the daemon holds a pipelined put's "OK" back
    until the bytes are committed and sends both statuses in one reply; without
    the flag (older clients) the "OK" comes at once, before any byte is sent."""
    sock, opened = open_session(daemon)
    assert opened.code == "OK"
    value = b"\x07" * (300 << 10)
    with sock:
        sock.sendall(
            request(
                OP_PUT,
                dataplane_pb2.BeginPutRequest(
                    objects=[header("flagged", len(value))]
                ).SerializeToString(),
                FLAG_ACCEPT_WITH_RESULT,
            )
        )
        sock.settimeout(0.5)
        with pytest.raises(TimeoutError):  # nothing before the bytes arrived
            sock.recv(1)
        sock.settimeout(10)
        sock.sendall(value)
        accepted, final = read_status(sock), read_status(sock)
        assert accepted.code == "OK" and not accepted.metas
        assert final.code == "OK" and final.metas[0].size_bytes == len(value)
        refused = dataplane_pb2.BeginPutRequest(objects=[header("", 10)])  # no key
        sock.sendall(request(OP_PUT, refused.SerializeToString(), FLAG_ACCEPT_WITH_RESULT))
        sock.sendall(b"x" * 10)
        assert read_status(sock).code == "INVALID_ARGUMENT"  # a refusal comes alone
        unflagged = dataplane_pb2.BeginPutRequest(objects=[header("plain", 10)])
        sock.sendall(request(OP_PUT, unflagged.SerializeToString()))
        assert read_status(sock).code == "OK"  # before the bytes
        sock.sendall(b"y" * 10)
        assert read_status(sock).code == "OK"
    with Client(daemon.address) as c:
        assert c.get(Kind.KV_BLOCK, "flagged") == value
        assert c.get(Kind.KV_BLOCK, "plain") == b"y" * 10
