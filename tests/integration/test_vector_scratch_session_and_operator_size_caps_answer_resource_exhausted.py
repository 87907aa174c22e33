"""The size caps of vector payloads, scratch records, session results and
operator arguments answer RESOURCE_EXHAUSTED (issue 9: every limit does) with a
message naming the limit's value and its config key, and the refused request
changes nothing stored. Each is exceeded through the gRPC API against a daemon
configured with a small value; a request at the limit still goes through."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tiermem.client import Client, Kind, RecordKind, TiermemClientError
from tiermem.server.app import Daemon

AGENT: dict[str, Any] = {"embedder": "hash", "flush_interval_s": 60.0}


def refused(fn: Callable[[], object]) -> str:
    with pytest.raises(TiermemClientError) as info:
        fn()
    assert info.value.code == "RESOURCE_EXHAUSTED", info.value
    return info.value.message


def test_a_vector_payload_over_vectors_max_payload_bytes_is_resource_exhausted(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(vectors={"max_payload_bytes": 256})
    vectors = np.eye(3, 4, dtype=np.float32)
    with Client(daemon.address, retries=0) as c:
        c.vectors.create("c", 4, index="flat")
        c.vectors.upsert("c", [1, 2], vectors[:2], [{"a": "x" * 200}, {"b": 2}])
        before = c.vectors.describe("c")

        payloads: list[dict[str, Any]] = [{}, {"a": "y" * 300}]
        message = refused(lambda: c.vectors.upsert("c", [2, 3], vectors[1:], payloads))
        assert "vectors.max_payload_bytes = 256" in message, message

        after = c.vectors.describe("c")
        assert (after.count, after.log_seq) == (before.count, before.log_seq)
        found = c.vectors.search("c", vectors, 3, include_payloads=True)
        assert sorted(found.ids[0].tolist()) == [-1, 1, 2]
        assert found.payloads[0][0].fields == {"a": "x" * 200}
        assert found.payloads[1][0].fields == {"b": 2}


def test_a_scratch_record_over_agent_scratch_max_record_bytes_is_resource_exhausted(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(agent={"scratch": {**AGENT, "max_record_bytes": 1024}})
    with Client(daemon.address, retries=0) as c:
        session = c.sessions.open(label="writer")
        kept = c.scratch.append(session.id, RecordKind.THOUGHT, b"k" * 1024)  # at the limit

        message = refused(lambda: c.scratch.append(session.id, RecordKind.THOUGHT, b"x" * 1025))
        assert "the limit is 1024 (agent.scratch.max_record_bytes)" in message, message

        replayed = c.scratch.replay(session.id)
        assert [(r.id, r.payload) for r in replayed] == [(kept, b"k" * 1024)]
        c.scratch.flush()
        assert [r.payload for r in c.scratch.replay(session.id)] == [b"k" * 1024]


def test_a_session_result_over_agent_sessions_max_result_bytes_is_resource_exhausted(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(agent={"scratch": AGENT, "sessions": {"max_result_bytes": 64}})
    with Client(daemon.address, retries=0) as c:
        parent = c.sessions.open(label="parent")
        child = c.sessions.open(parent=parent.id, label="child")
        c.scratch.append(child.id, RecordKind.THOUGHT, "the child's work")
        c.put(Kind.SCRATCH, "notes", b"n" * 100, session=child.id)

        message = refused(lambda: c.sessions.close(child.id, b"r" * 65))
        assert "the limit is 64 (agent.sessions.max_result_bytes)" in message, message

        # the child is still open with all it owns; the parent got nothing
        assert c.sessions.describe(child.id).state == "OPEN"
        assert [r.payload for r in c.scratch.replay(child.id)] == [b"the child's work"]
        assert c.get(Kind.SCRATCH, "notes") == b"n" * 100
        assert c.scratch.replay(parent.id) == []
        assert c.sessions.ledger(parent.id) == []

        closed = c.sessions.close(child.id, b"r" * 64)  # at the limit
        assert [r.payload for r in c.scratch.replay(parent.id)] == [b"r" * 64]
        assert closed.result_record_id == c.scratch.replay(parent.id)[0].id


def test_operator_arguments_over_agent_operators_max_args_bytes_are_resource_exhausted(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(agent={"scratch": AGENT, "operators": {"max_args_bytes": 1024}})
    with Client(daemon.address, retries=0) as c:
        session = c.sessions.open(label="caller")
        c.scratch.append(session.id, RecordKind.THOUGHT, "kept")
        c.put(Kind.BLOB, "kept", b"k" * 100)
        big = {f"v{i}": i for i in range(200)}  # over 1024 bytes of JSON

        message = refused(
            lambda: c.operators.invoke(
                "math.eval", {"expression": "v1", "vars": big}, session=session.id
            )
        )
        assert "the limit is 1024 (agent.operators.max_args_bytes)" in message, message

        assert c.operators.invoke("math.eval", {"expression": "6*7"}, session=session.id) == {
            "value": 42
        }
        assert [r.payload for r in c.scratch.replay(session.id)] == [b"kept"]
        assert c.get(Kind.BLOB, "kept") == b"k" * 100
        assert c.sessions.describe(session.id).state == "OPEN"
