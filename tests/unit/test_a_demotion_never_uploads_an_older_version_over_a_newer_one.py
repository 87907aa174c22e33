"""A demotion to the remote tier reads the object's entry, then its value, and
only then claims the key for its upload. A newer version could reach the store
in that gap (published by the writer, or uploaded by another demotion); the
demotion then uploaded the older value over it, its switch failed, and the
delete queued for its orphaned upload was spared because the current entry has
a remote copy: the store held v1 where the catalog said v2, so a get answered
DATA_LOSS (and other daemons would adopt v1). The demotion now checks, once it
holds the claim, that the entry is still the version it read and has no remote
copy. Found by review; both tests fail without that check."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.unit.test_a_queued_remote_delete_never_removes_the_version_a_demotion_uploaded import (
    BLOCK,
    KEY,
    GatedStore,
    daemon_on,
)
from tiermem.client import Client, Kind
from tiermem.server.model import Tier


class GatedClaims:
    """The remote writes' claims, with a pause before each (the gap between a
    demotion's read of the entry and its claim, widened)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.go = threading.Event()
        self.reached = threading.Event()

    def claim(self, key: bytes, *, private: bool = False) -> bool:
        self.reached.set()
        assert self.go.wait(30), "the test never let the claim go on"
        return bool(self.inner.claim(key, private=private))

    def release(self, key: bytes, *, orphaned: bool, private: bool = False) -> None:
        self.inner.release(key, orphaned=orphaned, private=private)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # the rest of ``RemoteWrites``, as they are


def test_a_version_published_meanwhile_is_not_overwritten(
    make_daemon: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = GatedStore()
    daemon = daemon_on(store, make_daemon, monkeypatch)  # publishing on
    gate = GatedClaims(daemon.mover.remote_writes)
    daemon.mover.remote_writes = gate
    with Client(daemon.address) as client:
        store.hold(puts=("/other",))
        client.put(Kind.KV_BLOCK, "other", b"o" * BLOCK)  # the writer is busy uploading it
        assert store.waiting.wait(10)
        client.put(Kind.KV_BLOCK, "block", b"1" * BLOCK)  # v1's publish waits behind
        moved: list[bool] = []
        demotion = threading.Thread(
            target=lambda: moved.append(daemon.mover.move(KEY, Tier.REMOTE))
        )
        demotion.start()
        assert gate.reached.wait(10)  # the demotion read v1 and is about to claim
        client.put(Kind.KV_BLOCK, "block", b"2" * BLOCK)  # the queued publish carries v2
        store.gate.set()
        assert daemon.remote.flush(10)
        gate.go.set()
        demotion.join(10)
        assert daemon.remote.flush(10)
        assert moved == [False]
        assert store.block()[-4:] == b"2222"
        entry = daemon.store.catalog.find(KEY)
        assert entry is not None
        daemon.mover.evict(KEY, Tier(entry.tier))  # an eviction keeps the remote copy
        assert client.get(Kind.KV_BLOCK, "block") == b"2" * BLOCK


def test_a_version_another_demotion_uploaded_is_not_overwritten(
    make_daemon: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = GatedStore()
    daemon = daemon_on(store, make_daemon, monkeypatch, share=False)
    writes = daemon.mover.remote_writes
    gate = GatedClaims(writes)
    with Client(daemon.address) as client:
        client.put(Kind.KV_BLOCK, "block", b"1" * BLOCK)
        daemon.mover.remote_writes = gate
        moved: dict[str, bool] = {}
        first = threading.Thread(
            target=lambda: moved.setdefault("first", daemon.mover.move(KEY, Tier.REMOTE))
        )
        first.start()
        assert gate.reached.wait(10)  # the first demotion read v1, not yet claimed
        daemon.mover.remote_writes = writes
        client.put(Kind.KV_BLOCK, "block", b"2" * BLOCK)
        moved["second"] = daemon.mover.move(KEY, Tier.REMOTE)  # v2 goes remote
        gate.go.set()
        first.join(10)
        assert daemon.remote.flush(10)
        assert moved == {"first": False, "second": True}
        assert store.block()[-4:] == b"2222"
        assert client.get(Kind.KV_BLOCK, "block") == b"2" * BLOCK
