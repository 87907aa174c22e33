"""A client's Stat, Delete and List and its small puts ride its bulk session
when the daemon offers sessions: no gRPC call each, the same answers and
refusals, the same authorization and session scoping as over gRPC. Small
values of one ``put_many`` travel together and are committed as one unit. A
daemon whose sessions do not take these ops is asked over gRPC."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.integration.dataplane.helpers import wait_for
from tests.integration.dataplane.test_bulk_sessions_authenticate_once_and_stay_exact import (
    TOKENS,
    open_session,
    sessions_opened,
)
from tests.integration.dataplane.test_shared_memory_control_rides_the_bulk_session import ask
from tiermem.client import (
    AlreadyExistsError,
    Client,
    Durability,
    Kind,
    NotFoundError,
    PermissionDeniedError,
    Profile,
)
from tiermem.client.fastpath import PutItem
from tiermem.dataplane_wire import OP_DELETE, OP_LIST, OP_STAT
from tiermem.server.app import Daemon
from tiermem.v1 import object_pb2

OBJECT_OPS = (OP_STAT, OP_DELETE, OP_LIST)


def no_grpc_objects(c: Client) -> list[str]:
    """Make the client's gRPC ObjectService calls fail loudly; returns the
    names of those called."""
    called: list[str] = []

    def refuse(name: str) -> Any:
        def call(*_a: Any, **_k: Any) -> Any:
            called.append(name)
            raise AssertionError(f"{name} went over gRPC")

        return call

    for stub in (c._objects, c.dataplane._objects):
        for name in ("Put", "Stat", "Delete", "List"):
            setattr(stub, name, refuse(name))
    return called


def test_small_puts_and_metadata_calls_need_no_grpc_call(daemon: Daemon) -> None:
    with Client(daemon.address) as c:
        called = no_grpc_objects(c)
        infos = c.dataplane.put_many(
            [PutItem(Kind.SCRATCH, f"s{i}", bytes([i]) * (100 + i)) for i in range(5)]
        )
        assert [i.size_bytes for i in infos] == [100 + i for i in range(5)]
        c.put(Kind.SCRATCH, "one", b"tiny", profile=Profile(durability=Durability.CACHE))
        assert c.stat(Kind.SCRATCH, "s3").size_bytes == 103
        assert c.get(Kind.SCRATCH, "s3") == bytes([3]) * 103
        listed = sorted(i.key for i in c.list(kind=Kind.SCRATCH, page_size=2))
        assert listed == ["one", "s0", "s1", "s2", "s3", "s4"]  # three pages
        assert c.delete(Kind.SCRATCH, "s0") is True
        assert c.delete(Kind.SCRATCH, "s0") is False
        with pytest.raises(NotFoundError):
            c.stat(Kind.SCRATCH, "s0")
        assert called == []
        assert c.path_stats()["bulk"]["puts"] == 6
    assert sessions_opened(daemon) == 1


def test_a_refused_small_batch_stores_none_of_it(daemon: Daemon) -> None:
    with Client(daemon.address) as c:
        no_grpc_objects(c)
        c.put(Kind.SCRATCH, "taken", b"first")
        batch = [
            PutItem(Kind.SCRATCH, "fresh", b"new"),
            PutItem(Kind.SCRATCH, "taken", b"second", if_absent=True),
        ]
        with pytest.raises(AlreadyExistsError):
            c.dataplane.put_many(batch)
        assert c.get(Kind.SCRATCH, "taken") == b"first"
        with pytest.raises(NotFoundError):
            c.stat(Kind.SCRATCH, "fresh")


def test_a_daemon_without_session_object_ops_is_asked_over_grpc(daemon: Daemon) -> None:
    for op in OBJECT_OPS:
        daemon.bulk_sessions.unary.pop(op)
    with Client(daemon.address) as c:
        c.put(Kind.SCRATCH, "k", b"value")
        assert c.stat(Kind.SCRATCH, "k").size_bytes == 5
        assert [i.key for i in c.list(kind=Kind.SCRATCH)] == ["k"]
        assert c.delete(Kind.SCRATCH, "k") is True
        assert c.dataplane._session_ops_refused == set(OBJECT_OPS)
        with pytest.raises(NotFoundError):
            c.stat(Kind.SCRATCH, "k")


def test_session_object_ops_are_authorized_per_namespace(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(namespaces=["default", "a"], security={"tokens": TOKENS})
    with Client(daemon.address, namespace="a", token="t-alice") as alice:
        no_grpc_objects(alice)
        alice.put(Kind.SCRATCH, "mine", b"x" * 10)
        assert alice.stat(Kind.SCRATCH, "mine").size_bytes == 10
        with pytest.raises(PermissionDeniedError):
            alice.stat(Kind.SCRATCH, "mine", namespace="default")
        with pytest.raises(PermissionDeniedError):
            alice.put(Kind.SCRATCH, "theirs", b"y", namespace="default")
        with pytest.raises(PermissionDeniedError):
            list(alice.list(namespace="default"))
    sock, opened = open_session(daemon, b"Bearer t-alice")
    with sock:
        assert opened.code == "OK"
        stat = object_pb2.StatRequest()
        stat.key.namespace, stat.key.kind, stat.key.key = "default", int(Kind.SCRATCH), "mine"
        refused = ask(sock, OP_STAT, stat, object_pb2.StatResponse())
        assert refused.code == "PERMISSION_DENIED" and len(refused.request_id) == 16
        deleted = object_pb2.DeleteRequest()
        deleted.key.CopyFrom(stat.key)
        deleted.key.namespace = "a"
        assert ask(sock, OP_DELETE, deleted, object_pb2.DeleteResponse()).deleted is True


def test_a_session_scoped_client_sees_nothing_of_its_siblings(client: Client) -> None:
    root = client.sessions.open(label="main")
    a = client.sessions.open(parent=root.id, label="a")
    b = client.sessions.open(parent=root.id, label="b")
    ca, cb = client.as_session(a.id), client.as_session(b.id)
    for c in (ca, cb):
        no_grpc_objects(c)
    ca.put(Kind.SCRATCH, "a-note", b"of a")
    assert ca.stat(Kind.SCRATCH, "a-note").session == a.id
    client.put(Kind.SCRATCH, "shared", b"for everyone")
    assert sorted(i.key for i in ca.list(kind=Kind.SCRATCH)) == ["a-note", "shared"]
    assert [i.key for i in cb.list(kind=Kind.SCRATCH)] == ["shared"]
    for call in (
        lambda: cb.stat(Kind.SCRATCH, "a-note"),
        lambda: cb.delete(Kind.SCRATCH, "a-note"),
    ):
        with pytest.raises((NotFoundError, PermissionDeniedError)):
            call()
    assert ca.get(Kind.SCRATCH, "a-note") == b"of a"


def test_with_every_bulk_connection_taken_small_puts_go_over_grpc_for_now(
    make_daemon: Callable[..., Daemon],
) -> None:
    """No free connection slot: that request goes over gRPC, and the bulk path
    stays usable (no cool-down): the next request takes a session again."""
    daemon = make_daemon(dataplane={"bulk": {"max_connections": 1}})
    holder, opened = open_session(daemon)  # takes the only slot
    assert opened.code == "OK"
    with Client(daemon.address) as c:
        with holder:
            c.put(Kind.SCRATCH, "while-full", b"x" * 10)
            assert c.stat(Kind.SCRATCH, "while-full").size_bytes == 10
            assert c.path_stats()["grpc"]["puts"] == 1
            assert "bulk" in c.dataplane.paths()
        wait_for(lambda: daemon.metrics.bulk_connections._value.get() == 0, "the slot to free")
        c.put(Kind.SCRATCH, "after", b"y" * 10)
        assert c.path_stats()["bulk"]["puts"] == 1
