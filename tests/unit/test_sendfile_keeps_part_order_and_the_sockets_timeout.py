"""``send_values`` writes a reply and its values in order whether each value
leaves from memory or by sendfile from the arena file, and a peer that stops
reading fails the send within the socket's timeout instead of hanging it."""

from __future__ import annotations

import errno
import os
import socket
import time
from pathlib import Path

import pytest

from tests.unit.peer import received_while
from tiermem.server.dataplane.sendfile import SENDFILE_MIN_BYTES, send_values

MiB = 1 << 20


def _file(tmp_path: Path, data: bytes) -> int:
    path = tmp_path / "arena"
    path.write_bytes(data)
    return os.open(path, os.O_RDONLY)


def test_values_from_memory_and_from_the_file_arrive_in_order(tmp_path: Path) -> None:
    arena = os.urandom(3 * MiB + 4096)
    fd = _file(tmp_path, arena)
    mapped = memoryview(arena)
    # two large values that "lie in the file" (located by their offset in it),
    # one large value that does not, and small ones between them
    in_file_a, in_file_b = mapped[4096 : 4096 + MiB], mapped[2 * MiB : 3 * MiB + 7]
    elsewhere = memoryview(os.urandom(SENDFILE_MIN_BYTES))
    small = memoryview(b"small value")
    offsets = {id(in_file_a): 4096, id(in_file_b): 2 * MiB}
    views = [small, in_file_a, elsewhere, in_file_b, small]
    expected = b"HEADER" + b"".join(bytes(v) for v in views)
    located: list[int] = []

    def locate(view: memoryview) -> int | None:
        offset = offsets.get(id(view))
        if offset is not None:
            located.append(offset)
        return offset

    try:
        got = received_while(
            lambda conn: send_values(conn, b"HEADER", views, fd, locate), len(expected)
        )
    finally:
        os.close(fd)
    assert located == [4096, 2 * MiB]  # the small values were never located
    assert got == expected


def test_a_peer_that_stops_reading_fails_the_send_within_the_timeout(tmp_path: Path) -> None:
    fd = _file(tmp_path, os.urandom(16 * MiB))
    a, b = socket.socketpair()
    try:
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 10)
        a.settimeout(0.3)
        started = time.monotonic()
        view = memoryview(bytearray(16 * MiB))
        with pytest.raises(TimeoutError):
            send_values(a, b"", [view], fd, lambda _view: 0)
        assert time.monotonic() - started < 5
    finally:
        a.close()
        b.close()
        os.close(fd)


def test_a_kernel_without_sendfile_to_sockets_gets_the_values_from_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tiermem.server.dataplane import sendfile as module

    monkeypatch.setattr(module, "_supported", True)
    calls: list[int] = []

    def refuse(out: int, in_: int, offset: int, count: int) -> int:
        calls.append(count)
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(os, "sendfile", refuse)
    data = os.urandom(2 * MiB)
    fd = _file(tmp_path, data)
    expected = b"H" + data + data
    view = memoryview(data)
    try:
        got = received_while(
            lambda conn: send_values(conn, b"H", [view, view], fd, lambda _view: 0), len(expected)
        )
    finally:
        os.close(fd)
    assert got == expected
    assert len(calls) == 1  # tried once; after that straight from memory
