"""A bulk client that reads a reply a few KiB at a time, for the tests of the
whole-reply deadline (values sent from memory and by sendfile)."""

from __future__ import annotations

import socket
import time

from tests.integration.dataplane.helpers import MiB, read_status
from tiermem.dataplane_wire import preamble

SIZE = 16 * MiB
IO_TIMEOUT_S = 2.0
MIN_RATE = 4 * MiB  # deadline: max(2 s, 16 MiB / 4 MiB/s) = 4 s
CUT_WITHIN_S = 40.0
TRICKLE_BYTES = 4096
TRICKLE_PAUSE_S = 0.02  # at most ~200 KiB/s: 16 MiB would take 80 s


def present(address: str, ticket_id: bytes) -> socket.socket:
    """Connect with a small receive buffer, present the ticket, read its OK."""
    host, _, port = address.rpartition(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 10)  # before connect
    sock.settimeout(30)
    sock.connect((host, int(port)))
    sock.sendall(preamble(ticket_id, b""))
    assert read_status(sock).code == "OK"
    return sock


def trickle(sock: socket.socket) -> tuple[int, float, bool]:
    """Read a few KiB at a time until the daemon ends the connection or
    ``CUT_WITHIN_S`` passes; returns (bytes read, seconds, cut off)."""
    start = time.monotonic()
    got = 0
    try:
        while time.monotonic() - start < CUT_WITHIN_S:
            try:
                chunk = sock.recv(TRICKLE_BYTES)
            except ConnectionResetError:
                return got, time.monotonic() - start, True
            if not chunk:
                return got, time.monotonic() - start, True
            got += len(chunk)
            time.sleep(TRICKLE_PAUSE_S)
        return got, time.monotonic() - start, False
    finally:
        sock.close()
