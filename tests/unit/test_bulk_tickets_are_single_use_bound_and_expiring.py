"""Bulk tickets: claimed once, by their owner, before they expire; every other
presentation is refused and gives back what the ticket held."""

from __future__ import annotations

import pytest

from tiermem.server.dataplane.transfers import Ticket, TicketTable
from tiermem.server.errors import CapacityExceeded, FailedPrecondition, NotFound, PermissionDenied


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def ticket(clock: Clock, ended: list[bytes], tid: bytes, owner: str = "token:a") -> Ticket:
    t = Ticket(tid, owner, "put", clock.now + 5.0, 5.0)
    t.end = lambda: ended.append(tid)
    return t


def test_a_ticket_is_claimed_once() -> None:
    clock, ended = Clock(), []
    table = TicketTable(8, clock)
    table.issue(ticket(clock, ended, b"1" * 16))
    assert table.claim(b"1" * 16, "token:a").ticket_id == b"1" * 16
    with pytest.raises(FailedPrecondition, match="already used"):
        table.claim(b"1" * 16, "token:a")
    with pytest.raises(NotFound):
        table.claim(b"2" * 16, "token:a")


def test_other_credentials_are_refused_and_void_the_ticket() -> None:
    clock, ended = Clock(), []
    table = TicketTable(8, clock)
    table.issue(ticket(clock, ended, b"1" * 16))
    with pytest.raises(PermissionDenied, match="other credentials"):
        table.claim(b"1" * 16, "host:10.0.0.9")
    assert ended == [b"1" * 16]
    with pytest.raises(FailedPrecondition, match="other credentials"):
        table.claim(b"1" * 16, "token:a")


def test_an_expired_ticket_is_refused_or_reaped() -> None:
    clock, ended = Clock(), []
    table = TicketTable(8, clock)
    table.issue(ticket(clock, ended, b"1" * 16))
    table.issue(ticket(clock, ended, b"2" * 16))
    clock.now += 5.0
    with pytest.raises(FailedPrecondition, match="expired"):
        table.claim(b"1" * 16, "token:a")
    assert table.reap_expired() == 1
    assert sorted(ended) == [b"1" * 16, b"2" * 16] and len(table) == 0


def test_outstanding_tickets_are_bounded() -> None:
    clock, ended = Clock(), []
    table = TicketTable(1, clock)
    table.issue(ticket(clock, ended, b"1" * 16))
    with pytest.raises(CapacityExceeded, match="max_tickets"):
        table.issue(ticket(clock, ended, b"2" * 16))
