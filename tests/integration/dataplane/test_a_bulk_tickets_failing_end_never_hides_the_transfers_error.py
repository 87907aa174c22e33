"""When a bulk transfer fails and ending its ticket (giving back what it holds)
then fails too, the client is told the transfer's error, and the failed end
is logged.

Before, each error path called ``ticket.end()`` bare: an end that raised
replaced the original error. A put refused for a checksum mismatch then
reached the client as a dropped connection (the end's exception was not a
domain error, so the connection thread died on it), a stream that broke was
reported as the end's error, and a refused stream ticket as whatever its
service's end callback raised.
"""

from __future__ import annotations

import logging
import socket
from typing import Any

import pytest

from tests.integration.dataplane.helpers import dataplane_stub, header, read_status
from tiermem.client import Client, Kind
from tiermem.dataplane_wire import preamble
from tiermem.server.app import Daemon
from tiermem.server.dataplane.transfers import TransferBroken
from tiermem.server.errors import CapacityExceeded
from tiermem.server.model import Kind as ServerKind
from tiermem.server.model import ObjectKey
from tiermem.v1 import common_pb2, dataplane_pb2

WRONG = common_pb2.Checksum(algorithm=common_pb2.XXH3_64, value=12345)  # type: ignore[arg-type]


class _EndFailed(Exception):
    pass


def _fail_once(daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make the object service's next ``abort`` (a put ticket's end) raise."""
    real = daemon.objects.abort
    calls = [0]

    def abort(reservation: Any) -> None:
        calls[0] += 1
        if calls[0] == 1:
            raise _EndFailed("injected: giving back a reservation failed")
        real(reservation)

    monkeypatch.setattr(daemon.objects, "abort", abort)
    return calls


def test_a_put_refused_for_its_checksum_says_so_when_its_end_fails(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    calls = _fail_once(daemon, monkeypatch)
    with dataplane_stub(daemon) as stub:
        ticket = stub.BeginPut(
            dataplane_pb2.BeginPutRequest(objects=[header("a", 100_000, checksum=WRONG)])
        )
    host, _, port = ticket.address.rpartition(":")
    with caplog.at_level(logging.ERROR), socket.create_connection((host, int(port)), 10) as sock:
        sock.sendall(preamble(ticket.ticket_id, b""))
        assert read_status(sock).code == "OK"
        sock.sendall(b"\x01" * 100_000)
        final = read_status(sock)
    assert final.code == "DATA_LOSS", final
    assert "checksum mismatch" in final.message
    assert calls[0] == 1
    assert any(
        "ending put bulk ticket failed" in r.getMessage() and r.exc_info for r in caplog.records
    )


def _stream_ticket(daemon: Daemon, run: Any, end: Any) -> Any:
    dp = daemon.dataplane
    assert dp is not None
    return dp.transfers.issue_stream("", "stream_out", 10, run, end)


def _end_fails() -> None:
    raise _EndFailed("injected: the stream's end failed")


def test_a_broken_stream_is_reported_as_broken_when_its_end_fails(
    daemon: Daemon, caplog: pytest.LogCaptureFixture
) -> None:
    def run(channel: Any) -> None:
        raise TransferBroken("the client went away half-way")

    ticket = _stream_ticket(daemon, run, _end_fails)
    dp = daemon.dataplane
    assert dp is not None
    claimed = dp.transfers.claim(ticket.ticket_id, "")
    with caplog.at_level(logging.ERROR), pytest.raises(TransferBroken, match="half-way"):
        dp.transfers.run_stream(claimed, socket.socket())
    assert any("stream_out bulk ticket failed" in r.getMessage() for r in caplog.records)


def test_a_refused_stream_ticket_says_why_when_its_end_fails(
    make_daemon: Any, caplog: pytest.LogCaptureFixture
) -> None:
    daemon = make_daemon(dataplane={"bulk": {"max_tickets": 1}})
    _stream_ticket(daemon, lambda channel: None, lambda: None)  # the table is full now
    with caplog.at_level(logging.ERROR), pytest.raises(CapacityExceeded, match="outstanding"):
        _stream_ticket(daemon, lambda channel: None, _end_fails)
    assert any("stream_out bulk ticket failed" in r.getMessage() for r in caplog.records)


class _ReleaseFails:
    """A read whose release lets the object go and then raises."""

    def __init__(self, reader: Any) -> None:
        self._reader = reader
        self.view = reader.view
        self.calls = 0

    def release(self) -> None:
        self.calls += 1
        if self.calls == 1:
            self._reader.release()
        raise _EndFailed("injected: ending a read failed")


def test_a_get_whose_release_fails_ends_once_and_gives_its_bytes_back(
    daemon: Daemon, caplog: pytest.LogCaptureFixture
) -> None:
    """The sequence of a bulk session's get whose client is gone: ``send`` fails,
    ends the ticket on its error path, and the session ends it again (``end``
    is idempotent). The second end used to retry the failed release and raise
    in place of the send's error; the bytes held stayed taken."""
    with Client(daemon.address, timeout_s=30) as c:
        c.put(Kind.KV_BLOCK, "big", b"\x03" * 200_000)
    dp = daemon.dataplane
    assert dp is not None
    ticket = dp.transfers.begin_get(
        "", [ObjectKey("default", ServerKind.KV_BLOCK, "big")], 1, issue=False
    )
    assert dp.budget.used_bytes == 200_000
    wrapped = _ReleaseFails(ticket.gets[0].reader)
    ticket.gets[0].reader = wrapped
    gone = socket.socket()  # never connected: every send fails
    with caplog.at_level(logging.ERROR), pytest.raises(OSError):
        dp.transfers.send(ticket, gone)
    ticket.end()  # as the bulk session's ``finally`` does
    assert wrapped.calls == 1
    assert dp.budget.used_bytes == 0
    assert daemon.store.leases.active == 0
    assert any("ending get bulk ticket failed" in r.getMessage() for r in caplog.records)
