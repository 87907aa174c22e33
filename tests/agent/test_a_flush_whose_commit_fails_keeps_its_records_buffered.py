"""A write-back flush whose RocksDB batch commit fails leaves its records in
the buffer: Replay still returns them, the next flush writes them (each once,
with the records appended since), and a restart finds them once. They used to
be taken out of the buffer before the commit and not put back, so Replay lost
them at once (while the log line said "records stay buffered"), and the next
successful flush removed the log files that still held them: gone for good.

The commit fails once, injected in the scratch service's store wrapper (the
daemon's own code runs as it is)."""

from __future__ import annotations

from collections.abc import Callable

from tests.agent.failing_commit import CommitFailsOnceWhenArmed
from tiermem.client import Client, NewRecord, RecordDurability, RecordKind
from tiermem.client.errors import TiermemClientError
from tiermem.server.app import Daemon


def test_a_failed_flush_loses_and_repeats_nothing(agent_daemon: Callable[..., Daemon]) -> None:
    daemon = agent_daemon()
    rocks = CommitFailsOnceWhenArmed(
        daemon.scratch.rocks, "injected: the flush's RocksDB commit failed"
    )
    daemon.scratch.rocks = rocks  # type: ignore[assignment]
    with Client(daemon.address, timeout_s=30) as c:
        session = c.sessions.open(label="main").id
        first = [
            NewRecord(RecordKind.OBSERVATION, "door at the north wall"),
            NewRecord(RecordKind.THOUGHT, "try the key", durability=RecordDurability.BUFFERED),
            NewRecord(RecordKind.DECISION, "plan v1", key="plan"),
        ]
        ids = c.scratch.append_many(session, first)
        rocks.armed = True
        try:
            c.scratch.flush()
        except TiermemClientError as exc:
            assert "injected" in str(exc)
        else:
            raise AssertionError("the flush's commit did not fail")
        assert [r.id for r in c.scratch.replay(session)] == ids
        assert c.scratch.stats().buffered_records == 3

        ids += c.scratch.append_many(
            session,
            [
                NewRecord(RecordKind.DECISION, "plan v2", key="plan"),
                NewRecord(RecordKind.OBSERVATION, "the door opens"),
            ],
        )
        replayed = [(r.id, r.payload) for r in c.scratch.replay(session)]
        assert [i for i, _ in replayed] == [ids[0], ids[1], ids[3], ids[4]]
        result = c.scratch.flush()
        assert result.records == 4 and result.merged == 1
        assert c.scratch.stats().buffered_records == 0
        assert [(r.id, r.payload) for r in c.scratch.replay(session)] == replayed
        hits = [r.id for r, _ in c.scratch.query(session, "door", k=10)]
        assert sorted(hits) == [ids[0], ids[1], ids[3], ids[4]]
    daemon.stop()
    again = agent_daemon()
    with Client(again.address, timeout_s=30) as c:
        assert [(r.id, r.payload) for r in c.scratch.replay(session)] == replayed
        assert c.scratch.stats().stored_records == 4
