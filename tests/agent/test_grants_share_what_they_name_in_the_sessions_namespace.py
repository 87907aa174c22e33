"""Grants share exactly what they name. A SCRATCH grant shares the ancestor's
keyed scratch records under its prefix, never the unkeyed ones (an empty
prefix matched those too: a child read its parent's private notes). A grant
that names no namespace is for the session's own, also when the session
inherits its parent's namespace (the client sent "default" instead, so the
grant covered nothing)."""

from __future__ import annotations

from collections.abc import Callable

from tiermem.client import Client, Grant, Kind, RecordKind
from tiermem.server.app import Daemon


def test_a_scratch_grant_shares_keyed_records_only(aclient: Client) -> None:
    root = aclient.sessions.open(label="main")
    parent = aclient.as_session(root.id)
    parent.scratch.append(root.id, RecordKind.DECISION, "shared plan", key="plan")
    parent.scratch.append(root.id, RecordKind.THOUGHT, "private musing")
    child = aclient.sessions.open(parent=root.id, label="sub", grants=[Grant(Kind.SCRATCH, "")])
    seen = [(r.key, r.payload) for r in aclient.as_session(child.id).scratch.replay(root.id)]
    assert seen == [("plan", b"shared plan")]


def test_a_grant_without_a_namespace_covers_the_inherited_one(
    agent_daemon: Callable[..., Daemon],
) -> None:
    daemon = agent_daemon(namespaces=["default", "a"])
    with Client(daemon.address, timeout_s=30, namespace="a") as c:
        root = c.sessions.open(label="main", namespace="a")
        c.as_session(root.id).put(Kind.KV_BLOCK, "p/0", b"shared-prefix")
        child = c.sessions.open(parent=root.id, label="sub", grants=[Grant(Kind.KV_BLOCK, "p/")])
        assert child.namespace == "a"
        assert [g.namespace for g in child.grants] == ["a"]
        assert c.as_session(child.id).get(Kind.KV_BLOCK, "p/0") == b"shared-prefix"
