"""Bulk connections (the daemon's end and the client's pooled ones) are blocking
sockets whose timeouts the kernel keeps (``SO_RCVTIMEO``/``SO_SNDTIMEO``), so a
receive or send is one system call instead of a ``poll`` and the call. The
timeouts still hold: a session that stalls inside a request is closed after
``io_timeout_s``, a daemon that never answers fails the client's request after
its I/O timeout, and a pooled connection the daemon closed is noticed before a
request is sent on it."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable

import pytest

from tests.integration.dataplane.helpers import read_status, wait_for
from tiermem.client import Client, Kind
from tiermem.client.fastpath.bulk import BulkBroken, IdleSockets
from tiermem.client.fastpath.bulk import recv_exact as client_recv_exact
from tiermem.client.fastpath.session import Session, _peer_closed
from tiermem.dataplane_wire import OP_PUT, OP_STAT, REQUEST, SESSION_TICKET, frame, preamble
from tiermem.server.app import Daemon
from tiermem.server.dataplane.bulk import recv_exact as daemon_recv_exact
from tiermem.socket_timeouts import use_kernel_timeouts
from tiermem.v1 import dataplane_pb2, object_pb2

IO_TIMEOUT_S = 0.3
#: generous: "near the timeout", far below the default 30 s
LATE_S = 5.0


def _recv_timeout_s(sock: socket.socket) -> float:
    sec, usec = struct.unpack("@ll", sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, 16))
    return float(sec + usec / 1e6)


def _open_session(daemon: Daemon) -> socket.socket:
    dp = daemon.dataplane
    assert dp is not None
    host, _, port = dp.transfers.address.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.sendall(preamble(SESSION_TICKET, b"") + frame(b""))
    assert read_status(sock).code == "OK"
    return sock


def test_the_daemons_session_connections_are_blocking_with_kernel_timeouts(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(dataplane={"bulk": {"idle_timeout_s": 7.0, "io_timeout_s": 3.0}})
    dp = daemon.dataplane
    assert dp is not None
    with _open_session(daemon):
        server = dp._bulk
        assert server is not None
        wait_for(lambda: len(server._conns) == 1, "the daemon to hold the connection")
        (conn,) = server._conns
        assert conn.gettimeout() is None  # blocking: no poll before each call
        wait_for(lambda: abs(_recv_timeout_s(conn) - 7.0) < 0.01, "the idle timeout")


def test_a_session_that_stalls_inside_a_request_is_closed_after_the_io_timeout(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(dataplane={"bulk": {"io_timeout_s": IO_TIMEOUT_S}})
    with _open_session(daemon) as sock:
        payload = dataplane_pb2.BeginPutRequest().SerializeToString() + b"\0" * 90
        head = REQUEST.pack(OP_PUT, 0, 0, len(payload))
        sock.sendall(head + payload[:10])  # ...and the rest never comes
        started = time.monotonic()
        sock.settimeout(LATE_S + 5)
        assert sock.recv(1) == b""  # the daemon gave up on the request and closed
        assert IO_TIMEOUT_S * 0.8 <= time.monotonic() - started < LATE_S
    with Client(daemon.address) as c:  # the daemon serves on
        c.put(Kind.SCRATCH, "after", b"v" * 100)
        assert c.get(Kind.SCRATCH, "after") == b"v" * 100


def test_a_receive_that_waits_past_the_kernel_timeout_raises_timeout_error() -> None:
    a, b = socket.socketpair()
    with a, b:
        use_kernel_timeouts(a, IO_TIMEOUT_S, IO_TIMEOUT_S)
        b.sendall(b"12")
        for recv in (
            lambda: daemon_recv_exact(a, 4),
            lambda: client_recv_exact(a, memoryview(bytearray(4))),
        ):
            started = time.monotonic()
            with pytest.raises(TimeoutError, match="timed out waiting for"):
                recv()
            assert IO_TIMEOUT_S * 0.8 <= time.monotonic() - started < LATE_S
            b.sendall(b"12")  # the next case starts with two bytes again


def test_a_daemon_that_never_answers_fails_the_request_after_the_io_timeout() -> None:
    mine, peer = socket.socketpair()
    with mine, peer:
        use_kernel_timeouts(mine, IO_TIMEOUT_S, IO_TIMEOUT_S)
        session = Session(mine, reused=False, io_timeout_s=IO_TIMEOUT_S)
        started = time.monotonic()
        with pytest.raises(BulkBroken, match="timed out waiting for the daemon's reply"):
            session.unary(OP_STAT, object_pb2.StatRequest(), object_pb2.StatResponse())
        assert IO_TIMEOUT_S * 0.8 <= time.monotonic() - started < LATE_S
        assert not session.in_step  # closed by its pool, never reused


def test_the_client_connects_with_kernel_timeouts_and_notices_a_closed_pooled_connection() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    with listener:
        port = listener.getsockname()[1]
        sock = IdleSockets(io_timeout_s=2.5).connect(f"127.0.0.1:{port}")
        daemon_end, _ = listener.accept()
        with sock, daemon_end:
            assert sock.gettimeout() is None
            assert abs(_recv_timeout_s(sock) - 2.5) < 0.01
            assert not _peer_closed(sock)  # open and idle: answered at once
            daemon_end.sendall(b"x")
            assert not _peer_closed(sock)  # a stray byte is not a close
            assert sock.recv(1) == b"x"
            daemon_end.close()
            wait_for(lambda: _peer_closed(sock), "the close to be seen")
