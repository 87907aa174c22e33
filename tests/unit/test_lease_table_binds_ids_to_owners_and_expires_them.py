"""The client lease table: ids are bound to owners, end exactly once, expire,
and every misuse gets its own status (checked before anything changes)."""

from __future__ import annotations

import pytest

from tiermem.server.errors import (
    CapacityExceeded,
    FailedPrecondition,
    NotFound,
    PermissionDenied,
)
from tiermem.server.services.leases import Lease, LeaseKind, LeaseTable


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def ended() -> list[str]:
    return []


def regions(ended: list[str], *names: str) -> list[tuple[int, int, object, object]]:
    return [(i * 4096, 4096, (lambda n=n: ended.append(n)), n) for i, n in enumerate(names)]


def grant(
    table: LeaseTable, ended: list[str], owner: str, kind: LeaseKind, *names: str
) -> list[Lease]:
    return table.grant_many(owner, kind, 10.0, regions(ended, *names))  # type: ignore[arg-type]


def test_release_ends_each_lease_once_and_remembers_it(ended: list[str]) -> None:
    table = LeaseTable(16, Clock())
    a, b = grant(table, ended, "alice", LeaseKind.READ, "a", "b")
    assert table.release_many([a.lease_id, b.lease_id], "alice") == 2
    assert ended == ["a", "b"]
    with pytest.raises(FailedPrecondition, match="already released"):
        table.release_many([a.lease_id], "alice")
    assert ended == ["a", "b"]


def test_unknown_id_is_not_found(ended: list[str]) -> None:
    table = LeaseTable(16, Clock())
    with pytest.raises(NotFound, match="unknown"):
        table.take_many([12345], "alice", LeaseKind.WRITE)


def test_another_owner_cannot_touch_a_lease_and_nothing_ends(ended: list[str]) -> None:
    table = LeaseTable(16, Clock())
    a, _b = grant(table, ended, "alice", LeaseKind.READ, "a", "b")
    mine = grant(table, ended, "mallory", LeaseKind.READ, "m")[0]
    with pytest.raises(PermissionDenied, match="another client"):
        table.release_many([mine.lease_id, a.lease_id], "mallory")
    assert ended == [] and len(table) == 3  # the batch was rejected as a whole


def test_a_read_lease_cannot_be_committed(ended: list[str]) -> None:
    table = LeaseTable(16, Clock())
    (a,) = grant(table, ended, "alice", LeaseKind.READ, "a")
    with pytest.raises(FailedPrecondition, match="read lease"):
        table.take_many([a.lease_id], "alice", LeaseKind.WRITE)
    assert len(table) == 1


def test_committed_lease_reports_double_commit(ended: list[str]) -> None:
    table = LeaseTable(16, Clock())
    (w,) = grant(table, ended, "alice", LeaseKind.WRITE, "w")
    taken = table.take_many([w.lease_id], "alice", LeaseKind.WRITE)
    table.finish(taken, "committed")
    with pytest.raises(FailedPrecondition, match="already committed"):
        table.take_many([w.lease_id], "alice", LeaseKind.WRITE)
    assert ended == []  # a commit consumes the region; it is not given back


def test_expired_leases_are_reaped_and_reported_as_expired(ended: list[str]) -> None:
    clock = Clock()
    table = LeaseTable(16, clock)
    a, _b = grant(table, ended, "alice", LeaseKind.WRITE, "a", "b")
    clock.now += 9.0
    assert table.reap_expired() == 0
    clock.now += 1.0
    assert table.reap_expired() == 2
    assert sorted(ended) == ["a", "b"] and len(table) == 0
    with pytest.raises(FailedPrecondition, match="expired"):
        table.take_many([a.lease_id], "alice", LeaseKind.WRITE)
    assert table.expired_total == 2


def test_an_expired_lease_found_before_the_reaper_is_ended_then(ended: list[str]) -> None:
    clock = Clock()
    table = LeaseTable(16, clock)
    (a,) = grant(table, ended, "alice", LeaseKind.WRITE, "a")
    clock.now += 11.0
    with pytest.raises(FailedPrecondition, match="expired"):
        table.take_many([a.lease_id], "alice", LeaseKind.WRITE)
    assert ended == ["a"]


def test_the_table_is_bounded(ended: list[str]) -> None:
    table = LeaseTable(2, Clock())
    grant(table, ended, "alice", LeaseKind.READ, "a")
    with pytest.raises(CapacityExceeded, match="max_leases"):
        grant(table, ended, "alice", LeaseKind.READ, "b", "c")
    assert len(table) == 1


def test_a_lease_named_twice_in_one_batch_is_refused(ended: list[str]) -> None:
    table = LeaseTable(4, Clock())
    (a,) = grant(table, ended, "alice", LeaseKind.READ, "a")
    with pytest.raises(FailedPrecondition, match="twice"):
        table.release_many([a.lease_id, a.lease_id], "alice")
    assert len(table) == 1 and ended == []
