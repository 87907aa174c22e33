"""A session's lease is renewed by every call made as it, reads included:
replaying or searching its scratchpad and reading objects as it. Only writes
renewed it, so an agent that was only reading for longer than ``lease_s`` was
closed as ABANDONED under it."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tiermem.client import Client, Kind, RecordKind
from tiermem.server.app import Daemon


def _renews(daemon: Daemon, session: str, call: Callable[[], object]) -> bool:
    before = daemon.sessions.get(session).heartbeat_ms
    time.sleep(0.01)  # the heartbeat is in milliseconds
    call()
    return daemon.sessions.get(session).heartbeat_ms > before


@pytest.mark.parametrize("read", ["replay", "query", "get"])
def test_a_read_made_as_the_session_renews_its_lease(
    adaemon: Daemon, aclient: Client, read: str
) -> None:
    s = aclient.sessions.open(label="reader", lease_s=60)
    as_it = aclient.as_session(s.id)
    as_it.put(Kind.BLOB, "b", b"y")
    as_it.scratch.append(s.id, RecordKind.THOUGHT, "x")
    calls: dict[str, Callable[[], object]] = {
        "replay": lambda: as_it.scratch.replay(s.id),
        "query": lambda: as_it.scratch.query(s.id, "x"),
        "get": lambda: as_it.get(Kind.BLOB, "b"),
    }
    assert _renews(adaemon, s.id, calls[read])
