"""An overwrite whose new version is not published (too large for the remote
store, the deferred publishes full, the upload given up) deletes the old
version's remote copy, after any publish still on its way: it used to stay in
the store, where another daemon of the deployment adopted the old bytes (and
this daemon too, once the new version was evicted locally). Runs two daemons
on one in-memory backend (no peer needed)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.unit.test_a_burst_beyond_the_publish_queue_is_published_late_not_lost import (
    GatedStore,
)
from tests.unit.test_a_failed_remote_publish_is_retried_then_given_up import FlakyStore, sample
from tiermem.client import Client, Kind, NotFoundError
from tiermem.server.app import Daemon
from tiermem.server.model import Kind as ServerKind
from tiermem.server.model import ObjectKey
from tiermem.server.model import Tier as ServerTier
from tiermem.server.services.remote import PUBLISH_ATTEMPTS

BLOCK = 4096
KEY = ObjectKey("default", ServerKind.KV_BLOCK, "block").encode()


def two_daemons(
    store: FlakyStore,
    make_daemon: Callable[..., Daemon],
    monkeypatch: pytest.MonkeyPatch,
    **settings: Any,
) -> tuple[Daemon, Daemon]:
    """Two daemons of one deployment whose remote tier is ``store``."""
    monkeypatch.setattr("tiermem.server.app.make_backend", lambda _cfg: store)
    remote = {
        "enabled": True,
        "deployment": "unit",
        "retries": 0,
        "breaker_failures": 100,
        **settings,
    }
    return (
        make_daemon("a", tiers={"remote": remote}),
        make_daemon("b", tiers={"remote": remote}),
    )


def other_daemon_finds_nothing(b: Daemon) -> None:
    assert b.remote is not None
    assert b.remote.fetch([KEY]) == 0
    with Client(b.address) as cb, pytest.raises(NotFoundError):
        cb.get(Kind.KV_BLOCK, "block")


def test_an_overwrite_too_large_to_publish_deletes_the_old_copy(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FlakyStore(failing_puts=0)
    a, b = two_daemons(store, make_daemon, monkeypatch, max_value_bytes=2 * BLOCK)
    with Client(a.address) as ca:
        ca.put(Kind.KV_BLOCK, "block", b"1" * BLOCK)
        a.maintain()
        assert len(store.values) == 1
        ca.put(Kind.KV_BLOCK, "block", b"2" * (4 * BLOCK))  # larger than the store takes
        a.maintain()
        assert ca.get(Kind.KV_BLOCK, "block") == b"2" * (4 * BLOCK)
    assert sample(a, "tiermem_remote_published_objects_total", result="skipped") == 1
    assert not store.values
    other_daemon_finds_nothing(b)


def test_an_overwrite_beyond_the_deferred_bound_deletes_the_old_copy_after_the_queue(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tiermem.server.services.remote.MAX_DEFERRED_PUBLISHES", 0)
    store = GatedStore()
    store.gate.set()
    a, b = two_daemons(store, make_daemon, monkeypatch, op_timeout_s=30, publish_queue_bytes=BLOCK)
    with Client(a.address) as ca:
        ca.put(Kind.KV_BLOCK, "block", b"1" * BLOCK)
        a.maintain()
        assert len(store.values) == 1
        store.gate.clear()  # the writer gets stuck on the next upload
        ca.put(Kind.KV_BLOCK, "other", b"o" * BLOCK)
        ca.put(Kind.KV_BLOCK, "block", b"2" * BLOCK)  # finds the queue full: skipped
        store.gate.set()
        a.maintain()
        assert ca.get(Kind.KV_BLOCK, "block") == b"2" * BLOCK
    assert sample(a, "tiermem_remote_published_objects_total", result="skipped") == 1
    assert [n.endswith("other") for n in store.values] == [True]
    other_daemon_finds_nothing(b)


def test_an_overwrite_whose_upload_is_given_up_deletes_the_old_copy(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FlakyStore(failing_puts=0)
    a, b = two_daemons(store, make_daemon, monkeypatch)
    with Client(a.address) as ca:
        ca.put(Kind.KV_BLOCK, "block", b"1" * BLOCK)
        a.maintain()
        assert len(store.values) == 1
        store.failing_puts = PUBLISH_ATTEMPTS  # every try of the next upload fails
        ca.put(Kind.KV_BLOCK, "block", b"2" * BLOCK)
        a.maintain()
    assert sample(a, "tiermem_remote_published_objects_total", result="failed") == 1
    assert not store.values
    other_daemon_finds_nothing(b)


def test_the_same_daemon_never_adopts_the_old_version_after_evicting_the_new(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FlakyStore(failing_puts=0)
    a, _b = two_daemons(store, make_daemon, monkeypatch, max_value_bytes=2 * BLOCK)
    assert a.remote is not None
    with Client(a.address) as ca:
        ca.put(Kind.KV_BLOCK, "block", b"1" * BLOCK)
        a.maintain()
        ca.put(Kind.KV_BLOCK, "block", b"2" * (4 * BLOCK))
        a.maintain()
        assert a.mover.evict(KEY, a.store.catalog.find(KEY).tier) > 0  # type: ignore[union-attr]
        assert a.remote.fetch([KEY]) == 0
        with pytest.raises(NotFoundError):
            ca.get(Kind.KV_BLOCK, "block")


def test_with_sharing_off_an_overwrite_deletes_the_demoted_old_copy(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FlakyStore(failing_puts=0)
    a, b = two_daemons(store, make_daemon, monkeypatch, share=False)
    assert a.remote is not None
    with Client(a.address) as ca:
        ca.put(Kind.KV_BLOCK, "block", b"1" * BLOCK)
        assert a.mover.move(KEY, ServerTier.REMOTE)  # demoted: the store holds it
        assert len(store.values) == 1
        ca.put(Kind.KV_BLOCK, "block", b"2" * BLOCK)  # never published (share off)
        a.maintain()
        assert not store.values
        entry = a.store.catalog.find(KEY)
        assert entry is not None and a.mover.evict(KEY, entry.tier) > 0
        assert a.remote.fetch([KEY]) == 0  # the old version is not adopted back
        with pytest.raises(NotFoundError):
            ca.get(Kind.KV_BLOCK, "block")
    other_daemon_finds_nothing(b)
