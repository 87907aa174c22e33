"""``OperatorService.Invoke`` without a session needs READ on at least one
namespace, as the statistics do (see
``test_requests_naming_no_namespace_need_a_role_somewhere``): before, a token
granted nothing (no role, or no namespace) could run operators on the
daemon's CPUs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import deep_merge
from tiermem.client import Client, PermissionDeniedError
from tiermem.server.app import Daemon

TOKENS = [
    {"name": "no-role", "token": "t-none", "roles": []},
    {"name": "no-namespace", "token": "t-nons", "namespaces": [], "roles": ["read", "write"]},
    {"name": "writer-only", "token": "t-w", "namespaces": ["a"], "roles": ["write"]},
    {"name": "reader", "token": "t-ra", "namespaces": ["a"], "roles": ["read"]},
]
AGENT = {"agent": {"scratch": {"embedder": "hash", "flush_interval_s": 60.0}}}
ARGS: dict[str, Any] = {"edges": [[0, 1, 1.0]], "source": 0, "target": 1, "directed": True}


@pytest.fixture
def daemon(make_daemon: Callable[..., Daemon]) -> Daemon:
    return make_daemon(**deep_merge(AGENT, {"security": {"tokens": TOKENS}}), namespaces=["a"])


@pytest.mark.parametrize("token", ["t-none", "t-nons", "t-w"])
def test_a_token_without_read_anywhere_may_not_invoke_operators(daemon: Daemon, token: str) -> None:
    with (
        Client(daemon.address, token=token, namespace="a") as c,
        pytest.raises(PermissionDeniedError),
    ):
        c.operators.invoke("graph.shortest_path", ARGS)


def test_a_reader_invokes_operators_without_a_session(daemon: Daemon) -> None:
    with Client(daemon.address, token="t-ra", namespace="a") as c:
        got = c.operators.invoke("graph.shortest_path", ARGS)
        assert got == {"distance": 1.0, "path": [0, 1]}
