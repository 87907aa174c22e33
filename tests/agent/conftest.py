"""Daemons for the agent-memory tests: the light embedder, fast background timers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.conftest import deep_merge
from tiermem.client import Client
from tiermem.server.app import Daemon

AGENT: dict[str, Any] = {
    "agent": {
        "scratch": {"embedder": "hash", "flush_interval_s": 60.0},
        "sessions": {"reap_interval_s": 60.0},
    }
}


@pytest.fixture
def agent_daemon(make_daemon: Callable[..., Daemon]) -> Callable[..., Daemon]:
    def make(name: str = "d", **overrides: Any) -> Daemon:
        return make_daemon(name, **deep_merge(AGENT, overrides))

    return make


@pytest.fixture
def adaemon(agent_daemon: Callable[..., Daemon]) -> Daemon:
    return agent_daemon()


@pytest.fixture
def aclient(adaemon: Daemon) -> Iterator[Client]:
    with Client(adaemon.address, timeout_s=30) as c:
        yield c


def wait_for(predicate: Callable[[], bool], timeout_s: float = 20.0) -> None:
    """Poll until ``predicate()`` holds (a bound on waiting, not a timing assertion)."""
    import time

    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.02)
