"""The ``child:<id>`` tag is reserved for the daemon: it marks the result
record a closing child hands its parent, and start-up recovery of a close a
crash interrupted finds that record by it. A client append of a record with
such a tag is INVALID_ARGUMENT. Before, any writer of the parent's scratchpad
(the parent agent, a trusted tool) could tag a RESULT record with the child's
id, and when the crash came before the close added its own record, recovery
took that record for the child's result: the automatic "[expired] ..." result
was never delivered and the ledger counted the other record's bytes."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import pytest

from tests.agent.failing_commit import InjectedFailure
from tests.agent.test_a_close_a_crash_interrupted_hands_the_parent_one_result import (
    _crash_at_the_result_record,
)
from tiermem.client import Client, InvalidArgumentError, RecordKind
from tiermem.server.app import Daemon
from tiermem.server.sessions.model import CloseReason


@pytest.mark.parametrize("as_the_parent", [True, False])
def test_a_client_cannot_tag_a_record_as_a_childs_result(
    agent_daemon: Callable[..., Daemon], as_the_parent: bool
) -> None:
    daemon = agent_daemon()
    with Client(daemon.address, timeout_s=30) as c:
        root = c.sessions.open(label="main")
        child = c.sessions.open(parent=root.id, label="sub")
        writer = c.as_session(root.id) if as_the_parent else c  # the agent, or a trusted tool
        for kind in (RecordKind.RESULT, RecordKind.OBSERVATION):
            with pytest.raises(InvalidArgumentError, match="reserved"):
                writer.scratch.append(root.id, kind, b"planned", tags=[f"child:{child.id}"])
        assert c.scratch.replay(root.id) == []
        # other tags, "child" and "children:" among them, are the client's to use
        writer.scratch.append(root.id, RecordKind.RESULT, b"note", tags=["child", "children:x"])


def test_recovery_never_takes_a_parent_written_record_for_the_childs_result(
    agent_daemon: Callable[..., Daemon],
) -> None:
    daemon = agent_daemon()
    with Client(daemon.address, timeout_s=30) as c:
        root = c.sessions.open(label="main")
        child = c.sessions.open(parent=root.id, label="sub", ttl_s=3600, lease_s=3600)
        # the parent agent notes something about its child, as a RESULT record
        # (refused now: if it were written, recovery would take it below)
        note = b"planned: sub will summarise"
        with contextlib.suppress(InvalidArgumentError):
            c.as_session(root.id).scratch.append(
                root.id, RecordKind.RESULT, note, tags=[f"child:{child.id}"]
            )
    _crash_at_the_result_record(daemon)  # crash before the close's own record
    with pytest.raises(InjectedFailure):
        daemon.sessions.close(child.id, reason=CloseReason.EXPIRED)
    daemon.stop(grace_s=0)

    again = agent_daemon()
    with Client(again.address, timeout_s=30) as c:
        results = [r.payload for r in c.scratch.replay(root.id, kinds=[RecordKind.RESULT])]
        assert len(results) == 1 and results[0].startswith(b"[expired]"), results
        ledger = c.sessions.ledger(root.id)
        assert [(e.child, e.bytes) for e in ledger] == [(child.id, len(results[0]))]
