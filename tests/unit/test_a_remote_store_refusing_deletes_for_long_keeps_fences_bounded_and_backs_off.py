"""A remote store that refuses deletes for long (down, or failing them) used to
make the fences of failed deletes (``_fenced``, ``_parked``) grow by one entry
per distinct name, and the writer tried every parked name again every
``DELETE_RETRY_PAUSE_S``. Names beyond ``MAX_FENCED_NAMES`` now stay in the
journal only (reads consult it, so they are still misses), retries back off
exponentially up to ``DELETE_RETRY_MAX_PAUSE_S``, and once the store takes
deletes again every delete is done and every fence lifted. Runs against an
in-memory backend (no peer needed)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import pytest

from tests.polling import poll_until
from tests.unit.test_a_failed_remote_publish_is_retried_then_given_up import FlakyStore, daemon_on
from tiermem.client import Client, Kind
from tiermem.server.app import Daemon
from tiermem.server.model import Kind as ServerKind
from tiermem.server.model import ObjectKey
from tiermem.server.tiers.remote import RemoteError

BLOCK = 4096
COUNT = 20
FENCES = 4
PAUSE_S = 0.05
MAX_PAUSE_S = 0.4


class RefusingStore(FlakyStore):
    """Refuses every delete while ``down``; records when each delete was asked."""

    def __init__(self) -> None:
        super().__init__(failing_puts=0)
        self.down = False
        self.delete_calls: list[float] = []

    def delete_many(self, names: Sequence[str]) -> None:
        self.delete_calls.append(time.monotonic())
        if self.down:
            raise RemoteError("scripted: the store refuses deletes")
        super().delete_many(names)

    def calls_between(self, start: float, end: float) -> int:
        return sum(1 for t in self.delete_calls if start <= t < end)


def key(i: int) -> bytes:
    return ObjectKey("default", ServerKind.KV_BLOCK, f"b{i}").encode()


def test_fences_stay_bounded_retries_back_off_and_deletes_finish_when_the_store_returns(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    remote = "tiermem.server.services.remote"
    monkeypatch.setattr(f"{remote}.MAX_FENCED_NAMES", FENCES, raising=False)
    monkeypatch.setattr(f"{remote}.DELETE_RETRY_PAUSE_S", PAUSE_S)
    monkeypatch.setattr(f"{remote}.DELETE_RETRY_MAX_PAUSE_S", MAX_PAUSE_S, raising=False)
    store = RefusingStore()
    a = daemon_on(store, make_daemon, monkeypatch, breaker_failures=1_000_000)
    service = a.remote
    assert service is not None
    with Client(a.address) as c:
        for i in range(COUNT):
            c.put(Kind.KV_BLOCK, f"b{i}", bytes([i]) * BLOCK)
        assert service.flush(10)
        assert len(store.values) == COUNT
        store.down = True
        for i in range(COUNT):
            c.delete(Kind.KV_BLOCK, f"b{i}")
        time.sleep(1.5)  # every delete failed, most more than once
        # bounded: beyond the limit, failed names stay in the journal only
        assert len(service._fenced) <= FENCES
        assert len(service._parked) <= FENCES
        assert len(service.journal.entries(100)) == COUNT
        assert len(store.values) == COUNT
        # ... and are misses all the same (nothing adopted back)
        for i in range(COUNT):
            assert service._held_back(key(i)), f"b{i} is not held back"
        got = service.pull([key(i) for i in range(COUNT)])
        assert all(v is None for v in got.values())
        assert all(a.store.catalog.find(key(i)) is None for i in range(COUNT))
        # backed off: a retry at most every MAX_PAUSE_S by now, not every PAUSE_S
        start = time.monotonic()
        time.sleep(1.0)
        calls = store.calls_between(start, start + 1.0)
        assert calls <= 3 * (1.0 / MAX_PAUSE_S + 1), f"{calls} delete calls in 1 s"
        # the store takes deletes again: everything resumes
        store.down = False
        assert poll_until(lambda: not store.values, 3 * MAX_PAUSE_S + 2), sorted(store.values)
        assert poll_until(lambda: not service.journal.entries(100), 5)
        assert poll_until(lambda: not service._fenced and not service._parked, 5)
        assert poll_until(lambda: not any(service._held_back(key(i)) for i in range(COUNT)), 5)
        assert not service._journal_only
