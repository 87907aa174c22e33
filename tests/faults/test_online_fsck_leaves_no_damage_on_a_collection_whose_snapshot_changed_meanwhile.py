"""Online fsck verifies a vector collection's snapshot without any lock, then
re-reads the collection's record and registers damage only if the record
still names the snapshot it found damaged. A snapshot rewrite (or a drop)
landing between that re-read and the registration used to leave the damage
registered for a collection whose current snapshot is healthy (or that is
gone): listed by fsck and counted in ``tiermem_damaged_objects`` until the
next rewrite. The re-read and the registration are now one step under the
damage register's lock, and a rewrite or drop clears the collection's damage
only after switching (or removing) its record, so either the re-read sees
the new record or the rewrite's clearing comes after the registration.

The interleaving is forced, not hoped for: fsck's re-read of the record is
hooked to start the rewrite (or drop) in another thread and to wait until it
has switched the record, and also until it has cleared the collection's
damage unless fsck holds the damage register's lock there (then the clearing
must wait for fsck's registration: waiting for it would deadlock). Before the
fix the re-read ran outside that lock, so the rewrite's clearing always came
first and the registration after it stayed."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

from tests.faults.flips import damaged_gauge, flip_current_snapshot
from tests.faults.locks import OwnedLock
from tests.vectors.conftest import VECTOR_CONFIG, clustered
from tiermem.client import Client
from tiermem.server.app import Daemon
from tiermem.server.services import integrity
from tiermem.server.vectors.oplog import VectorStore
from tiermem.server.vectors.types import damage_name

N, D = 300, 8
NAME = damage_name("default", "c")
WAIT_S = 30.0


@contextmanager
def racing(
    daemon: Daemon,
    monkeypatch: pytest.MonkeyPatch,
    switch: str,
    change: Callable[[], object],
) -> Iterator[list[threading.Thread]]:
    """While inside, fsck's first re-read of a collection record runs ``change``
    in a thread and returns once that thread has returned from
    ``daemon.vectors.log.<switch>`` (the record switched or removed) and, unless
    fsck holds the damage register's lock, has cleared the collection's damage."""
    damage = daemon.store.damage
    lock = OwnedLock()
    monkeypatch.setattr(damage, "_lock", lock)
    switched, cleared = threading.Event(), threading.Event()
    log = daemon.vectors.log
    real_switch = getattr(log, switch)
    real_discard = damage.discard_named

    def switch_then_signal(*args: Any, **kw: Any) -> Any:
        try:
            return real_switch(*args, **kw)
        finally:
            switched.set()

    def discard_then_signal(name: str) -> None:
        try:
            real_discard(name)
        finally:
            if name == NAME:
                cleared.set()

    monkeypatch.setattr(log, switch, switch_then_signal)
    monkeypatch.setattr(damage, "discard_named", discard_then_signal)
    threads: list[threading.Thread] = []
    real_record = VectorStore.record

    class Hooked(VectorStore):
        def record(self, namespace: str, name: str) -> Any:
            rec = real_record(self, namespace, name)
            if not threads:  # the first re-read, after the snapshot failed its check
                t = threading.Thread(target=change, name="racing-change", daemon=True)
                threads.append(t)
                t.start()
                assert switched.wait(WAIT_S), "the change never switched the record"
                if not lock.held_here():
                    assert cleared.wait(WAIT_S), "the change never cleared the damage"
            return rec

    monkeypatch.setattr(integrity, "VectorStore", Hooked)
    try:
        yield threads
    finally:
        monkeypatch.setattr(integrity, "VectorStore", VectorStore)
        for t in threads:
            t.join(WAIT_S)
            assert not t.is_alive(), "the racing change did not finish"
        assert cleared.is_set()


def test_a_snapshot_rewritten_between_fsck_check_and_registration_is_not_left_damaged(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon = make_daemon(**VECTOR_CONFIG)
    x = clustered(N, D, seed=1)
    q = clustered(5, D, seed=2)
    with Client(daemon.address) as c:
        c.vectors.create("c", D, index="flat")
        c.vectors.upsert("c", np.arange(N), x)
        assert daemon.vectors.snapshot("default", "c")
        old = daemon.vectors.log.record("default", "c")
        assert old is not None
        flip_current_snapshot(daemon)  # the collection is loaded: memory is good
        c.vectors.upsert("c", np.arange(N, N + 10), clustered(10, D, seed=3))

        def rewrite() -> None:
            assert daemon.vectors.snapshot("default", "c")  # from memory: healthy

        with racing(daemon, monkeypatch, "put_record", rewrite) as threads:
            c.integrity.check()
        assert len(threads) == 1  # the race was run, not skipped
        new = daemon.vectors.log.record("default", "c")
        assert new is not None and new.snapshot_dir != old.snapshot_dir

        # the current snapshot is healthy: nothing is registered or counted
        assert not daemon.store.damage.has_named(NAME)
        assert [d.key for d in daemon.integrity.known_damage()] == []
        assert damaged_gauge(daemon) == 0
        assert c.integrity.check().clean
        assert c.vectors.unload("c")
        assert len(c.vectors.search("c", q, 5).ids) == 5  # loads the new snapshot

        # a genuinely damaged current snapshot is still found and registered
        flip_current_snapshot(daemon)
        result = c.integrity.check()
        assert [(d.key, d.where) for d in result.damaged] == [("c", "vectors")]
        assert daemon.store.damage.has_named(NAME)
        assert damaged_gauge(daemon) == 1


def test_a_collection_dropped_between_fsck_check_and_registration_is_not_left_damaged(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon = make_daemon(**VECTOR_CONFIG)
    with Client(daemon.address) as c:
        c.vectors.create("c", D, index="flat")
        c.vectors.upsert("c", np.arange(N), clustered(N, D, seed=1))
        assert daemon.vectors.snapshot("default", "c")
        flip_current_snapshot(daemon)

        def drop() -> None:
            assert daemon.vectors.drop("default", "c")

        with racing(daemon, monkeypatch, "drop", drop) as threads:
            c.integrity.check()
        assert len(threads) == 1
        assert daemon.vectors.log.record("default", "c") is None

        assert not daemon.store.damage.has_named(NAME)
        assert damaged_gauge(daemon) == 0
        assert c.integrity.check().clean
