"""AdminService.Stats shows a caller's token only the namespaces it is granted
(as ListNamespaces does) and no session lines unless it sees every namespace:
a read-only token of namespace "a" learned the names, sizes and session ids of
namespace "b" from the cost report."""

from __future__ import annotations

from collections.abc import Callable

from tiermem.client import Client, Kind
from tiermem.server.app import Daemon

TOKENS = [
    {"name": "admin", "token": "t-admin", "roles": ["admin"]},
    {"name": "ra", "token": "t-ra", "namespaces": ["a"], "roles": ["read"]},
]


def test_a_token_of_one_namespace_sees_only_it(make_daemon: Callable[..., Daemon]) -> None:
    daemon = make_daemon(security={"tokens": TOKENS}, namespaces=["default", "a", "b"])
    with Client(daemon.address, token="t-admin", namespace="b") as admin:
        s = admin.sessions.open(namespace="b", label="b-secret-session")
        admin.put(Kind.BLOB, "secret", b"z" * 4096, session=s.id)
        admin.put(Kind.BLOB, "visible", b"v" * 4096, namespace="a")
        everything = admin.stats().cost
        assert {"a", "b"} <= {line.name for line in everything.namespaces}
        assert s.id in [line.name for line in everything.sessions]
    with Client(daemon.address, token="t-ra", namespace="a") as ra:
        assert ra.list_namespaces() == ["a"]
        cost = ra.stats().cost
        assert [line.name for line in cost.namespaces] == ["a"]
        assert cost.sessions == [] and cost.sessions_omitted >= 1
