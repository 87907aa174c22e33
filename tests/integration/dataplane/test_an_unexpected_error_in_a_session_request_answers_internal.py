"""A bug inside a bulk session request (an exception that is not a refusal)
answers INTERNAL with the error, as the gRPC method would, and ends that
session; it used to drop the connection without a word, which the client took
for a broken bulk channel. The client's next request finds a new session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tiermem.client import Client, Kind, TiermemClientError
from tiermem.dataplane_wire import OP_STAT
from tiermem.server.api.bulk_session import UnaryOp
from tiermem.server.app import Daemon
from tiermem.v1 import object_pb2


@pytest.fixture
def broken_stat(daemon: Daemon) -> Iterator[None]:
    sessions = daemon.bulk_sessions
    real = sessions.unary[OP_STAT]

    def boom(_owner: str, _acting: str, _request: object) -> object_pb2.StatResponse:
        raise RuntimeError("boom: a bug in a handler")

    sessions.unary[OP_STAT] = UnaryOp(real.method, real.request, boom)
    try:
        yield
    finally:
        sessions.unary[OP_STAT] = real


def test_a_handler_bug_answers_internal_and_the_next_request_works(
    daemon: Daemon, client: Client, broken_stat: None
) -> None:
    client.put(Kind.SCRATCH, "k", b"value")
    request = object_pb2.StatRequest()
    request.key.namespace, request.key.kind, request.key.key = "default", int(Kind.SCRATCH), "k"
    with pytest.raises(TiermemClientError) as err:
        client.dataplane.unary(OP_STAT, request, object_pb2.StatResponse())
    assert err.value.code == "INTERNAL"
    assert "RuntimeError: boom: a bug in a handler" in err.value.message
    # a plain request on the same client still rides a session
    before = client.dataplane.path_stats()["bulk"]["puts"]
    client.put(Kind.SCRATCH, "k2", b"other")
    assert client.dataplane.path_stats()["bulk"]["puts"] == before + 1
    assert client.get(Kind.SCRATCH, "k") == b"value"
