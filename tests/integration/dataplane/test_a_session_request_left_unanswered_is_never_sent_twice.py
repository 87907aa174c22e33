"""A bulk session request that was sent and got no answer within the I/O
timeout may have run: the client never sends it again (not on a new session,
not over gRPC) and raises DEADLINE_EXCEEDED saying so. Before, on a pooled
session the silence read as "closed while pooled, nothing happened" and the
request was sent again: a slow delete ran twice and reported nothing deleted,
an ``if_absent`` put reported ALREADY_EXISTS for the object it had stored.
A pooled session the daemon closed before reading the request is still
replaced at once. Replies owed to earlier requests (lease releases sent
without waiting) are read within the next request's deadline too.

The session-level cases play the daemon over a socket pair; the client-level
ones slow a real daemon's handler past a short I/O timeout."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

import tiermem.server.api.bulk_session as bulk_session
from tiermem.client import Client, DeadlineError, Kind, NotFoundError
from tiermem.client.fastpath import PutItem
from tiermem.client.fastpath.session import NoAnswer, Session, SessionPool, StaleSession
from tiermem.dataplane_wire import OP_STAT, REQUEST
from tiermem.server.app import Daemon
from tiermem.v1 import common_pb2, dataplane_pb2, object_pb2

IO_TIMEOUT_S = 0.5
#: far below the 30 s default I/O timeout, far above the timeouts used here
LATE_S = 5.0


def read_request(peer: socket.socket) -> None:
    _op, _flags, _cs, length = REQUEST.unpack(peer.recv(REQUEST.size, socket.MSG_WAITALL))
    if length:
        peer.recv(length, socket.MSG_WAITALL)


def stat_request() -> object_pb2.StatRequest:
    key = common_pb2.ObjectKey(namespace="default", kind=common_pb2.SCRATCH, key="k")
    return object_pb2.StatRequest(key=key)


@pytest.fixture
def pooled() -> Iterator[tuple[Session, socket.socket]]:
    """A session taken from the pool (reused) and the daemon's end of it."""
    mine, peer = socket.socketpair()
    mine.settimeout(IO_TIMEOUT_S)
    with mine, peer:
        yield Session(mine, reused=True, io_timeout_s=IO_TIMEOUT_S), peer


def test_a_request_the_daemon_read_but_never_answered_is_no_answer(
    pooled: tuple[Session, socket.socket],
) -> None:
    session, peer = pooled
    reader = threading.Thread(target=read_request, args=(peer,), daemon=True)
    reader.start()
    with pytest.raises(NoAnswer, match="may have run") as err:
        session.unary(OP_STAT, stat_request(), object_pb2.StatResponse())
    assert not isinstance(err.value, StaleSession)
    assert not session.in_step  # closed, never pooled
    reader.join(5)


def test_a_put_whose_status_never_came_is_no_answer(
    pooled: tuple[Session, socket.socket],
) -> None:
    session, peer = pooled

    def daemon() -> None:
        read_request(peer)
        peer.recv(100, socket.MSG_WAITALL)  # the value, then silence

    threading.Thread(target=daemon, daemon=True).start()
    with pytest.raises(NoAnswer, match="may have run"):
        session.put(
            dataplane_pb2.BeginPutRequest(), [memoryview(b"v" * 100)], lambda e: e, timeout_s=None
        )


def test_a_pooled_session_closed_before_the_request_is_still_stale(
    pooled: tuple[Session, socket.socket],
) -> None:
    session, peer = pooled
    peer.close()  # the daemon ended the idle session
    with pytest.raises(StaleSession):
        session.unary(OP_STAT, stat_request(), object_pb2.StatResponse())


def test_replies_owed_to_earlier_requests_are_read_within_the_deadline() -> None:
    mine, peer = socket.socketpair()
    mine.settimeout(30.0)
    with mine, peer:
        # one release sent without waiting; its reply never comes
        session = Session(mine, reused=True, owed=1, io_timeout_s=30.0)
        started = time.monotonic()
        with pytest.raises(DeadlineError, match="owed"):
            session.unary(OP_STAT, stat_request(), object_pb2.StatResponse(), timeout_s=0.3)
        assert time.monotonic() - started < LATE_S
        assert not session.in_step


@pytest.fixture
def short_io_timeout(client: Client) -> Iterator[Client]:
    """The client's sessions give up on a silent daemon after IO_TIMEOUT_S."""
    plane = client.dataplane
    assert plane is not None
    plane._sessions.close()
    plane._sessions = SessionPool(b"", "", io_timeout_s=IO_TIMEOUT_S)
    yield client


def test_a_slow_delete_runs_once_and_says_it_may_have_run(
    daemon: Daemon, short_io_timeout: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = short_io_timeout
    client.put(Kind.SCRATCH, "x", b"x" * 100)
    client.stat(Kind.SCRATCH, "x")  # a session, pooled afterwards
    calls: list[float] = []
    real = bulk_session.delete_reply

    def slow(objects: object, acting: str, request: object) -> object:
        calls.append(time.monotonic())
        reply = real(objects, acting, request)  # type: ignore[arg-type]
        time.sleep(3 * IO_TIMEOUT_S)  # a daemon busy past the client's I/O timeout
        return reply

    monkeypatch.setattr(bulk_session, "delete_reply", slow)
    with pytest.raises(DeadlineError, match="may have run"):
        client.delete(Kind.SCRATCH, "x", timeout_s=20)
    assert len(calls) == 1
    monkeypatch.setattr(bulk_session, "delete_reply", real)
    with pytest.raises(NotFoundError):  # deleted, once
        client.stat(Kind.SCRATCH, "x")


def test_a_slow_if_absent_put_is_stored_once(
    daemon: Daemon, short_io_timeout: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = short_io_timeout
    client.put(Kind.SCRATCH, "warm", b"w")  # a session, pooled afterwards
    transfers = daemon.dataplane.transfers
    real = transfers.receive
    calls: list[int] = []

    def slow(ticket: object, conn: object) -> object:
        metas = real(ticket, conn)  # type: ignore[arg-type]
        calls.append(1)
        time.sleep(3 * IO_TIMEOUT_S)
        return metas

    monkeypatch.setattr(transfers, "receive", slow)
    item = PutItem(Kind.SCRATCH, "once", b"o" * 100, if_absent=True)
    with pytest.raises(DeadlineError, match="may have run"):
        client.dataplane.put_many([item], timeout_s=20)
    assert calls == [1]
    monkeypatch.setattr(transfers, "receive", real)
    assert client.get(Kind.SCRATCH, "once") == b"o" * 100
