"""A bulk ticket's ``end`` (giving back the reservations or read leases it
holds) runs in isolation, as a shared-memory lease's does: one that raises is
logged, the ticket is still gone, and the other tickets of the same expiry or
shutdown pass are still ended; a refused claim keeps its own answer. Before,
the first ``end`` that raised stopped the pass, and the tickets after it,
already out of the table, held what they held for good."""

from __future__ import annotations

import logging

import pytest

from tiermem.server.dataplane.transfers import Ticket, TicketTable
from tiermem.server.errors import FailedPrecondition, PermissionDenied


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def issue(table: TicketTable, clock: Clock, ended: list[str], *names: str) -> None:
    for name in names:
        t = Ticket(name.encode().ljust(16, b"-"), "token:a", "put", clock.now + 5.0, 5.0)

        def end(name: str = name) -> None:
            if name.startswith("bad"):
                raise OSError(f"{name}: its reservation could not be given back")
            ended.append(name)

        t.end = end
        table.issue(t)


def test_an_expiry_pass_ends_every_expired_ticket(caplog: pytest.LogCaptureFixture) -> None:
    clock, ended = Clock(), []
    table = TicketTable(8, clock)
    issue(table, clock, ended, "bad-1", "b", "bad-2", "d")
    clock.now += 10.0
    with caplog.at_level(logging.ERROR):
        assert table.reap_expired() == 4
    assert ended == ["b", "d"]
    assert len(table) == 0
    assert "could not be given back" in caplog.text


def test_shutdown_ends_every_ticket() -> None:
    clock, ended = Clock(), []
    table = TicketTable(8, clock)
    issue(table, clock, ended, "bad", "b")
    table.end_all()
    assert ended == ["b"]
    assert len(table) == 0


def test_a_refused_claim_keeps_its_answer() -> None:
    clock, ended = Clock(), []
    table = TicketTable(8, clock)
    issue(table, clock, ended, "bad-owner", "bad-late")
    with pytest.raises(PermissionDenied, match="other credentials"):
        table.claim(b"bad-owner".ljust(16, b"-"), "host:10.0.0.9")
    clock.now += 10.0
    with pytest.raises(FailedPrecondition, match="expired"):
        table.claim(b"bad-late".ljust(16, b"-"), "token:a")
    assert len(table) == 0
