"""A bulk session request's timeout bounds the whole request, not only the wait
for the daemon's first answer: a get whose values stop arriving (or trickle in
a byte at a time), a put whose bytes the daemon stops reading, and a put whose
final status never comes raise DeadlineError at the timeout, not after the
30 s I/O timeout, and leave the connection out of step (closed, not pooled).
The daemon's end is played by the test over a socket pair, so it can stall
exactly where each case needs."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from tiermem.client import DeadlineError
from tiermem.client.fastpath.session import Session
from tiermem.dataplane_wire import REQUEST, frame
from tiermem.v1 import common_pb2, dataplane_pb2

TIMEOUT_S = 0.4
#: generous: the point is "near the timeout", far below the 30 s I/O timeout
LATE_S = 5.0


def ok() -> bytes:
    return frame(dataplane_pb2.TransferStatus(code="OK").SerializeToString())


def read_request(peer: socket.socket) -> bytes:
    head = peer.recv(REQUEST.size, socket.MSG_WAITALL)
    _op, _flags, _cs, length = REQUEST.unpack(head)
    return peer.recv(length, socket.MSG_WAITALL) if length else b""


@pytest.fixture
def pair() -> Iterator[tuple[Session, socket.socket]]:
    mine, peer = socket.socketpair()
    mine.settimeout(30.0)
    with mine, peer:
        yield Session(mine, reused=False, io_timeout_s=30.0), peer


def serve(work: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


def get_request() -> dataplane_pb2.BeginGetRequest:
    key = common_pb2.ObjectKey(namespace="default", kind=common_pb2.KV_BLOCK, key="k")
    return dataplane_pb2.BeginGetRequest(keys=[key])


def put_request() -> dataplane_pb2.BeginPutRequest:
    return dataplane_pb2.BeginPutRequest()


def raises_deadline_in_time(call: Callable[[], object]) -> None:
    started = time.monotonic()
    with pytest.raises(DeadlineError, match="call's timeout"):
        call()
    assert time.monotonic() - started < LATE_S


def test_a_get_whose_values_trickle_in_stops_at_the_timeout(
    pair: tuple[Session, socket.socket],
) -> None:
    session, peer = pair
    stop = threading.Event()

    def daemon() -> None:
        read_request(peer)
        peer.sendall(ok() + frame(dataplane_pb2.Ticket().SerializeToString()))
        peer.sendall(b"x" * 1000)
        while not stop.is_set():  # a byte now and then: no single wait times out
            peer.sendall(b"x")
            time.sleep(0.02)

    thread = serve(daemon)
    try:
        started = time.monotonic()
        session.begin_get(get_request(), timeout_s=TIMEOUT_S)
        out = memoryview(bytearray(1 << 20))
        raises_deadline_in_time(lambda: session.receive([out]))
        assert time.monotonic() - started >= TIMEOUT_S * 0.9
        assert not session.in_step  # closed by its pool, never reused
    finally:
        stop.set()
        thread.join()


def test_a_put_whose_bytes_are_not_read_stops_at_the_timeout(
    pair: tuple[Session, socket.socket],
) -> None:
    session, peer = pair

    def daemon() -> None:
        read_request(peer)
        peer.sendall(ok())  # space reserved... and then it stops reading

    thread = serve(daemon)
    session.begin_put(put_request(), timeout_s=TIMEOUT_S)
    thread.join()
    big = memoryview(bytearray(64 << 20))  # more than the socket buffers hold
    raises_deadline_in_time(lambda: session.send([big]))
    assert not session.in_step


def test_a_pipelined_put_whose_bytes_are_not_read_stops_at_the_timeout(
    pair: tuple[Session, socket.socket],
) -> None:
    """A small put sends its bytes with the request (one gathered send): that
    send, too, waits at most the time left, not the 30 s I/O timeout."""
    session, peer = pair
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
    session.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 10)
    value = memoryview(bytearray(16 << 20))  # more than both buffers hold; nobody reads
    raises_deadline_in_time(lambda: session.put(put_request(), [value], lambda e: e, TIMEOUT_S))
    assert not session.in_step
    assert session.sock.gettimeout() == 30.0  # the I/O timeout is back for the next request


def test_a_pipelined_put_whose_bytes_are_read_a_trickle_at_a_time_stops_at_the_timeout(
    pair: tuple[Session, socket.socket],
) -> None:
    """Each of the gathered send's system calls waits at most the time left:
    a daemon that keeps taking a little cannot stretch the put's deadline."""
    session, peer = pair
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
    session.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 10)
    stop = threading.Event()

    def daemon() -> None:
        peer.settimeout(0.5)  # never blocks past the test's end
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                peer.recv(16 << 10)
            time.sleep(0.02)

    thread = serve(daemon)
    try:
        value = memoryview(bytearray(32 << 20))  # tens of seconds at this rate
        started = time.monotonic()
        raises_deadline_in_time(lambda: session.put(put_request(), [value], lambda e: e, TIMEOUT_S))
        assert time.monotonic() - started >= TIMEOUT_S * 0.5
        assert not session.in_step
    finally:
        stop.set()
        thread.join()


def test_a_pipelined_put_without_its_final_status_stops_at_the_timeout(
    pair: tuple[Session, socket.socket],
) -> None:
    session, peer = pair

    def daemon() -> None:
        read_request(peer)
        peer.recv(100, socket.MSG_WAITALL)  # the value
        peer.sendall(ok())  # accepted; the commit's status never comes

    thread = serve(daemon)
    raises_deadline_in_time(
        lambda: session.put(
            put_request(), [memoryview(b"v" * 100)], lambda e: e, timeout_s=TIMEOUT_S
        )
    )
    thread.join()
    assert not session.in_step


def test_without_a_timeout_the_stream_is_read_to_its_end(
    pair: tuple[Session, socket.socket],
) -> None:
    session, peer = pair

    def daemon() -> None:
        read_request(peer)
        peer.sendall(ok() + frame(dataplane_pb2.Ticket().SerializeToString()))
        for _ in range(10):  # slower than the timeouts above, but it ends
            peer.sendall(b"y" * 100)
            time.sleep(0.05)

    thread = serve(daemon)
    session.begin_get(get_request(), timeout_s=None)
    out = bytearray(1000)
    session.receive([memoryview(out)])
    thread.join()
    assert out == b"y" * 1000 and session.in_step
