"""``send_span`` under a reply's deadline (``before_send``) on a bulk connection
(a blocking socket with kernel send limits) runs the deadline between
sendfile calls that each move only what the send buffer takes, so a deadline
that passes while a slow peer reads ends the send there; and the socket is
blocking again afterwards (the connection's next transfer relies on it), both
when the span was sent and when the deadline cut it."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import pytest

from tiermem.server.dataplane.bulk import kernel_timeouts
from tiermem.server.dataplane.sendfile import FileSpan, send_span

SPAN_BYTES = 4 << 20
BUFFER_BYTES = 64 << 10


def _file(tmp_path: Path) -> int:
    path = tmp_path / "arena"
    path.write_bytes(os.urandom(SPAN_BYTES))
    return os.open(path, os.O_RDONLY)


def _reader(peer: socket.socket, pause_s: float) -> threading.Thread:
    def read() -> None:
        while True:
            try:
                if not peer.recv(BUFFER_BYTES):
                    return
            except OSError:
                return
            time.sleep(pause_s)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def test_a_deadline_passing_while_a_slow_peer_reads_ends_the_send(tmp_path: Path) -> None:
    fd = _file(tmp_path)
    mine, peer = socket.socketpair()
    try:
        mine.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, BUFFER_BYTES)
        kernel_timeouts(mine, 5.0)
        reader = _reader(peer, 0.01)  # keeps every send moving: no send limit runs out
        calls: list[float] = []

        def deadline() -> None:
            calls.append(time.monotonic())
            if len(calls) > 3:
                raise TimeoutError("the reply's deadline passed")

        with pytest.raises(TimeoutError, match="deadline"):
            send_span(mine, FileSpan(fd, 0, SPAN_BYTES), deadline)
        assert len(calls) == 4  # checked between sends, not once for the whole span
        assert os.get_blocking(mine.fileno())
        assert mine.gettimeout() is None
    finally:
        mine.close()
        peer.close()
        os.close(fd)
    reader.join(5)


def test_a_span_sent_under_a_deadline_leaves_the_socket_blocking(tmp_path: Path) -> None:
    fd = _file(tmp_path)
    mine, peer = socket.socketpair()
    try:
        kernel_timeouts(mine, 5.0)
        reader = _reader(peer, 0.0)
        calls: list[int] = []
        send_span(mine, FileSpan(fd, 0, SPAN_BYTES), lambda: calls.append(1))
        assert calls
        assert os.get_blocking(mine.fileno())
        assert mine.gettimeout() is None
    finally:
        mine.close()
        peer.close()
        os.close(fd)
    reader.join(5)
