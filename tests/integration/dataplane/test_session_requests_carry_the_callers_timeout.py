"""A bulk session request carries its caller's timeout in its header: the daemon
runs it within that (and never past ``limits.max_request_s``), answering
DEADLINE_EXCEEDED as it does over gRPC, and the client stops waiting for a
daemon that does not answer in time, raising DeadlineError instead of going to
gRPC or waiting for its 30 s I/O timeout."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.integration.dataplane.helpers import read_status
from tests.integration.dataplane.test_bulk_sessions_authenticate_once_and_stay_exact import (
    open_session,
    sessions_opened,
)
from tests.integration.dataplane.test_metadata_calls_and_small_puts_ride_the_bulk_session import (
    no_grpc_objects,
)
from tiermem.client import Client, DeadlineError, Kind
from tiermem.client.fastpath.bulk import read_frame
from tiermem.dataplane_wire import (
    MAX_REQUEST_TIMEOUT_CS,
    OP_STAT,
    REQUEST,
    request,
    timeout_cs,
)
from tiermem.server.api.bulk_session import UnaryOp
from tiermem.server.app import Daemon
from tiermem.server.services.guard import Guard
from tiermem.v1 import common_pb2, object_pb2


def test_the_header_carries_timeouts_in_centiseconds_rounded_up() -> None:
    assert timeout_cs(None) == 0  # none: the daemon's own limit
    assert timeout_cs(2.5) == 250
    assert timeout_cs(0.0001) == 1  # a positive timeout never reads as "none"
    assert timeout_cs(-1.0) == 1  # already past: the shortest budget
    assert timeout_cs(MAX_REQUEST_TIMEOUT_CS / 100) == MAX_REQUEST_TIMEOUT_CS
    assert timeout_cs(10_000.0) == 0  # longer than the field: the daemon's limit
    op, flags, cs, length = REQUEST.unpack(request(OP_STAT, b"abc", 1, 0.25)[: REQUEST.size])
    assert (op, flags, cs, length) == (OP_STAT, 1, 25, 3)


@dataclass
class SlowStat:
    started: threading.Event  # set when a slow Stat begins
    finished: threading.Event  # set when it ends
    restore: Callable[[], None]  # the daemon's own Stat again


def slow_stat(daemon: Daemon, seconds: float, checks_deadline: bool = True) -> SlowStat:
    """Make the daemon's session Stat take ``seconds`` before it answers (then
    check the request's deadline, as long-running handlers do)."""
    op = daemon.bulk_sessions.unary[OP_STAT]
    started, finished = threading.Event(), threading.Event()

    def restore() -> None:
        daemon.bulk_sessions.unary[OP_STAT] = op

    def run(owner: str, acting: str, msg: Any) -> Any:
        started.set()
        time.sleep(seconds)
        try:
            if checks_deadline:
                Guard.check_deadline("the slow stat")
            return op.run(owner, acting, msg)
        finally:
            finished.set()

    daemon.bulk_sessions.unary[OP_STAT] = UnaryOp(op.method, op.request, run)
    return SlowStat(started, finished, restore)


def stat_request(name: str) -> bytes:
    key = common_pb2.ObjectKey(namespace="default", kind=common_pb2.SCRATCH, key=name)
    return object_pb2.StatRequest(key=key).SerializeToString()


@pytest.fixture
def session_of(daemon: Daemon) -> Iterator[Any]:
    sock, opened = open_session(daemon)
    assert opened.code == "OK"
    with sock:
        yield sock


def test_the_daemon_answers_deadline_exceeded_past_the_callers_timeout(
    daemon: Daemon, session_of: Any
) -> None:
    with Client(daemon.address) as c:
        c.put(Kind.SCRATCH, "there", b"x" * 10)
    slow_stat(daemon, 0.2)
    session_of.sendall(request(OP_STAT, stat_request("there"), timeout_s=0.05))
    status = read_status(session_of)
    assert status.code == "DEADLINE_EXCEEDED", status
    assert "deadline" in status.message and status.request_id
    # a refusal leaves the session open: the same Stat with room to run
    session_of.sendall(request(OP_STAT, stat_request("there"), timeout_s=5.0))
    assert read_status(session_of).code == "OK"
    reply = object_pb2.StatResponse()
    reply.ParseFromString(read_frame(session_of, 1 << 20))
    assert reply.meta.size_bytes == 10


def test_the_daemons_own_limit_bounds_a_longer_or_missing_timeout(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(limits={"max_request_s": 0.05})
    slow_stat(daemon, 0.2)
    sock, opened = open_session(daemon)
    assert opened.code == "OK"
    with sock:
        for timeout_s in (None, 30.0):
            sock.sendall(request(OP_STAT, stat_request("any"), timeout_s=timeout_s))
            assert read_status(sock).code == "DEADLINE_EXCEEDED"


def test_the_client_stops_waiting_at_its_timeout_without_going_to_grpc(daemon: Daemon) -> None:
    with Client(daemon.address) as c:
        c.put(Kind.SCRATCH, "there", b"x" * 10)
        assert c.stat(Kind.SCRATCH, "there").size_bytes == 10  # the session is open
        called = no_grpc_objects(c)
        slow = slow_stat(daemon, 2.0, checks_deadline=False)  # a daemon that hangs
        started = time.monotonic()
        with pytest.raises(DeadlineError, match=r"within 0\.3 s"):
            c.stat(Kind.SCRATCH, "there", timeout_s=0.3)
        assert time.monotonic() - started < 1.5
        assert called == []  # not retried over gRPC
        assert slow.finished.wait(10)  # the hung Stat ends; its late reply goes nowhere
        slow.restore()
        # the next call opens a new session and gets its own answer
        assert c.stat(Kind.SCRATCH, "there", timeout_s=5).size_bytes == 10
        assert called == []
    assert sessions_opened(daemon) == 2  # the timed-out session was closed, not reused
