"""Bulk connections get the send and receive buffer sizes configured for them,
on the daemon's side (``dataplane.bulk.send_buffer_bytes`` and
``receive_buffer_bytes``) and on the client's (``IdleSockets``): two sizes,
not one for both. Linux reports twice the size set (its bookkeeping)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

from tests.integration.dataplane.helpers import MiB
from tiermem.client.fastpath.bulk import IdleSockets
from tiermem.server.app import Daemon


def _buffers(sock: socket.socket) -> tuple[int, int]:
    return (
        sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
        sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF),
    )


def test_the_daemon_and_the_client_set_their_own_send_and_receive_sizes(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(
        dataplane={"bulk": {"send_buffer_bytes": 1 * MiB, "receive_buffer_bytes": 3 * MiB}}
    )
    assert daemon.dataplane is not None
    bulk = daemon.dataplane._bulk
    assert bulk is not None
    sockets = IdleSockets(io_timeout_s=5.0, send_buffer_bytes=512 << 10, receive_buffer_bytes=MiB)
    client = sockets.connect(bulk.address)
    try:
        assert _buffers(client) == (2 * (512 << 10), 2 * MiB)
        deadline = time.monotonic() + 5
        while True:  # the daemon's thread sets them once it has the connection
            with bulk._lock:
                served = list(bulk._conns)
            if served and _buffers(served[0]) == (2 * MiB, 6 * MiB):
                break
            assert time.monotonic() < deadline, [_buffers(s) for s in served]
            time.sleep(0.01)
    finally:
        client.close()
        sockets.close()
