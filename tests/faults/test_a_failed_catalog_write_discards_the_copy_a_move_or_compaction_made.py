"""A demotion to SSD, or a compaction, whose catalog write fails (a full disk)
gives back the SSD copy it had just written: nothing names it, so it must not
stay counted. Both used to leave it counted (the segment's live bytes, or the
inline bytes, grew by a copy no record pointed at, and a segment holding only
such copies was never compacted away)."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from tests.faults.test_a_failed_catalog_write_leaves_ssd_accounting_as_it_was import (
    _fail_next_write,
)
from tiermem.client import Client, Durability, Kind, Profile, Tier
from tiermem.server.app import Daemon
from tiermem.server.errors import CapacityExceeded
from tiermem.server.model import Kind as ServerKind
from tiermem.server.model import ObjectKey
from tiermem.server.model import Tier as ServerTier

KiB = 1 << 10


def _encoded(name: str) -> bytes:
    return ObjectKey("default", ServerKind.BLOB, name).encode()


def _counted(daemon: Daemon) -> tuple[int, int]:
    """What the SSD counts as live: (bytes live in segments, inline bytes)."""
    ssd = daemon.store.ssd
    return sum(live for _size, live in ssd.segments.stats().values()), ssd._inline_bytes


@pytest.mark.parametrize("size", [4 * KiB, 300 * KiB], ids=["inline", "segment"])
def test_a_demotion_whose_catalog_write_fails_leaves_the_ssd_as_it_was(
    make_daemon: Callable[..., Daemon], size: int
) -> None:
    daemon = make_daemon(background={"migrate_interval_s": 60})
    data = os.urandom(size)
    memory = Profile(preferred_tier=Tier.DRAM, durability=Durability.CACHE)
    with Client(daemon.address) as client:
        client.put(Kind.BLOB, "k", data, profile=memory)
        assert client.stat(Kind.BLOB, "k").tier == Tier.DRAM
        before = _counted(daemon)
        _fail_next_write(daemon.store.catalog.rocks)
        with pytest.raises(CapacityExceeded, match="ENOSPC"):
            daemon.mover.move(_encoded("k"), ServerTier.SSD)
        assert _counted(daemon) == before
        assert client.stat(Kind.BLOB, "k").tier == Tier.DRAM
        assert client.get(Kind.BLOB, "k") == data
        assert daemon.mover.move(_encoded("k"), ServerTier.SSD)  # the retry works
        assert client.get(Kind.BLOB, "k") == data


def test_a_compaction_whose_catalog_write_fails_leaves_the_ssd_as_it_was(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(
        tiers={"ssd": {"segment_bytes": 1024 * KiB}},
        background={"migrate_interval_s": 60, "compaction_interval_s": 3600},
    )
    ssd = Profile(preferred_tier=Tier.SSD, durability=Durability.CACHE)
    values = {f"k{i}": os.urandom(300 * KiB) for i in range(6)}
    with Client(daemon.address) as client:
        for name, data in values.items():
            client.put(Kind.BLOB, name, data, profile=ssd)
        first = daemon.store.catalog.find(_encoded("k0"))
        assert first is not None and first.seg >= 0
        for name in ("k1", "k2"):  # the first segment drops below its live ratio
            client.delete(Kind.BLOB, name)
            del values[name]
        assert first.seg in daemon.store.ssd.segments.compaction_candidates(0.5)
        before = _counted(daemon)
        _fail_next_write(daemon.store.catalog.rocks)
        with pytest.raises(CapacityExceeded, match="ENOSPC"):
            daemon.mover.compact_segment(first.seg)
        assert _counted(daemon) == before
        for name, data in values.items():
            assert client.get(Kind.BLOB, name) == data
        assert daemon.mover.compact_segment(first.seg)  # the retry works
        assert _counted(daemon) == before
        for name, data in values.items():
            assert client.get(Kind.BLOB, name) == data
