"""Bulk connections are blocking sockets whose reads and writes each give up
after the configured limit (``SO_RCVTIMEO``/``SO_SNDTIMEO``), instead of
Python socket timeouts (a poll before every read and write, an ioctl at every
change of limit: system calls that let go of the interpreter lock, which under
load costs the request's thread a thread-switch interval each). The limits must
still cut stalls off: a read that gets nothing, a write the peer never takes."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from tiermem.server.dataplane.bulk import kernel_timeouts, receive_timeout, recv_exact
from tiermem.server.dataplane.sendfile import FileSpan, send_span

LIMIT_S = 0.2


def test_a_read_that_gets_nothing_ends_at_the_limit() -> None:
    mine, peer = socket.socketpair()
    with mine, peer:
        kernel_timeouts(mine, LIMIT_S)
        assert mine.gettimeout() is None  # blocking: no poll before each read
        peer.sendall(b"abc")  # part of what is expected, then nothing
        started = time.monotonic()
        with pytest.raises(TimeoutError, match="3 of 8 bytes"):
            recv_exact(mine, 8)
        assert LIMIT_S * 0.9 <= time.monotonic() - started < LIMIT_S * 10


def test_the_read_limit_changes_without_the_write_limit() -> None:
    mine, peer = socket.socketpair()
    with mine, peer:
        kernel_timeouts(mine, 5.0)
        receive_timeout(mine, LIMIT_S)  # a short wait for the next request
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            recv_exact(mine, 1, between_transfers=True)
        assert time.monotonic() - started < 2.0
        peer.sendall(b"x")
        assert recv_exact(mine, 1) == b"x"  # the socket still works


def test_a_write_the_peer_never_takes_ends_at_the_limit() -> None:
    mine, peer = socket.socketpair()
    with mine, peer:
        kernel_timeouts(mine, LIMIT_S)
        started = time.monotonic()
        with pytest.raises(OSError):  # BlockingIOError: the send limit ran out
            mine.sendall(b"x" * (64 << 20))
        assert time.monotonic() - started < LIMIT_S * 20


def test_a_sendfile_the_peer_never_takes_ends_at_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "arena"
    path.write_bytes(os.urandom(64 << 20))
    fd = os.open(path, os.O_RDONLY)
    mine, peer = socket.socketpair()
    try:
        kernel_timeouts(mine, LIMIT_S)
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            send_span(mine, FileSpan(fd, 0, 64 << 20))
        assert time.monotonic() - started < LIMIT_S * 20
    finally:
        os.close(fd)
        mine.close()
        peer.close()
