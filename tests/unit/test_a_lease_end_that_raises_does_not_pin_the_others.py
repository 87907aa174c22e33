"""Each lease's ``end`` runs in isolation: one that raises is logged, the lease
is still removed (and remembered as ended), and the other leases of the same
release, expiry or shutdown pass are still ended (a refused commit's: see
``test_a_refused_commit_aborts_every_reservation``). Before, the first ``end``
that raised stopped the pass: the leases after it were already out of the
table, so nothing would ever end them and their regions stayed pinned."""

from __future__ import annotations

import logging

import pytest

from tiermem.server.errors import FailedPrecondition
from tiermem.server.services.leases import Lease, LeaseKind, LeaseTable


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def grant(table: LeaseTable, ended: list[str], *names: str, ttl_s: float = 10.0) -> list[Lease]:
    def end(name: str) -> None:
        if name.startswith("bad"):
            raise OSError(f"{name}: the tier could not free the region")
        ended.append(name)

    regions = [(i * 4096, 4096, (lambda n=n: end(n)), n) for i, n in enumerate(names)]
    return table.grant_many("alice", LeaseKind.READ, ttl_s, regions)


def test_a_release_ends_the_leases_after_one_whose_end_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    table = LeaseTable(16, Clock())
    ended: list[str] = []
    leases = grant(table, ended, "a", "bad", "c")
    with caplog.at_level(logging.ERROR):
        assert table.release_many([x.lease_id for x in leases], "alice") == 3
    assert ended == ["a", "c"]
    assert len(table) == 0
    assert "the tier could not free the region" in caplog.text
    with pytest.raises(FailedPrecondition, match="already released"):
        table.release_many([leases[1].lease_id], "alice")


def test_an_expiry_pass_ends_every_expired_lease() -> None:
    clock = Clock()
    table = LeaseTable(16, clock)
    ended: list[str] = []
    grant(table, ended, "bad-1", "b", "bad-2", "d", ttl_s=1.0)
    clock.now += 2.0
    assert table.reap_expired() == 4
    assert ended == ["b", "d"]
    assert len(table) == 0
    assert table.expired_total == 4


def test_shutdown_ends_every_lease() -> None:
    table = LeaseTable(16, Clock())
    ended: list[str] = []
    grant(table, ended, "bad", "b")
    table.end_all()
    assert ended == ["b"]
    assert len(table) == 0


def test_an_expired_lease_found_by_a_call_keeps_the_calls_answer() -> None:
    clock = Clock()
    table = LeaseTable(16, clock)
    (lease,) = grant(table, [], "bad", ttl_s=1.0)
    clock.now += 2.0
    with pytest.raises(FailedPrecondition, match="expired"):
        table.release_many([lease.lease_id], "alice")
    assert len(table) == 0
