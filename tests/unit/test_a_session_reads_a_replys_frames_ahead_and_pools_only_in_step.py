"""A bulk session reads ahead: a reply whose frames (status, ticket, the start
of the values) arrive together is taken in one receive, not two per frame,
and every byte still lands where it belongs however the stream is split.
Bytes left over after a request mean the connection is out of step with the
protocol: it is closed, never pooled. The daemon's end is played by the test
over a socket pair."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tiermem.client.fastpath.session import READ_AHEAD_BYTES, Session, SessionPool
from tiermem.dataplane_wire import REQUEST, frame
from tiermem.v1 import common_pb2, dataplane_pb2

SMALL = bytes(range(256)) * 2  # 512 B: lies inside the first read-ahead
LARGE = bytes((i * 7) % 251 for i in range(3 * READ_AHEAD_BYTES + 123))  # read straight in


class CountingSocket:
    """A socket that counts its receives (everything else passes through)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.receives = 0

    def recv_into(self, view: Any, nbytes: int = 0) -> int:
        self.receives += 1
        return self._sock.recv_into(view, nbytes)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


@pytest.fixture
def pair() -> Iterator[tuple[CountingSocket, socket.socket]]:
    mine, peer = socket.socketpair()
    mine.settimeout(10.0)
    peer.settimeout(10.0)
    with mine, peer:
        yield CountingSocket(mine), peer


def read_request(peer: socket.socket) -> None:
    head = peer.recv(REQUEST.size, socket.MSG_WAITALL)
    length = REQUEST.unpack(head)[3]
    if length:
        peer.recv(length, socket.MSG_WAITALL)


def get_reply(values: list[bytes]) -> bytes:
    """What a daemon sends for a get of ``values``: STATUS OK, the ticket, the values."""
    ticket = dataplane_pb2.Ticket(stream_bytes=sum(len(v) for v in values))
    for v in values:
        ticket.objects.add(size_bytes=len(v))
    ok = dataplane_pb2.TransferStatus(code="OK").SerializeToString()
    return frame(ok) + frame(ticket.SerializeToString()) + b"".join(values)


def get_request() -> dataplane_pb2.BeginGetRequest:
    key = common_pb2.ObjectKey(namespace="default", kind=common_pb2.KV_BLOCK, key="k")
    return dataplane_pb2.BeginGetRequest(keys=[key])


def answer(peer: socket.socket, reply: bytes, piece: int | None = None) -> threading.Thread:
    """Read one request, then send ``reply`` whole or ``piece`` bytes a send."""

    def daemon() -> None:
        read_request(peer)
        if piece is None:
            peer.sendall(reply)
            return
        for start in range(0, len(reply), piece):
            peer.sendall(reply[start : start + piece])

    thread = threading.Thread(target=daemon, daemon=True)
    thread.start()
    return thread


def get(session: Session, sizes: list[int]) -> list[bytes]:
    ticket = session.begin_get(get_request(), timeout_s=5.0)
    assert [o.size_bytes for o in ticket.objects] == sizes
    outs = [memoryview(bytearray(n)) for n in sizes]
    session.receive(outs)
    return [bytes(o) for o in outs]


def test_a_small_reply_sent_at_once_takes_one_receive(
    pair: tuple[CountingSocket, socket.socket],
) -> None:
    sock, peer = pair
    session = Session(sock, reused=False, io_timeout_s=10.0)  # type: ignore[arg-type]
    thread = answer(peer, get_reply([SMALL]))  # one send: it arrives as one piece
    assert get(session, [len(SMALL)]) == [SMALL]
    thread.join(5)
    assert sock.receives == 1  # reading each frame exactly took five
    assert session.buffered == 0


def test_values_land_byte_exact_however_the_stream_is_split(
    pair: tuple[CountingSocket, socket.socket],
) -> None:
    sock, peer = pair
    for piece in (None, 1, 5, 4093, READ_AHEAD_BYTES + 1):
        # a byte a send only for a short reply (each send is a Python call)
        values = [SMALL, SMALL[:7]] if piece == 1 else [SMALL, LARGE, b"", LARGE[:READ_AHEAD_BYTES]]
        session = Session(sock, reused=False, io_timeout_s=10.0)  # type: ignore[arg-type]
        thread = answer(peer, get_reply(values), piece)
        assert get(session, [len(v) for v in values]) == values, piece
        assert session.buffered == 0
        thread.join(5)


def test_a_put_reads_its_acceptance_and_final_status_together(
    pair: tuple[CountingSocket, socket.socket],
) -> None:
    sock, peer = pair
    session = Session(sock, reused=False, io_timeout_s=10.0)  # type: ignore[arg-type]
    ok = frame(dataplane_pb2.TransferStatus(code="OK").SerializeToString())
    final = frame(dataplane_pb2.TransferStatus(code="OK", message="stored").SerializeToString())

    def daemon() -> None:
        read_request(peer)
        peer.recv(len(SMALL), socket.MSG_WAITALL)
        peer.sendall(ok + final)

    thread = threading.Thread(target=daemon, daemon=True)
    thread.start()
    status = session.put(
        dataplane_pb2.BeginPutRequest(), [memoryview(SMALL)], lambda e: e, timeout_s=5.0
    )
    thread.join(5)
    assert status.message == "stored"
    assert sock.receives == 1
    assert session.buffered == 0


def test_bytes_left_over_after_a_request_close_the_connection(
    pair: tuple[CountingSocket, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    sock, peer = pair
    pool = SessionPool(b"", "")
    monkeypatch.setattr(pool, "_open", lambda address, deadline: sock)
    given_back: list[object] = []
    monkeypatch.setattr(pool._pool, "give_back", lambda address, s: given_back.append(s))

    answer(peer, get_reply([SMALL]))
    with pool.session("daemon:1") as session:
        assert get(session, [len(SMALL)]) == [SMALL]
    assert given_back == [sock]  # in step: pooled

    answer(peer, get_reply([SMALL]) + b"stray")
    with pool.session("daemon:1") as session:
        assert get(session, [len(SMALL)]) == [SMALL]
        assert session.buffered == len(b"stray")
    assert given_back == [sock]  # out of step: not pooled again
    assert sock.fileno() == -1  # but closed
