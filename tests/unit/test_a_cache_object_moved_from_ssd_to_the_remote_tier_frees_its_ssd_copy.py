"""Moving a CACHE object from SSD to the remote tier releases its SSD copy: the
planner sends SSD CACHE objects remote precisely to free SSD, but the move used
to keep the copy (the record and the segment's live bytes still named it), so
the space was never freed, not even by compaction. The object is still read,
from the remote store. Runs against an in-memory backend (no peer needed)."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from tests.unit.test_a_failed_remote_publish_is_retried_then_given_up import FlakyStore, daemon_on
from tiermem.client import Client, Durability, Kind, Profile, Tier
from tiermem.server.app import Daemon
from tiermem.server.catalog.records import FLAG_ON_SSD, decode
from tiermem.server.model import Kind as ServerKind
from tiermem.server.model import ObjectKey
from tiermem.server.model import Tier as ServerTier

KiB = 1 << 10
ON_SSD = Profile(preferred_tier=Tier.SSD, durability=Durability.CACHE)


def _encoded(name: str) -> bytes:
    return ObjectKey("default", ServerKind.KV_BLOCK, name).encode()


@pytest.mark.parametrize("size", [4 * KiB, 300 * KiB], ids=["inline", "segment"])
def test_an_ssd_cache_object_moved_remote_no_longer_counts_on_the_ssd(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    store = FlakyStore(failing_puts=0)
    daemon = daemon_on(store, make_daemon, monkeypatch, share=False)
    ssd = daemon.store.ssd
    data = os.urandom(size)
    with Client(daemon.address) as client:
        client.put(Kind.KV_BLOCK, "block", data, profile=ON_SSD)
        entry = daemon.store.catalog.find(_encoded("block"))
        assert entry is not None and entry.tier == ServerTier.SSD and entry.persisted
        inline_before = ssd._inline_bytes
        live_before = ssd.segments.live_bytes(entry.seg) if entry.seg >= 0 else 0

        assert daemon.mover.move(_encoded("block"), ServerTier.REMOTE)

        meta = client.stat(Kind.KV_BLOCK, "block")
        assert meta.tier == Tier.REMOTE and not meta.persisted
        if entry.seg >= 0:
            assert ssd.segments.live_bytes(entry.seg) < live_before
        else:
            assert ssd._inline_bytes == inline_before - size
            assert daemon.store.catalog.rocks.get("values", _encoded("block")) is None
        raw = daemon.store.catalog.rocks.get("objects", _encoded("block"))
        assert raw is not None and not decode(raw).flags & FLAG_ON_SSD
        assert len(store.values) == 1
        assert client.get(Kind.KV_BLOCK, "block") == data  # from the remote store


def test_ssd_space_of_cache_objects_moved_remote_is_reclaimed(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FlakyStore(failing_puts=0)
    monkeypatch.setattr("tiermem.server.app.make_backend", lambda _cfg: store)
    daemon = make_daemon(
        tiers={
            "remote": {"enabled": True, "deployment": "unit", "share": False, "retries": 0},
            "ssd": {"segment_bytes": 1024 * KiB},
        },
        background={"migrate_interval_s": 60},
    )
    values = {f"block-{i}": os.urandom(300 * KiB) for i in range(8)}
    with Client(daemon.address) as client:
        for name, data in values.items():
            client.put(Kind.KV_BLOCK, name, data, profile=ON_SSD)
        used = daemon.store.ssd.used_bytes
        for name in values:
            assert daemon.mover.move(_encoded(name), ServerTier.REMOTE)
        daemon.mover.compact()  # the sealed segments hold nothing live any more
        assert daemon.store.ssd.used_bytes < used // 2
        for name, data in values.items():
            assert client.get(Kind.KV_BLOCK, name) == data
