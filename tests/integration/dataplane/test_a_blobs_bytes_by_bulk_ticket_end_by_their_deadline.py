"""A blob get or put whose bytes go by a bulk ticket ends by the deadline its
bytes get (the call's timeout plus time by their size, as on the gRPC
stream): a bulk peer that keeps trickling a byte at a time, or taking a KiB
at a time, no longer keeps the call going. Past the deadline the call raises
``DeadlineError`` and closes the connection.

Before, only the bulk channel's I/O timeout bounded each wait (the byte
streams took no deadline), so a call with ``timeout_s=0.5`` lasted as long as
the peer trickled: here until the peer gave up after ``PEER_GIVES_UP_S`` (a
get then failed its forced path with FAILED_PRECONDITION, a put with
BulkBroken)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tiermem.client import Client, DeadlineError
from tiermem.client.fastpath.bulk import BulkPool
from tiermem.dataplane_wire import frame
from tiermem.v1 import dataplane_pb2

IO_TIMEOUT_S = 10.0
CALL_TIMEOUT_S = 0.5
PEER_GIVES_UP_S = 10.0
#: a call must end within this: past its bytes' deadline (about 0.5-1 s),
#: far below the I/O timeout and the trickle's length
LATE_S = 4.0
GET_BYTES = 1 << 20
PUT_BYTES = 8 << 20  # more than both ends' socket buffers hold
TRICKLE_PAUSE_S = 0.02


@pytest.fixture
def trickling_peer() -> Iterator[str]:
    """A bulk address whose 'daemon' answers a ticket "OK" and then sends a
    byte, and reads up to a KiB, every ``TRICKLE_PAUSE_S``, until the client
    closes or ``PEER_GIVES_UP_S`` passes."""
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def trickle(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(TRICKLE_PAUSE_S)
            conn.recv(1 << 10)  # the ticket's preamble
            conn.sendall(frame(dataplane_pb2.TransferStatus(code="OK").SerializeToString()))
            until = time.monotonic() + PEER_GIVES_UP_S
            while not stop.is_set() and time.monotonic() < until:
                try:
                    conn.sendall(b"\x01")
                    if not conn.recv(1 << 10):
                        return
                except TimeoutError:
                    continue
                except OSError:
                    return
                time.sleep(TRICKLE_PAUSE_S)

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as lsock:
        lsock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 10)
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(8)
        lsock.settimeout(0.05)

        def serve() -> None:
            while not stop.is_set():
                try:
                    conn, _ = lsock.accept()
                except TimeoutError:
                    continue
                thread = threading.Thread(target=trickle, args=(conn,), daemon=True)
                threads.append(thread)
                thread.start()

        server = threading.Thread(target=serve, daemon=True)
        server.start()
        yield f"127.0.0.1:{lsock.getsockname()[1]}"
        stop.set()
        server.join(5)
        for thread in threads:
            thread.join(5)


def _bulk_goes_to(client: Client, address: str) -> None:
    """The client's blob transfers by bulk ticket dial ``address``."""
    plane = client.dataplane
    if "bulk" not in plane.offer().paths:
        pytest.skip("the daemon offers no bulk channel here")
    plane._bulk.close()
    plane._bulk = BulkPool(b"", io_timeout_s=IO_TIMEOUT_S)
    plane._reachable = lambda _address: address  # type: ignore[method-assign]


@pytest.mark.parametrize("how", ["get", "get_into", "put"])
def test_a_blob_by_bulk_ticket_ends_by_its_deadline(
    client: Client, trickling_peer: str, how: str
) -> None:
    client.blobs.put("b", b"\x0c" * GET_BYTES)
    _bulk_goes_to(client, trickling_peer)
    started = time.monotonic()
    with pytest.raises(DeadlineError):
        if how == "get":
            client.blobs.get("b", path="bulk", timeout_s=CALL_TIMEOUT_S)
        elif how == "get_into":
            buffer = bytearray(GET_BYTES)
            client.blobs.get_into("b", buffer, path="bulk", timeout_s=CALL_TIMEOUT_S)
        else:
            # (a put resumes a stream cut off by its deadline up to ``retries``
            # times, each try with a deadline of its own, as on gRPC: one here)
            data = b"\x0d" * PUT_BYTES
            client.blobs.put("p", data, path="bulk", retries=0, timeout_s=CALL_TIMEOUT_S)
    assert time.monotonic() - started < LATE_S
