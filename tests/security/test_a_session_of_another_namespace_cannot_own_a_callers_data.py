"""A caller can make a session own its objects or collections only if its
token is granted that session's namespace. A token of namespace "a" could tag
its puts (or act) as a session of namespace "b": b's quota was charged, and
b's close deleted a's object; a collection it created for b's session was
dropped by that close."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tiermem.client import Client, Kind, PermissionDeniedError, Tier
from tiermem.client.fastpath.plane import PATHS
from tiermem.server.app import Daemon

TOKENS = [
    {"name": "admin", "token": "t-admin", "roles": ["admin"]},
    {"name": "a", "token": "t-a", "namespaces": ["a"], "roles": ["read", "write"]},
]


@pytest.fixture
def daemon_ab(make_daemon: Callable[..., Daemon]) -> Daemon:
    return make_daemon(security={"tokens": TOKENS}, namespaces=["default", "a", "b"])


@pytest.mark.parametrize("path", ["grpc", "default"])
def test_a_put_as_or_for_a_foreign_session_is_refused(daemon_ab: Daemon, path: str) -> None:
    paths = () if path == "grpc" else PATHS
    with Client(daemon_ab.address, token="t-admin", namespace="b") as admin:
        s = admin.sessions.open(namespace="b", label="b-session", quotas={Tier.DRAM: 1 << 20})
        with Client(daemon_ab.address, token="t-a", namespace="a", fast_paths=paths) as a:
            with pytest.raises(PermissionDeniedError):
                a.put(Kind.BLOB, "x", b"y" * 1000, session=s.id)
            with pytest.raises(PermissionDeniedError):
                a.as_session(s.id).put(Kind.BLOB, "x2", b"y" * 1000)
            a.put(Kind.BLOB, "mine", b"z")  # unowned: fine
            assert admin.sessions.describe(s.id).used_bytes(Tier.DRAM) == 0
            admin.sessions.close(s.id)
            assert a.get(Kind.BLOB, "mine") == b"z"


def test_a_collection_for_a_foreign_session_is_refused(daemon_ab: Daemon) -> None:
    with Client(daemon_ab.address, token="t-admin", namespace="b") as admin:
        s = admin.sessions.open(namespace="b", label="b-session")
        with Client(daemon_ab.address, token="t-a", namespace="a") as a:
            with pytest.raises(PermissionDeniedError):
                a.vectors.create("va", 4, session=s.id)
            a.vectors.create("vb", 4)
            admin.sessions.close(s.id)
            assert [c.name for c in a.vectors.list()] == ["vb"]


def test_a_blob_for_a_foreign_session_is_refused(daemon_ab: Daemon) -> None:
    with Client(daemon_ab.address, token="t-admin", namespace="b") as admin:
        s = admin.sessions.open(namespace="b", label="b-session", quotas={Tier.SSD: 1 << 20})
        with Client(daemon_ab.address, token="t-a", namespace="a") as a:
            with pytest.raises(PermissionDeniedError):
                a.blobs.put("doc", b"y" * 1000, session=s.id)
            with pytest.raises(PermissionDeniedError):
                a.as_session(s.id).blobs.put("doc2", b"y" * 1000)
            a.blobs.put("mine", b"z")
            assert admin.sessions.describe(s.id).used_bytes(Tier.SSD) == 0
            admin.sessions.close(s.id)
            assert a.blobs.get("mine") == b"z"
