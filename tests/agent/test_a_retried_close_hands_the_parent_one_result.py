"""A child's close that failed after it had added its result record to the
parent's scratchpad, and is then retried, hands the parent that result once:
before, every retry appended the record again and took another ledger slot."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.agent.failing_commit import CommitFailsOnceWhenArmed, InjectedFailure
from tiermem.client import Client, RecordKind
from tiermem.server.app import Daemon


def test_a_retried_close_adds_the_result_record_once(
    agent_daemon: Callable[..., Daemon],
) -> None:
    daemon = agent_daemon()
    rocks = CommitFailsOnceWhenArmed(daemon.sessions.rocks)
    daemon.sessions.rocks = rocks
    sink = daemon.sessions.result_sink
    assert sink is not None
    real_append = sink.append_result

    appends = [0]

    def append_then_arm(parent: str, child: str, payload: bytes) -> int:
        rid = real_append(parent, child, payload)
        appends[0] += 1
        rocks.armed = appends[0] == 1  # only the first close fails
        return rid

    sink.append_result = append_then_arm  # type: ignore[method-assign]
    with Client(daemon.address, timeout_s=30) as c:
        root = c.sessions.open(label="main")
        child = c.sessions.open(parent=root.id, label="sub")
        with pytest.raises(InjectedFailure):
            daemon.sessions.close(child.id, result=b"the answer is 42")
        report = daemon.sessions.close(child.id, result=b"the answer is 42")
        assert report.sessions_closed == 1
        assert [s.id for s in c.sessions.list()] == [root.id]
        results = [r for r in c.scratch.replay(root.id) if r.kind == RecordKind.RESULT]
        assert [r.payload for r in results] == [b"the answer is 42"]
        ledger = c.sessions.ledger(root.id)
        assert [(e.child, e.bytes) for e in ledger] == [(child.id, 16)]
        info = c.sessions.describe(root.id)
        assert (info.ledger_bytes, info.children_closed) == (16, 1)
