"""A session opened with the id of a closed one starts with an empty
scratchpad, also after a restart. The closed session's records were dropped
from the buffer and RocksDB but stayed in the group-commit log, and recovery
replayed them into whichever open session had that id."""

from __future__ import annotations

from collections.abc import Callable

from tiermem.client import Client, RecordKind
from tiermem.server.app import Daemon


def test_the_new_session_never_sees_the_old_records(
    agent_daemon: Callable[..., Daemon],
) -> None:
    daemon = agent_daemon()
    with Client(daemon.address, timeout_s=30) as c:
        c.sessions.open(id="worker", label="first")
        c.scratch.append("worker", RecordKind.THOUGHT, "first incarnation's secret")
        assert c.sessions.close("worker").records_freed == 1
        c.sessions.open(id="worker", label="second")
        assert c.scratch.replay("worker") == []
    daemon.stop()  # nothing buffered: the log is left as it is
    again = agent_daemon()
    with Client(again.address, timeout_s=30) as c:
        assert c.scratch.replay("worker") == []
        c.scratch.append("worker", RecordKind.THOUGHT, "second incarnation's note")
    again.stop()
    third = agent_daemon()  # the marks were forgotten with the old logs: nothing changes
    with Client(third.address, timeout_s=30) as c:
        assert [r.payload for r in c.scratch.replay("worker")] == [b"second incarnation's note"]
