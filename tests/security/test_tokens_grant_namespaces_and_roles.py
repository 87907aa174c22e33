"""Bearer tokens map to namespaces and roles: a missing or wrong token is
UNAUTHENTICATED, a namespace not granted is PERMISSION_DENIED, and objects of
other namespaces are never listed or found."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tiermem.client import Client, Kind, TiermemClientError
from tiermem.server.app import Daemon

TOKENS = [
    {"name": "root", "token": "t-admin", "roles": ["admin"]},
    {"name": "alice", "token": "t-alice", "namespaces": ["a"], "roles": ["read", "write"]},
    {"name": "bob", "token": "t-bob", "namespaces": ["b"], "roles": ["read", "write"]},
    {"name": "auditor", "token": "t-ro", "namespaces": ["a"], "roles": ["read"]},
]


@pytest.fixture
def secured(make_daemon: Callable[..., Daemon]) -> Daemon:
    return make_daemon(namespaces=["default", "a", "b"], security={"tokens": TOKENS})


@pytest.fixture
def connect(secured: Daemon) -> Iterator[Callable[..., Client]]:
    opened: list[Client] = []

    def make(token: str | None, namespace: str = "a") -> Client:
        c = Client(secured.address, token=token, namespace=namespace, retries=0)
        opened.append(c)
        return c

    yield make
    for c in opened:
        c.close()


def code_of(fn: Callable[[], object]) -> tuple[str, str]:
    with pytest.raises(TiermemClientError) as info:
        fn()
    return info.value.code, info.value.message


def test_missing_or_wrong_token_is_unauthenticated(connect: Callable[..., Client]) -> None:
    for token in (None, "not-a-token", ""):
        code, message = code_of(lambda t=token: connect(t).get(Kind.BLOB, "x"))  # type: ignore[misc]
        assert code == "UNAUTHENTICATED", (token, code, message)
        assert "token" in message
    code, _ = code_of(lambda: connect(None).list_namespaces())
    assert code == "UNAUTHENTICATED"


def test_health_needs_no_token(secured: Daemon) -> None:
    with grpc.insecure_channel(secured.address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_namespace_not_granted_is_permission_denied(connect: Callable[..., Client]) -> None:
    alice, bob = connect("t-alice", "a"), connect("t-bob", "b")
    alice.put(Kind.BLOB, "secret", b"alice's")
    bob.put(Kind.BLOB, "secret", b"bob's")
    for call in (
        lambda: alice.get(Kind.BLOB, "secret", namespace="b"),
        lambda: alice.stat(Kind.BLOB, "secret", namespace="b"),
        lambda: alice.delete(Kind.BLOB, "secret", namespace="b"),
        lambda: alice.put(Kind.BLOB, "x", b"y", namespace="b"),
        lambda: list(alice.list(namespace="b")),
        lambda: alice.get(Kind.BLOB, "anything", namespace="default"),
    ):
        code, message = code_of(call)
        assert code == "PERMISSION_DENIED", message
        assert "alice" in message
    # Each sees only its own object, byte-exact; nothing of the other leaks.
    assert alice.get(Kind.BLOB, "secret") == b"alice's"
    assert bob.get(Kind.BLOB, "secret") == b"bob's"
    assert [o.key for o in alice.list()] == ["secret"]
    assert alice.list_namespaces() == ["a"]
    assert bob.list_namespaces() == ["b"]


def test_roles_limit_what_a_token_may_do(connect: Callable[..., Client]) -> None:
    connect("t-alice").put(Kind.SCRATCH, "note", b"n")
    auditor = connect("t-ro")
    assert auditor.get(Kind.SCRATCH, "note") == b"n"
    assert [o.key for o in auditor.list()] == ["note"]
    for call in (
        lambda: auditor.put(Kind.SCRATCH, "note", b"changed"),
        lambda: auditor.delete(Kind.SCRATCH, "note"),
        lambda: auditor.create_namespace("mine"),
        lambda: auditor.integrity.check(),
    ):
        code, message = code_of(call)
        assert code == "PERMISSION_DENIED", message
    assert auditor.get(Kind.SCRATCH, "note") == b"n"  # refused requests changed nothing
    code, _ = code_of(lambda: connect("t-alice").create_namespace("c"))
    assert code == "PERMISSION_DENIED"


def test_admin_may_do_everything(connect: Callable[..., Client]) -> None:
    root = connect("t-admin", "b")
    assert root.create_namespace("c") is True
    assert root.list_namespaces() == ["a", "b", "c", "default"]
    root.put(Kind.BLOB, "k", b"v")
    assert root.get(Kind.BLOB, "k") == b"v"
    assert root.integrity.check().clean
    assert root.stats().objects == 1
