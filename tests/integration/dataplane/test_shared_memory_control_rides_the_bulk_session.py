"""A local client's shared-memory control requests (Lease, Release, Reserve,
Commit) ride its bulk session when the daemon offers sessions: no gRPC call
per get or put, the same answers, the same authorization and lease ownership
as over gRPC. A daemon whose sessions do not take them is asked over gRPC."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tests.integration.dataplane.helpers import dataplane_stub, header, key, read_status, wait_for
from tests.integration.dataplane.test_bulk_sessions_authenticate_once_and_stay_exact import (
    TOKENS,
    open_session,
    sessions_opened,
)
from tiermem.client import Client, Kind, PermissionDeniedError
from tiermem.client.fastpath import ObjectRef, PutItem
from tiermem.client.fastpath.bulk import read_frame
from tiermem.client.fastpath.shm import Arena
from tiermem.dataplane_wire import OP_COMMIT, OP_LEASE, OP_RELEASE, OP_RESERVE, request
from tiermem.server.app import Daemon
from tiermem.v1 import dataplane_pb2

SHM_OPS = (OP_LEASE, OP_RELEASE, OP_RESERVE, OP_COMMIT)


def values(n: int, size: int) -> list[bytes]:
    rng = np.random.default_rng(n)
    return [rng.integers(0, 256, size, dtype=np.uint8).tobytes() for _ in range(n)]


def no_grpc_control(c: Client) -> list[str]:
    """Make the client's gRPC Lease/Release/Reserve/Commit fail loudly; returns
    the names of those called."""
    called: list[str] = []
    dp = c.dataplane._dp  # the stub the client would call

    def refuse(name: str) -> Any:
        def call(*_a: Any, **_k: Any) -> Any:
            called.append(name)
            raise AssertionError(f"{name} went over gRPC")

        call.future = call  # type: ignore[attr-defined]
        return call

    for name in ("Lease", "Release", "Reserve", "Commit"):
        setattr(dp, name, refuse(name))
    return called


def test_shm_gets_and_puts_need_no_grpc_call(daemon: Daemon) -> None:
    data = values(5, 300 << 10)
    with Client(daemon.address) as c:
        called = no_grpc_control(c)
        items = [PutItem(Kind.KV_BLOCK, f"k{i}", d) for i, d in enumerate(data)]
        c.dataplane.put_many(items, path="shm")
        refs = [ObjectRef(Kind.KV_BLOCK, f"k{i}") for i in range(len(data))]
        for _ in range(3):
            got = c.dataplane.get_many(refs, path="shm")
            assert [bytes(f.data) for f in got] == data
        assert c.path_stats()["shm"]["gets"] == 15 and called == []
        assert sessions_opened(daemon) == 1
    # every read lease is released (the last Release may still be in flight:
    # releases are sent without waiting for their answer)
    wait_for(lambda: daemon.store.leases.active == 0, "every read lease to be released")


def test_a_daemon_without_session_control_is_asked_over_grpc(daemon: Daemon) -> None:
    for op in SHM_OPS:
        daemon.bulk_sessions.unary.pop(op)
    data = values(3, 200 << 10)
    with Client(daemon.address) as c:
        items = [PutItem(Kind.KV_BLOCK, f"g{i}", d) for i, d in enumerate(data)]
        c.dataplane.put_many(items, path="shm")
        refs = [ObjectRef(Kind.KV_BLOCK, f"g{i}") for i in range(len(data))]
        assert [bytes(f.data) for f in c.dataplane.get_many(refs, path="shm")] == data
        assert c.path_stats()["shm"] == {
            "puts": 3,
            "gets": 3,
            "put_bytes": 3 * (200 << 10),
            "get_bytes": 3 * (200 << 10),
        }


def ask(sock: Any, op: int, msg: Any, reply: Any) -> Any:
    sock.sendall(request(op, msg.SerializeToString()))
    status = read_status(sock)
    if status.code != "OK":
        return status
    reply.ParseFromString(read_frame(sock, 1 << 20))
    return reply


def test_session_control_is_authorized_and_bound_to_the_session_owner(
    make_daemon: Callable[..., Daemon],
) -> None:
    tokens = [
        *TOKENS,
        {"name": "bob", "token": "t-bob", "namespaces": ["a"], "roles": ["read", "write"]},
    ]
    daemon = make_daemon(namespaces=["default", "a"], security={"tokens": tokens})
    alice, opened = open_session(daemon, b"Bearer t-alice")
    bob, bob_opened = open_session(daemon, b"Bearer t-bob")
    assert opened.code == bob_opened.code == "OK"
    value = b"\x05" * (256 << 10)
    with alice, bob:
        put = header("x", len(value))
        put.key.namespace = "a"
        reserved = ask(
            alice,
            OP_RESERVE,
            dataplane_pb2.ReserveRequest(objects=[put]),
            dataplane_pb2.ReserveResponse(),
        )
        lease = reserved.leases[0]
        with dataplane_stub(daemon) as stub:
            hello = stub.Hello(
                dataplane_pb2.HelloRequest(), metadata=[("authorization", "Bearer t-alice")]
            )
            arena = Arena(hello.arena)
        arena.region(lease.offset, lease.length)[:] = np.frombuffer(value, dtype=np.uint8)
        commit = dataplane_pb2.CommitRequest(
            items=[dataplane_pb2.CommitItem(lease_id=lease.lease_id)]
        )
        stolen = ask(bob, OP_COMMIT, commit, dataplane_pb2.CommitResponse())
        assert stolen.code in ("NOT_FOUND", "PERMISSION_DENIED", "FAILED_PRECONDITION"), stolen
        done = ask(alice, OP_COMMIT, commit, dataplane_pb2.CommitResponse())
        assert done.metas[0].size_bytes == len(value)
        other = key("x")  # namespace "default": not granted to alice
        refused = ask(
            alice, OP_LEASE, dataplane_pb2.LeaseRequest(keys=[other]), dataplane_pb2.LeaseResponse()
        )
        assert refused.code == "PERMISSION_DENIED"
        assert len(refused.request_id) == 16  # refusals name the request, as over gRPC
        mine = key("x")
        mine.namespace = "a"
        leased = ask(
            alice, OP_LEASE, dataplane_pb2.LeaseRequest(keys=[mine]), dataplane_pb2.LeaseResponse()
        )
        assert leased.leases[0].length == len(value) and daemon.store.leases.active == 1
        release = dataplane_pb2.ReleaseRequest(lease_ids=[leased.leases[0].lease_id])
        not_bobs = ask(bob, OP_RELEASE, release, dataplane_pb2.ReleaseResponse())
        assert isinstance(not_bobs, dataplane_pb2.TransferStatus) and not_bobs.code != "OK"
        assert daemon.store.leases.active == 1
        assert ask(alice, OP_RELEASE, release, dataplane_pb2.ReleaseResponse()).released == 1
    with Client(daemon.address, token="t-alice", namespace="a") as c:
        assert c.get(Kind.KV_BLOCK, "x") == value
        with pytest.raises(PermissionDeniedError):
            c.get(Kind.KV_BLOCK, "x", namespace="default")


def test_releases_sent_without_waiting_are_answered_before_the_next_request(
    daemon: Daemon,
) -> None:
    """A read lease's release goes out without a round trip; its answer is read
    before the session's next request, so replies never get out of step."""
    data = values(2, 256 << 10)
    with Client(daemon.address) as c:
        items = [PutItem(Kind.KV_BLOCK, f"r{i}", d) for i, d in enumerate(data)]
        c.dataplane.put_many(items, path="shm")
        for _ in range(20):
            got = c.dataplane.get_many([ObjectRef(Kind.KV_BLOCK, "r0")], path="shm")
            assert bytes(got[0].data) == data[0]
            # interleaved with requests of every other kind on the same session
            assert (
                bytes(c.dataplane.get_many([ObjectRef(Kind.KV_BLOCK, "r1")], path="bulk")[0].data)
                == data[1]
            )
            c.dataplane.put_many([PutItem(Kind.KV_BLOCK, "r2", data[0])], path="bulk")
        assert sessions_opened(daemon) == 1
        wait_for(lambda: daemon.store.leases.active == 0, "the last release to be served")


def test_with_every_bulk_connection_taken_shm_control_goes_over_grpc(
    make_daemon: Callable[..., Daemon],
) -> None:
    """Sessions hold bulk connection slots; when the daemon has none left the
    client's shared-memory gets and puts still work, negotiated over gRPC."""
    daemon = make_daemon(dataplane={"bulk": {"max_connections": 1}})
    holder, opened = open_session(daemon)  # takes the only slot
    assert opened.code == "OK"
    data = values(2, 300 << 10)
    with holder, Client(daemon.address) as c:
        items = [PutItem(Kind.KV_BLOCK, f"full{i}", d) for i, d in enumerate(data)]
        c.dataplane.put_many(items, path="shm")
        refs = [ObjectRef(Kind.KV_BLOCK, f"full{i}") for i in range(len(data))]
        assert [bytes(f.data) for f in c.dataplane.get_many(refs, path="shm")] == data
        assert c.path_stats()["shm"]["gets"] == 2
