"""A child's close that a crash interrupts is finished at start-up, and the
parent gets the child's result record once.

Closing is durable in steps: the subtree is marked CLOSING, the result record
is added to the parent's scratchpad, then the close's final write batch
deletes the records and adds the ledger entry. A crash between the last two
left a CLOSING child whose result record was already there, and start-up
recovery added another: an expired or abandoned child's automatic result
reached the parent twice. Here the crash is a final batch that fails, then a
restart without a retry (the in-memory state is lost, only the disk counts).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.agent.failing_commit import CommitFailsOnceWhenArmed, InjectedFailure
from tiermem.client import Client, RecordKind
from tiermem.server.app import Daemon
from tiermem.server.sessions.model import CloseReason


def _crash_after_the_result_record(daemon: Daemon) -> None:
    rocks = CommitFailsOnceWhenArmed(
        daemon.sessions.rocks, "injected: crashed before the close's final write"
    )
    daemon.sessions.rocks = rocks
    sink = daemon.sessions.result_sink
    assert sink is not None
    real_append = sink.append_result

    def append_then_arm(parent: str, child: str, payload: bytes) -> int:
        rid = real_append(parent, child, payload)
        rocks.armed = True
        return rid

    sink.append_result = append_then_arm  # type: ignore[method-assign]


def _crash_at_the_result_record(daemon: Daemon) -> None:
    sink = daemon.sessions.result_sink
    assert sink is not None

    def append_crashes(parent: str, child: str, payload: bytes) -> int:
        raise InjectedFailure("injected: crashed before the result record was added")

    sink.append_result = append_crashes  # type: ignore[method-assign]


@pytest.mark.parametrize("reason", [CloseReason.EXPIRED, CloseReason.ABANDONED])
def test_an_interrupted_automatic_close_hands_the_parent_one_result(
    agent_daemon: Callable[..., Daemon], reason: CloseReason
) -> None:
    daemon = agent_daemon()
    with Client(daemon.address, timeout_s=30) as c:
        root = c.sessions.open(label="main")
        child = c.sessions.open(parent=root.id, label="sub", ttl_s=3600, lease_s=3600)
    _crash_after_the_result_record(daemon)
    with pytest.raises(InjectedFailure):
        daemon.sessions.close(child.id, reason=reason)
    daemon.stop(grace_s=0)

    again = agent_daemon()  # same data dir: recovery finishes the close
    with Client(again.address, timeout_s=30) as c:
        assert [s.id for s in c.sessions.list()] == [root.id]
        results = c.scratch.replay(root.id, kinds=[RecordKind.RESULT])
        tag = f"[{reason.name.lower()}]".encode()
        assert len(results) == 1, [r.payload for r in results]
        assert results[0].payload.startswith(tag)
        ledger = c.sessions.ledger(root.id)
        assert [(e.child, e.bytes) for e in ledger] == [(child.id, len(results[0].payload))]
        assert c.sessions.describe(root.id).children_closed == 1


def test_an_interrupted_client_close_keeps_its_result_and_counts_its_bytes(
    agent_daemon: Callable[..., Daemon],
) -> None:
    daemon = agent_daemon()
    with Client(daemon.address, timeout_s=30) as c:
        root = c.sessions.open(label="main")
        child = c.sessions.open(parent=root.id, label="sub")
    _crash_after_the_result_record(daemon)
    with pytest.raises(InjectedFailure):
        daemon.sessions.close(child.id, result=b"the answer is 42")
    daemon.stop(grace_s=0)

    again = agent_daemon()
    with Client(again.address, timeout_s=30) as c:
        results = c.scratch.replay(root.id, kinds=[RecordKind.RESULT])
        assert [r.payload for r in results] == [b"the answer is 42"]
        ledger = c.sessions.ledger(root.id)
        assert [(e.child, e.bytes) for e in ledger] == [(child.id, 16)]
        assert c.sessions.describe(root.id).ledger_bytes == 16


def test_a_reused_child_id_does_not_take_the_earlier_childs_result_for_its_own(
    agent_daemon: Callable[..., Daemon],
) -> None:
    daemon = agent_daemon()
    with Client(daemon.address, timeout_s=30) as c:
        root = c.sessions.open(label="main")
        c.sessions.open(parent=root.id, id="worker", label="first")
        c.sessions.close("worker", result=b"first incarnation")
        time.sleep(0.01)  # the next incarnation is created in a later millisecond
        c.sessions.open(parent=root.id, id="worker", label="second", ttl_s=3600)
    _crash_at_the_result_record(daemon)
    with pytest.raises(InjectedFailure):
        daemon.sessions.close("worker", reason=CloseReason.EXPIRED)
    daemon.stop(grace_s=0)

    again = agent_daemon()
    with Client(again.address, timeout_s=30) as c:
        results = c.scratch.replay(root.id, kinds=[RecordKind.RESULT])
        assert len(results) == 2, [r.payload for r in results]
        assert results[0].payload == b"first incarnation"
        assert results[1].payload.startswith(b"[expired] session worker (second)")
        assert [e.child for e in c.sessions.ledger(root.id)] == ["worker", "worker"]
