"""Reads of objects held in memory find and lease them without the store lock,
then check that nobody took the lock meanwhile (``StoreLock``); a read that
meets a change reads again under the lock and serves the object as it is
then, leaving no lease behind. Reads made that way are counted when the lock
is next taken."""

import os
import threading
from typing import Any

import pytest

from tiermem.client import Client, Kind
from tiermem.server.app import Daemon
from tiermem.server.errors import NotFound
from tiermem.server.model import Kind as ServerKind
from tiermem.server.model import ObjectKey
from tiermem.server.services.store import Store

QUIET = {"background": {"migrate_interval_s": 60, "compaction_interval_s": 60}}


def _key(name: str) -> ObjectKey:
    return ObjectKey("default", ServerKind.SCRATCH, name)


def _read(daemon: Daemon, name: str) -> bytes:
    (reader,) = daemon.objects.read_many([_key(name)])
    try:
        return bytes(reader.view)
    finally:
        reader.release()


def test_a_read_takes_no_lock_and_is_counted_when_the_lock_is_next_taken(make_daemon) -> None:  # type: ignore[no-untyped-def]
    daemon: Daemon = make_daemon(**QUIET)
    value = os.urandom(4096)
    with Client(daemon.address) as client:
        client.put(Kind.SCRATCH, "a", value)
    lock, catalog = daemon.store.lock, daemon.store.catalog
    with lock:  # whatever was pending is counted now
        row = catalog.index.find(_key("a").encode())
        atime = float(catalog.index.cols["atime"][row])
    before = lock.version

    assert _read(daemon, "a") == value

    assert lock.version == before  # nobody took the lock, the read did not either
    assert list(catalog.pending_touches) == [(row, _key("a").encode())]
    assert float(catalog.index.cols["atime"][row]) == atime
    with lock:
        assert not catalog.pending_touches
        assert float(catalog.index.cols["atime"][row]) > atime
    assert not daemon.store.leases.leased_locations(catalog.find(_key("a").encode()).tier)


def test_a_read_waits_for_a_lock_held_elsewhere(make_daemon) -> None:  # type: ignore[no-untyped-def]
    daemon: Daemon = make_daemon(**QUIET)
    value = os.urandom(4096)
    with Client(daemon.address) as client:
        client.put(Kind.SCRATCH, "a", value)
    got: list[bytes] = []
    with daemon.store.lock:
        reader = threading.Thread(target=lambda: got.append(_read(daemon, "a")))
        reader.start()
        reader.join(0.3)
        assert reader.is_alive()  # the lock is held: it reads under it, once free
    reader.join(10)
    assert got == [value]


@pytest.mark.parametrize("change", ["replace", "delete"])
def test_a_read_that_meets_a_change_reads_again_under_the_lock(make_daemon, change: str) -> None:  # type: ignore[no-untyped-def]
    daemon: Daemon = make_daemon(**QUIET)
    old, new = os.urandom(8192), os.urandom(8192)
    store: Store = daemon.store
    with Client(daemon.address) as client:
        client.put(Kind.SCRATCH, "a", old)
        lease_memory = Store.try_lease_memory
        changed: list[bool] = []

        def lease_after_a_writer(self: Store, entry: Any) -> Any:
            if not changed:  # a writer takes the lock between the lookup and the lease
                changed.append(True)
                if change == "replace":
                    client.put(Kind.SCRATCH, "a", new)
                else:
                    client.delete(Kind.SCRATCH, "a")
            return lease_memory(self, entry)

        store.try_lease_memory = lease_after_a_writer.__get__(store)  # type: ignore[method-assign]
        try:
            if change == "replace":
                assert _read(daemon, "a") == new  # the object as it is now, not the old copy
            else:
                with pytest.raises(NotFound):
                    _read(daemon, "a")
        finally:
            del store.try_lease_memory
    assert changed == [True]
    tier = daemon.store.catalog.find(_key("a").encode())
    if tier is not None:
        assert not store.leases.leased_locations(tier.tier)  # the stale lease was given back


def test_a_read_counted_after_its_object_left_its_row_counts_for_no_other(make_daemon) -> None:  # type: ignore[no-untyped-def]
    daemon: Daemon = make_daemon(**QUIET)
    catalog = daemon.store.catalog
    with Client(daemon.address) as client:
        client.put(Kind.SCRATCH, "a", b"x" * 100)
        assert _read(daemon, "a") == b"x" * 100
        client.delete(Kind.SCRATCH, "a")
        client.put(Kind.SCRATCH, "b", b"y" * 100)
    with daemon.store.lock:
        row_b = catalog.index.find(_key("b").encode())
        atime_b = float(catalog.index.cols["atime"][row_b])
        # a read of "a" at the row "b" holds now (a row is reused once freed)
        catalog.pending_touches.append((row_b, _key("a").encode()))
        catalog.apply_touches()
        assert not catalog.pending_touches
        assert float(catalog.index.cols["atime"][row_b]) == atime_b


def test_reads_queued_without_the_lock_count_as_many_as_the_same_reads_under_it(
    make_daemon,
) -> None:  # type: ignore[no-untyped-def]
    daemon: Daemon = make_daemon(**QUIET)
    catalog = daemon.store.catalog
    with Client(daemon.address) as client:
        for name in ("a", "b", "c"):
            client.put(Kind.SCRATCH, name, b"v" * 100)
    keys = {name: _key(name).encode() for name in ("a", "b", "c")}
    with daemon.store.lock:
        rows = {name: catalog.index.find(key) for name, key in keys.items()}
        cols = catalog.index.cols
        for row in rows.values():  # the same history for all three
            cols["rate"][row], cols["atime"][row] = 0.5, cols["atime"][rows["a"]]
            cols["flags"][row] = cols["flags"][rows["a"]]
        for _ in range(3):  # "a": three reads counted under the lock, one by one
            catalog.touch(rows["a"], keys["a"])
        # "b": the same three reads queued by unlocked readers, between reads of "c"
        catalog.touch_later(
            [rows["b"], rows["c"], rows["b"], rows["b"]],
            [keys["b"], keys["c"], keys["b"], keys["b"]],
        )
        catalog.apply_touches()
        rate = {name: float(cols["rate"][row]) for name, row in rows.items()}
    assert rate["b"] == pytest.approx(rate["a"], rel=1e-3)
    assert rate["b"] > rate["c"] > 0.5 * 0.99  # three reads count more than one


def test_a_read_that_meets_a_short_hold_waits_for_it_to_end_without_queueing(
    make_daemon, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """A read that finds the lock held waits (up to ``UNLOCKED_READ_WAIT_S``)
    for it to be free and reads again without it, instead of queueing for the
    lock behind the writers waiting for it; a hold longer than that wait still
    ends in a read under the lock (``test_a_read_waits_for_a_lock_held_elsewhere``)."""
    from tiermem.server.services import objects

    monkeypatch.setattr(objects, "UNLOCKED_READ_WAIT_S", 10.0)
    daemon: Daemon = make_daemon(**QUIET)
    value = os.urandom(4096)
    with Client(daemon.address) as client:
        client.put(Kind.SCRATCH, "a", value)
    lock = daemon.store.lock
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(_read(daemon, "a")))
    with lock:
        held = lock.version
        reader.start()
        reader.join(0.2)
        assert reader.is_alive()  # waiting for the hold to end
    reader.join(10)
    assert got == [value]
    assert lock.version == held + 1  # only the holder's release: the read took no lock
    assert not daemon.store.leases.leased_locations(
        daemon.store.catalog.find(_key("a").encode()).tier
    )
