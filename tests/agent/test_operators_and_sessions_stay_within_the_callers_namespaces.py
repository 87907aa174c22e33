"""Operators and session calls read and change only namespaces the caller's
token grants, as the gRPC methods that touch the same data directly do:
an operator reading another namespace's scratch records or vector collection,
a child opened under another namespace's session, and a session listing are
refused or filtered. Before, an InvokeRequest named no namespace for the
interceptor to check, the operator's arguments were never checked, a child
inherited its parent's namespace unchecked and List returned every session."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from tiermem.client import Client, PermissionDeniedError, RecordKind
from tiermem.server.app import Daemon

TOKENS = [
    {"name": "alice", "token": "t-alice", "namespaces": ["a"], "roles": ["read", "write"]},
    {"name": "bob", "token": "t-bob", "namespaces": ["b"], "roles": ["read", "write"]},
    {"name": "root", "token": "t-root", "namespaces": ["*"], "roles": ["admin"]},
]
AGENT = {
    "scratch": {"embedder": "hash", "flush_interval_s": 60.0},
    "sessions": {"reap_interval_s": 60.0},
}


@pytest.fixture
def clients(make_daemon: Callable[..., Daemon]) -> Iterator[dict[str, Client]]:
    daemon = make_daemon(namespaces=["default", "a", "b"], security={"tokens": TOKENS}, agent=AGENT)
    made = {
        "alice": Client(daemon.address, token="t-alice", namespace="a", retries=0, timeout_s=30),
        "bob": Client(daemon.address, token="t-bob", namespace="b", retries=0, timeout_s=30),
        "root": Client(daemon.address, token="t-root", retries=0, timeout_s=30),
    }
    yield made
    for c in made.values():
        c.close()


def _bobs_session(bob: Client) -> str:
    s = bob.sessions.open(label="bob-secret-label", namespace="b")
    bob.scratch.append(
        s.id,
        RecordKind.DECISION,
        json.dumps({"edges": [["vault", "code-4711", 1]]}),
        key="g",
        tags=["secret-tag"],
    )
    return s.id


OPERATORS_ON_A_SESSION: dict[str, Callable[[str], tuple[str, dict[str, Any]]]] = {
    "scratch.summarize_counts": lambda s: ("scratch.summarize_counts", {"session": s}),
    "graph.shortest_path": lambda s: (
        "graph.shortest_path",
        {"source": "vault", "target": "code-4711", "record_key": "g", "record_session": s},
    ),
    "vector.topk on scratch": lambda s: (
        "vector.topk",
        {"collection": "scratch", "text": "vault", "k": 3, "session": s},
    ),
}


@pytest.mark.parametrize("call", OPERATORS_ON_A_SESSION.values(), ids=OPERATORS_ON_A_SESSION)
def test_an_operator_cannot_read_a_session_of_another_namespace(
    clients: dict[str, Client], call: Callable[[str], tuple[str, dict[str, Any]]]
) -> None:
    session = _bobs_session(clients["bob"])
    with pytest.raises(PermissionDeniedError):
        clients["alice"].scratch.replay(session)  # as the direct read is refused
    name, args = call(session)
    with pytest.raises(PermissionDeniedError):
        clients["alice"].operators.invoke(name, args)
    clients["bob"].operators.invoke(name, args)  # its owner's namespace: answered


def test_an_operator_cannot_search_a_collection_of_another_namespace(
    clients: dict[str, Client],
) -> None:
    alice, bob = clients["alice"], clients["bob"]
    bob.vectors.create("private", 4, namespace="b")
    bob.vectors.upsert("private", [1, 2], np.eye(4, dtype=np.float32)[:2], namespace="b")
    args = {"collection": "b/private", "vector": [1, 0, 0, 0], "k": 2}
    with pytest.raises(PermissionDeniedError):
        alice.operators.invoke("vector.topk", args)
    assert [h["id"] for h in bob.operators.invoke("vector.topk", args)] == [1, 2]


def test_searching_every_sessions_scratch_records_needs_every_namespace(
    clients: dict[str, Client],
) -> None:
    _bobs_session(clients["bob"])
    args = {"collection": "scratch", "text": "vault", "k": 3}
    with pytest.raises(PermissionDeniedError):
        clients["alice"].operators.invoke("vector.topk", args)
    assert isinstance(clients["root"].operators.invoke("vector.topk", args), list)  # answered


def test_a_child_cannot_be_opened_under_a_session_of_another_namespace(
    clients: dict[str, Client],
) -> None:
    alice = clients["alice"]
    parent = clients["bob"].sessions.open(label="bob-main", namespace="b")
    with pytest.raises(PermissionDeniedError):
        alice.sessions.open(label="x", namespace="b")
    with pytest.raises(PermissionDeniedError):
        alice.sessions.open(parent=parent.id, label="intruder")
    assert [c.label for c in clients["bob"].sessions.list()] == ["bob-main"]
    mine = alice.sessions.open(label="mine", namespace="a")  # its own namespace: fine
    assert alice.sessions.open(parent=mine.id, label="child").namespace == "a"


def test_a_session_listing_shows_only_namespaces_the_caller_may_read(
    clients: dict[str, Client],
) -> None:
    alice, bob, root = clients["alice"], clients["bob"], clients["root"]
    bob.sessions.open(label="bob-secret-label", namespace="b")
    alice.sessions.open(label="alice-label", namespace="a")
    assert [s.label for s in alice.sessions.list()] == ["alice-label"]
    assert [s.label for s in bob.sessions.list()] == ["bob-secret-label"]
    assert sorted(s.label for s in root.sessions.list()) == ["alice-label", "bob-secret-label"]
