"""A client whose gRPC channel uses TLS never opens a TCP connection to the
bulk channel, even when the daemon (an older or misconfigured one) offers a
TCP address in Hello and names it in its tickets: the bulk channel is
plaintext, and a connection there carries the client's bearer token in its
preamble and the values' bytes beside it. A client on another host moves its
values over gRPC instead; one on the daemon's host uses the daemon's Unix
socket, also for tickets that name the TCP address. Checked for every client
call that moves a value's bytes by a fast path: objects, KV blocks, blobs."""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.security.tls_with_tokens import TOKEN, move_large_values, tls_client, tls_daemon
from tiermem.server.app import Daemon

#: the trap hangs up after this long without a byte from its peer
TRAP_IDLE_S = 0.5


class Trap:
    """A TCP listener standing where a daemon would serve its bulk channel: it
    records every connection and the bytes that arrived on it, then hangs up."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._lock = threading.Lock()
        self._received: list[bytes] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _peer = self._listener.accept()
            except OSError:
                return
            data = bytearray()
            with conn, contextlib.suppress(OSError):
                conn.settimeout(TRAP_IDLE_S)
                while chunk := conn.recv(1 << 16):
                    data += chunk
            with self._lock:
                self._received.append(bytes(data))

    def received(self) -> list[bytes]:
        """What arrived, one item per connection."""
        with self._lock:
            return list(self._received)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(timeout=5)


@pytest.fixture
def trap() -> Iterator[Trap]:
    t = Trap()
    yield t
    t.close()


def offer_tcp(daemon: Daemon, address: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``daemon`` offer ``address`` as its TCP bulk channel in Hello and
    name it in every ticket, as a daemon without the fix does under TLS."""
    plane = daemon.dataplane
    assert plane is not None
    hello = plane.hello
    monkeypatch.setattr(plane, "hello", lambda: dataclasses.replace(hello(), bulk_address=address))
    monkeypatch.setattr(plane.transfers, "address", address)


@pytest.mark.parametrize("sessions", [True, False], ids=["sessions", "tickets"])
@pytest.mark.parametrize("bulk_unix", [False, True], ids=["remote", "local"])
def test_a_tls_client_sends_nothing_to_a_tcp_bulk_address_it_is_offered(
    make_daemon: Callable[..., Daemon],
    tmp_path: Path,
    trap: Trap,
    monkeypatch: pytest.MonkeyPatch,
    sessions: bool,
    bulk_unix: bool,
) -> None:
    daemon, tls = tls_daemon(make_daemon, tmp_path, dataplane={"bulk": {"sessions": sessions}})
    offer_tcp(daemon, trap.address, monkeypatch)
    with tls_client(daemon, tls, bulk_unix=bulk_unix) as client:
        move_large_values(client)
        stats = client.path_stats()
    received = trap.received()
    assert not any(TOKEN.encode() in data for data in received)
    assert received == []  # no connection at all
    if bulk_unix:  # on the daemon's host: by its Unix socket
        assert stats["bulk"]["puts"] == 3 and stats["bulk"]["gets"] == 3
    else:
        assert stats["bulk"]["puts"] == stats["bulk"]["gets"] == 0
        # the object and the blob (KV blocks go by KvService's own streams then)
        assert stats["grpc"]["puts"] == 2 and stats["grpc"]["gets"] == 2
