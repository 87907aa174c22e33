"""A reading peer for tests of what a sender writes on a socket."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable


def received_while(send: Callable[[socket.socket], None], nbytes: int) -> bytes:
    """What a peer reading up to ``nbytes`` gets while ``send(socket)`` runs on
    the other end of a socket pair (in timeout mode, so the kernel may take
    part of a send at a time)."""
    a, b = socket.socketpair()
    got = bytearray()

    def read() -> None:
        while len(got) < nbytes:
            chunk = b.recv(1 << 20)
            if not chunk:
                return
            got.extend(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    with a, b:
        a.settimeout(10)
        send(a)
        reader.join(10)
    return bytes(got)
