"""Remote deletes queued while ``MAX_PENDING_DELETES`` are already waiting are
only journaled: they used to run at the next start, not as the queue drained,
and until then reads did not know them (``_held_back``), so a read of such a
key fetched the deleted value from the remote store and adopted it again. The
writer now picks them up from the journal as the queue drains, and reads treat
a key whose shared name is journaled but not queued as a miss meanwhile. Runs
against an in-memory backend with a small limit (no peer needed)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.polling import poll_until
from tests.unit.test_a_queued_remote_delete_never_removes_the_version_a_demotion_uploaded import (
    GatedStore,
    daemon_on,
)
from tiermem.client import Client, Kind
from tiermem.server.app import Daemon
from tiermem.server.model import Kind as ServerKind
from tiermem.server.model import ObjectKey

BLOCK = 4096
LIMIT = 4
COUNT = 12


def key(i: int) -> bytes:
    return ObjectKey("default", ServerKind.KV_BLOCK, f"b{i}").encode()


def stored(store: GatedStore) -> set[str]:
    return {n.rsplit("/", 1)[-1] for n in store.values}


def held_while_stuck(a: Daemon, c: Client) -> None:
    service = a.remote
    assert service is not None
    for i in range(1, COUNT):
        c.delete(Kind.KV_BLOCK, f"b{i}")  # most beyond the limit: journaled only
    assert service._deletes <= LIMIT
    assert len(service.journal.entries(100)) == COUNT
    for i in range(COUNT):
        assert service._held_back(key(i)), f"b{i} is not held back"
        assert service.deleting(key(i))
    # a read does not adopt a deleted value back from the store
    got = service.pull([key(i) for i in range(COUNT)])
    assert all(v is None for v in got.values())
    assert all(a.store.catalog.find(key(i)) is None for i in range(COUNT))


def test_overflowed_deletes_are_misses_and_run_without_a_restart(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tiermem.server.services.remote.MAX_PENDING_DELETES", LIMIT)
    store = GatedStore()
    a = daemon_on(store, make_daemon, monkeypatch)
    service = a.remote
    assert service is not None
    with Client(a.address) as c:
        for i in range(COUNT):
            c.put(Kind.KV_BLOCK, f"b{i}", bytes([i]) * BLOCK)
        assert service.flush(10)
        assert stored(store) == {f"b{i}" for i in range(COUNT)}
        store.hold(deletes=("/b0",))
        c.delete(Kind.KV_BLOCK, "b0")
        assert store.waiting.wait(10)  # the writer is stuck deleting b0
        try:
            held_while_stuck(a, c)
        finally:
            store.gate.set()
        # carried out as the queue drains, not at the next start
        assert poll_until(lambda: not stored(store), 10), sorted(stored(store))
        assert poll_until(lambda: not service.journal.entries(100), 10)
        assert poll_until(lambda: not any(service._held_back(key(i)) for i in range(COUNT)), 10)
        assert not service._journal_only
