"""Opening a bulk session (connecting and reading the daemon's opening status)
is part of the call that needed it: it ends by the call's timeout, raising
DeadlineError, instead of waiting for the bulk channel's I/O timeout (30 s by
default) when a daemon accepts the connection and never answers. Before, the
open was bounded by the I/O timeout alone, so a call with ``timeout_s=0.5``
hung for the whole I/O timeout and then went to gRPC. The time left after the
open is what the request itself gets."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from tiermem.client import Client, DeadlineError, Kind
from tiermem.client.fastpath.plane import OPENING_TIMEOUTS_BEFORE_COOLDOWN
from tiermem.client.fastpath.session import OpeningTimedOut, SessionPool
from tiermem.dataplane_wire import OP_STAT
from tiermem.server.app import Daemon
from tiermem.v1 import common_pb2, object_pb2

IO_TIMEOUT_S = 10.0
CALL_TIMEOUT_S = 0.5
#: far above the call's timeout, far below the I/O timeout
LATE_S = 3.0


@pytest.fixture
def silent_listener() -> Iterator[str]:
    """A bulk address whose 'daemon' accepts connections (the kernel's backlog
    does) and never answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as lsock:
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(8)
        yield f"127.0.0.1:{lsock.getsockname()[1]}"


def stat_request() -> object_pb2.StatRequest:
    key = common_pb2.ObjectKey(namespace="default", kind=common_pb2.SCRATCH, key="k")
    return object_pb2.StatRequest(key=key)


def test_an_open_the_daemon_never_answers_ends_by_the_calls_timeout(
    silent_listener: str,
) -> None:
    pool = SessionPool(b"", "", io_timeout_s=IO_TIMEOUT_S)
    started = time.monotonic()
    with (
        pytest.raises(OpeningTimedOut, match="opening"),
        pool.session(silent_listener, deadline=started + CALL_TIMEOUT_S),
    ):
        pass
    assert time.monotonic() - started < LATE_S
    pool.close()


def test_the_request_gets_what_the_open_left_of_the_timeout(silent_listener: str) -> None:
    """A session opened with a timeout passes the call's deadline on: the
    request on it (here unanswered) ends by the same deadline."""
    pool = SessionPool(b"", "", io_timeout_s=IO_TIMEOUT_S)
    mine, peer = socket.socketpair()
    mine.settimeout(IO_TIMEOUT_S)
    pool._pool.give_back(silent_listener, mine)  # a pooled session: no open
    started = time.monotonic()
    with (
        pytest.raises(DeadlineError),
        pool.session(silent_listener, deadline=started + CALL_TIMEOUT_S) as session,
    ):
        time.sleep(CALL_TIMEOUT_S / 2)  # the call spent half its time already
        session.unary(OP_STAT, stat_request(), object_pb2.StatResponse(), CALL_TIMEOUT_S)
    assert time.monotonic() - started < CALL_TIMEOUT_S + 0.2
    peer.close()
    pool.close()


def test_a_client_call_with_a_silent_bulk_channel_ends_by_its_timeout(
    client: Client, silent_listener: str
) -> None:
    plane = client.dataplane
    assert plane is not None
    plane._sessions.close()
    plane._sessions = SessionPool(b"", "", io_timeout_s=IO_TIMEOUT_S)
    offer = plane.offer()
    if "bulk" not in offer.paths:
        pytest.skip("the daemon offers no bulk channel")
    offer.bulk_address = silent_listener  # a daemon that accepts and never answers
    for _ in range(OPENING_TIMEOUTS_BEFORE_COOLDOWN):
        started = time.monotonic()
        with pytest.raises(DeadlineError, match="opening"):
            client.stat(Kind.SCRATCH, "k", timeout_s=CALL_TIMEOUT_S)
        assert time.monotonic() - started < LATE_S
    # after that many openings in a row found no answer, the silent bulk channel
    # is left alone for a while: the next calls go by gRPC
    client.put(Kind.SCRATCH, "k", b"v", timeout_s=LATE_S)
    assert client.stat(Kind.SCRATCH, "k", timeout_s=CALL_TIMEOUT_S).size_bytes == 1


def test_one_short_call_meeting_a_slow_opening_leaves_the_bulk_channel_on(
    daemon: Daemon, client: Client
) -> None:
    """A call whose own short timeout runs out while a healthy daemon is slow to
    answer a session's opening says nothing about the channel: it used to turn
    the bulk channel off for 30 s for every later call of the client."""
    plane = client.dataplane
    assert plane is not None
    if "bulk" not in plane.offer().paths:
        pytest.skip("the daemon offers no bulk channel")
    client.put(Kind.SCRATCH, "k", b"v")
    plane._sessions.close()  # no pooled session: the next call opens one
    plane._sessions = SessionPool(b"", "", io_timeout_s=IO_TIMEOUT_S)
    bulk = daemon.dataplane._bulk
    real = bulk.sessions

    def slow_open(conn: socket.socket, credential: bytes, host: str) -> bool:
        time.sleep(0.3)  # the daemon is busy for a moment
        return real(conn, credential, host)

    bulk.sessions = slow_open
    try:
        with pytest.raises(DeadlineError, match="opening"):
            client.stat(Kind.SCRATCH, "k", timeout_s=0.1)
    finally:
        bulk.sessions = real
    assert plane._bulk_usable()
    assert "bulk" in plane.paths()
