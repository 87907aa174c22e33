"""A read of an object's SSD copy that fails because the copy went meanwhile
(a demotion to the remote tier or an eviction released it: the inline value
is deleted) reports no damage: the publish of the object and a promotion read
the copy of an entry found earlier, outside the lock, and reported any failed
read as damage, so a healthy object was listed by fsck and counted as a
checksum failure. Now, as ``Store.read`` does, damage is reported only while
the entry still has the copy that was read. Runs against an in-memory backend
(no peer needed)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from tests.unit.test_a_burst_beyond_the_publish_queue_is_published_late_not_lost import (
    GatedStore,
)
from tests.unit.test_a_failed_remote_publish_is_retried_then_given_up import FlakyStore
from tiermem.client import Client, Kind
from tiermem.server.app import Daemon
from tiermem.server.catalog.catalog import Entry
from tiermem.server.model import Kind as ServerKind
from tiermem.server.model import ObjectKey
from tiermem.server.model import Tier as ServerTier

BLOCK = 4096
KEY = ObjectKey("default", ServerKind.KV_BLOCK, "block").encode()


def remote_daemon(
    store: FlakyStore, make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> Daemon:
    monkeypatch.setattr("tiermem.server.app.make_backend", lambda _cfg: store)
    remote = {
        "enabled": True,
        "deployment": "unit",
        "retries": 0,
        "breaker_failures": 100,
        "op_timeout_s": 30,
    }
    return make_daemon(
        tiers={"remote": {**remote, "batch_max_objects": 1}},
        background={"migrate_interval_s": 3600},
    )


def released_while_read(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch, thread: str, release: Callable[[], bool]
) -> None:
    """The first SSD read by ``thread`` finds the copy released by ``release``
    (which must succeed) just before it reads."""
    real_read_ssd = daemon.store.read_ssd
    raced = threading.Event()

    def read_ssd(encoded: bytes, entry: Entry) -> memoryview:
        if threading.current_thread().name == thread and not raced.is_set():
            raced.set()  # (a demotion reads the copy too, first)
            assert release()
        return real_read_ssd(encoded, entry)

    monkeypatch.setattr(daemon.store, "read_ssd", read_ssd)


def test_a_publish_racing_an_eviction_reports_no_damage(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = GatedStore()
    a = remote_daemon(store, make_daemon, monkeypatch)
    released_while_read(
        a, monkeypatch, "tiermem-remote-writer", lambda: a.mover.evict(KEY, ServerTier.SSD) > 0
    )
    with Client(a.address) as c:
        c.put(Kind.KV_BLOCK, "other", b"o" * BLOCK)  # its upload holds the writer
        time.sleep(0.3)
        c.put(Kind.KV_BLOCK, "block", b"1" * BLOCK)  # its publish queued behind
        assert a.mover.move(KEY, ServerTier.SSD)  # served from SSD: an inline value
        store.gate.set()
        a.maintain()
    assert not a.store.damage.entries()


def test_a_promotion_racing_a_demotion_reports_no_damage(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FlakyStore(failing_puts=0)
    a = remote_daemon(store, make_daemon, monkeypatch)
    with Client(a.address) as c:
        c.put(Kind.KV_BLOCK, "block", b"1" * BLOCK)
        a.maintain()
        assert a.mover.move(KEY, ServerTier.SSD)
        released_while_read(
            a,
            monkeypatch,
            threading.current_thread().name,
            lambda: a.mover.move(KEY, ServerTier.REMOTE),
        )
        assert not a.mover.move(KEY, ServerTier.DRAM)  # its source copy went meanwhile
        assert a.store.catalog.find(KEY).tier == ServerTier.REMOTE  # type: ignore[union-attr]
        assert c.get(Kind.KV_BLOCK, "block") == b"1" * BLOCK
    assert not a.store.damage.entries()
