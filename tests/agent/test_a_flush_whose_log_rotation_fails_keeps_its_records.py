"""A write-back flush that cannot start a new log file (the open fails: a full
disk, too many open files) keeps its records: Replay still returns them, the
next flush writes them once, and a restart finds them once. The flush used to
move the buffer aside before rotating the log, so a failed rotation stranded
the records there: the next flush replaced them, never wrote them, and removed
the log file that still held them.

The rotation fails once, injected in the scratch service's log (the daemon's
own code runs as it is)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tiermem.client import Client, NewRecord, RecordDurability, RecordKind
from tiermem.client.errors import TiermemClientError
from tiermem.server.app import Daemon


def test_a_flush_whose_log_rotation_fails_loses_nothing(
    agent_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon = agent_daemon()
    log = daemon.scratch._log
    rotate = log.rotate
    failures = [OSError(28, "injected: no space left to open the next log file")]

    def failing_once() -> int:
        if failures:
            raise failures.pop()
        return rotate()

    with Client(daemon.address, timeout_s=30) as c:
        session = c.sessions.open(label="main").id
        ids = c.scratch.append_many(
            session,
            [
                NewRecord(RecordKind.OBSERVATION, "door at the north wall"),
                NewRecord(RecordKind.THOUGHT, "try the key", durability=RecordDurability.SYNC),
            ],
        )
        monkeypatch.setattr(log, "rotate", failing_once)
        with pytest.raises(TiermemClientError):
            c.scratch.flush()
        assert [r.id for r in c.scratch.replay(session)] == ids
        assert c.scratch.stats().buffered_records == 2
        ids += c.scratch.append_many(session, [NewRecord(RecordKind.RESULT, "the door opens")])
        result = c.scratch.flush()
        assert result.records == 3
        assert c.scratch.stats().buffered_records == 0
        replayed = [(r.id, r.payload) for r in c.scratch.replay(session)]
        assert [i for i, _ in replayed] == ids
    daemon.stop()
    again = agent_daemon()
    with Client(again.address, timeout_s=30) as c:
        assert [(r.id, r.payload) for r in c.scratch.replay(session)] == replayed
        assert c.scratch.stats().stored_records == 3
