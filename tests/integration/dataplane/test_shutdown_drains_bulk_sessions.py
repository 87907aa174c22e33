"""Daemon shutdown drains bulk sessions as gRPC drains its calls: a request in
progress is answered (within the shutdown grace period), a session waiting for
its next request is closed at once, and no session opens meanwhile."""

from __future__ import annotations

import threading
from collections.abc import Callable

from tests.integration.dataplane.helpers import read_status
from tests.integration.dataplane.test_bulk_sessions_authenticate_once_and_stay_exact import (
    closed,
    open_session,
)
from tests.integration.dataplane.test_session_requests_carry_the_callers_timeout import (
    slow_stat,
    stat_request,
)
from tiermem.client import Client, Kind
from tiermem.client.fastpath.bulk import read_frame
from tiermem.dataplane_wire import OP_STAT, request
from tiermem.server.app import Daemon
from tiermem.v1 import object_pb2


def test_a_request_in_progress_is_answered_and_idle_sessions_close(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(server={"shutdown_grace_s": 10.0})
    with Client(daemon.address) as c:
        c.put(Kind.SCRATCH, "there", b"x" * 10)
    slow = slow_stat(daemon, 1.0, checks_deadline=False)
    busy, opened = open_session(daemon)
    idle, idle_opened = open_session(daemon)
    assert opened.code == idle_opened.code == "OK"
    with busy, idle:
        busy.sendall(request(OP_STAT, stat_request("there")))
        assert slow.started.wait(10)  # the Stat is running
        stopper = threading.Thread(target=daemon.stop)
        stopper.start()
        idle.settimeout(5)
        assert closed(idle)  # closed without waiting for the busy one
        assert not slow.finished.is_set()
        busy.settimeout(10)
        status = read_status(busy)  # the request in progress is answered in full
        assert status.code == "OK", status
        reply = object_pb2.StatResponse()
        reply.ParseFromString(read_frame(busy, 1 << 20))
        assert reply.meta.size_bytes == 10
        assert closed(busy)  # and then its session ends
        stopper.join(30)
        assert not stopper.is_alive()


def test_no_session_opens_while_the_daemon_drains(daemon: Daemon) -> None:
    daemon.bulk_sessions.drain()
    sock, opened = open_session(daemon)
    with sock:
        assert opened.code == "UNAVAILABLE"
        assert "shutting down" in opened.message
        assert closed(sock)
    assert daemon.bulk_sessions.wait_drained(5)
