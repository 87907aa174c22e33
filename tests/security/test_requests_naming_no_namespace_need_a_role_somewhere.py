"""Requests that name no namespace are authorized too: each such method that
nothing else authorizes (by a session, upload or lease it names) needs its
role on at least one namespace. ``ScratchService.Flush`` writes back every
buffered record, so it needs WRITE; the statistics (``AdminService.Stats``,
``ScratchService.Stats``, ``BlobService.BlobStats``) need READ, so a
read-only token still sees its own. Before, a token granted nothing at all
(no role, or no namespace) could call all four, and a read-only one could
flush. Every method whose request names no namespace is decided in
``namespaces.NO_NAMESPACE``, so a new one cannot be forgotten."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import deep_merge
from tiermem.client import Client, PermissionDeniedError, RecordKind
from tiermem.server.api.namespaces import NO_NAMESPACE, _plan
from tiermem.server.app import Daemon

TOKENS = [
    {"name": "admin", "token": "t-admin", "roles": ["admin"]},
    {"name": "no-role", "token": "t-none", "roles": []},
    {"name": "no-namespace", "token": "t-nons", "namespaces": [], "roles": ["read", "write"]},
    {"name": "reader", "token": "t-ra", "namespaces": ["a"], "roles": ["read"]},
    {"name": "writer", "token": "t-wa", "namespaces": ["a"], "roles": ["read", "write"]},
]
AGENT = {"agent": {"scratch": {"embedder": "hash", "flush_interval_s": 60.0}}}
SERVICES = ("admin", "blobs", "dataplane", "kv", "object", "operators", "placement")
SERVICES += ("scratch", "sessions", "vectors")


def calls(c: Client) -> dict[str, Callable[[], Any]]:
    return {
        "stats": c.stats,
        "scratch stats": c.scratch.stats,
        "blob stats": c.blobs.stats,
        "flush": c.scratch.flush,
    }


@pytest.fixture
def daemon(make_daemon: Callable[..., Daemon]) -> Daemon:
    return make_daemon(**deep_merge(AGENT, {"security": {"tokens": TOKENS}}), namespaces=["a"])


@pytest.mark.parametrize("token", ["t-none", "t-nons"])
def test_a_token_granted_nothing_may_call_none_of_them(daemon: Daemon, token: str) -> None:
    with Client(daemon.address, token=token, namespace="a") as c:
        for name, call in calls(c).items():
            with pytest.raises(PermissionDeniedError):
                call()
                pytest.fail(f"{name} answered a token granted nothing")


def test_a_read_only_token_sees_statistics_and_cannot_flush(daemon: Daemon) -> None:
    with Client(daemon.address, token="t-wa", namespace="a") as w:
        s = w.sessions.open(namespace="a", label="s")
        w.scratch.append(s.id, RecordKind.THOUGHT, "buffered")
    with Client(daemon.address, token="t-ra", namespace="a") as r:
        assert r.stats().objects >= 0
        assert r.scratch.stats().buffered_records == 1
        r.blobs.stats()
        with pytest.raises(PermissionDeniedError, match="write"):
            r.scratch.flush()
    with Client(daemon.address, token="t-wa", namespace="a") as w:
        assert w.scratch.flush().records == 1
        assert w.scratch.stats().buffered_records == 0


def test_every_method_whose_request_names_no_namespace_is_decided() -> None:
    without = set()
    for name in SERVICES:
        module = importlib.import_module(f"tiermem.v1.{name}_pb2")
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                if not _plan(method.input_type):
                    without.add(f"/{service.full_name}/{method.name}")
    assert sorted(without - set(NO_NAMESPACE)) == []  # undecided
    assert sorted(set(NO_NAMESPACE) - without) == []  # gone, or naming one now
