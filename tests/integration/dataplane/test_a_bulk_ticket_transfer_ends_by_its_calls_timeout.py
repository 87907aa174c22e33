"""A put or get that goes by a bulk ticket (the daemon offers no sessions, or
they are refused) moves its bytes within the call's timeout: presenting the
ticket, sending the values, receiving them and the daemon's final status all
end by the call's deadline, as a bulk session request does. Before, only the
bulk channel's I/O timeout (30 s by default) bounded each wait, so a call with
``timeout_s=0.5`` whose bulk peer stalled returned after the whole I/O timeout
(by then falling back to gRPC, or failing a forced path)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tiermem.client import Client, DeadlineError, Kind
from tiermem.client.fastpath import ObjectRef, PutItem
from tiermem.client.fastpath.bulk import BulkPool
from tiermem.client.fastpath.plane import DataPlane
from tiermem.dataplane_wire import frame
from tiermem.v1 import dataplane_pb2

IO_TIMEOUT_S = 10.0
CALL_TIMEOUT_S = 0.5
#: a call must end within this: far above its timeout, far below the I/O timeout
LATE_S = 3 * CALL_TIMEOUT_S
VALUE = b"\x0b" * (1 << 20)


@pytest.fixture(params=["silent", "stalls after go"])
def stalled_peer(request: pytest.FixtureRequest) -> Iterator[str]:
    """A bulk address whose 'daemon' never answers a ticket (the kernel's
    backlog accepts the connection), or answers it "OK" and then neither
    reads nor writes another byte."""
    answers = request.param != "silent"
    stop = threading.Event()
    conns: list[socket.socket] = []
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as lsock:
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(8)
        lsock.settimeout(0.05)

        def serve() -> None:
            while answers and not stop.is_set():
                try:
                    conn, _ = lsock.accept()
                except TimeoutError:
                    continue
                conns.append(conn)
                conn.recv(1 << 10)  # the ticket's preamble
                conn.sendall(frame(dataplane_pb2.TransferStatus(code="OK").SerializeToString()))

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        yield f"127.0.0.1:{lsock.getsockname()[1]}"
        stop.set()
        thread.join(5)
        for conn in conns:
            conn.close()


def tickets_to(plane: DataPlane, address: str) -> None:
    """Transfers go by tickets (sessions refused) to ``address``."""
    if "bulk" not in plane.offer().paths:
        pytest.skip("the daemon offers no bulk channel here")
    plane._sessions._unsupported.add(address)
    plane._bulk.close()
    plane._bulk = BulkPool(b"", io_timeout_s=IO_TIMEOUT_S)
    plane._reachable = lambda _address: address  # type: ignore[method-assign]


def test_a_bulk_ticket_put_ends_by_its_calls_timeout(client: Client, stalled_peer: str) -> None:
    plane = client.dataplane
    tickets_to(plane, stalled_peer)
    started = time.monotonic()
    with pytest.raises(DeadlineError):
        plane.put_many([PutItem(Kind.KV_BLOCK, "v", VALUE)], path="bulk", timeout_s=CALL_TIMEOUT_S)
    assert time.monotonic() - started < LATE_S


def test_a_bulk_ticket_get_ends_by_its_calls_timeout(client: Client, stalled_peer: str) -> None:
    client.put(Kind.KV_BLOCK, "v", VALUE)
    plane = client.dataplane
    tickets_to(plane, stalled_peer)
    started = time.monotonic()
    with pytest.raises(DeadlineError):
        plane.get_many([ObjectRef(Kind.KV_BLOCK, "v")], path="bulk", timeout_s=CALL_TIMEOUT_S)
    assert time.monotonic() - started < LATE_S
