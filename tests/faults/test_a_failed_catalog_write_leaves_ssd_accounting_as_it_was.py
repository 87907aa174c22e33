"""A put replacing an object on SSD, or a delete of one, whose catalog write
fails (a full disk: RESOURCE_EXHAUSTED, "nothing changes") leaves the SSD's
space accounting as it was. The old copy's space was released before the
batch was committed: the object stayed and was served but no longer counted,
a later delete drove the counters negative, and a segment holding it could
be compacted away while live (found with a lost DURABLE write)."""

from __future__ import annotations

import os
from typing import Any

import pytest
import xxhash

from tiermem.client import Client, Kind, Profile, Tier
from tiermem.server.app import Daemon
from tiermem.server.errors import CapacityExceeded
from tiermem.server.model import Kind as ServerKind
from tiermem.server.model import ObjectKey
from tiermem.server.model import Profile as ServerProfile
from tiermem.server.model import Tier as ServerTier
from tiermem.server.services.objects import FilledPut, PutSpec

SSD = Profile(preferred_tier=Tier.SSD)


def _fail_next_write(rocks: Any) -> None:
    real = rocks.write
    armed = [True]

    def write(batch: Any, *, sync: bool) -> Any:
        if armed[0] and not batch.is_empty():
            armed[0] = False
            raise CapacityExceeded("catalog write failed: ENOSPC (injected)")
        return real(batch, sync=sync)

    rocks.write = write


def _live(daemon: Daemon, name: str) -> int:
    """What the SSD counts for the object's copy: its segment's live bytes, or
    every inline value's bytes."""
    ssd = daemon.store.ssd
    entry = daemon.store.catalog.find(ObjectKey("default", ServerKind.BLOB, name).encode())
    assert entry is not None
    return ssd.segments.live_bytes(entry.seg) if entry.seg >= 0 else ssd._inline_bytes


@pytest.mark.parametrize("size", [1000, 300_000], ids=["inline", "segment"])
def test_a_failed_overwrite_keeps_the_old_copy_counted(
    daemon: Daemon, client: Client, size: int
) -> None:
    old = os.urandom(size)
    client.put(Kind.BLOB, "k", old, profile=SSD)
    before = _live(daemon, "k")
    _fail_next_write(daemon.store.catalog.rocks)
    with pytest.raises(Exception, match="ENOSPC"):
        client.put(Kind.BLOB, "k", os.urandom(size), profile=SSD)
    assert client.get(Kind.BLOB, "k") == old
    assert _live(daemon, "k") == before


@pytest.mark.parametrize("size", [1000, 300_000], ids=["inline", "segment"])
def test_a_failed_delete_keeps_the_copy_counted(daemon: Daemon, client: Client, size: int) -> None:
    old = os.urandom(size)
    client.put(Kind.BLOB, "k", old, profile=SSD)  # the only object on the SSD
    ssd = daemon.store.ssd
    entry = daemon.store.catalog.find(ObjectKey("default", ServerKind.BLOB, "k").encode())
    assert entry is not None
    before = _live(daemon, "k")
    _fail_next_write(daemon.store.catalog.rocks)
    with pytest.raises(Exception, match="ENOSPC"):
        client.delete(Kind.BLOB, "k")
    assert client.get(Kind.BLOB, "k") == old
    assert _live(daemon, "k") == before
    client.delete(Kind.BLOB, "k")  # the real delete frees it exactly once
    left = ssd.segments.live_bytes(entry.seg) if entry.seg >= 0 else ssd._inline_bytes
    assert left == 0


def test_a_failed_batch_commit_keeps_the_old_copies_counted(daemon: Daemon, client: Client) -> None:
    client.put(Kind.BLOB, "a", os.urandom(1000), profile=SSD)
    client.put(Kind.BLOB, "b", os.urandom(2000), profile=SSD)
    inline = daemon.store.ssd._inline_bytes
    objects = daemon.objects
    puts = []
    for name in ("a", "b"):
        data = os.urandom(1500)
        spec = PutSpec(
            key=ObjectKey("default", ServerKind.BLOB, name),
            size_bytes=len(data),
            profile=ServerProfile(preferred_tier=ServerTier.SSD),
        )
        profile = objects.prepare(spec)
        reservation = objects.reserve(len(data), profile, ServerKind.BLOB)
        reservation.buffer[: len(data)] = data
        puts.append(FilledPut(spec, profile, reservation, xxhash.xxh3_64_intdigest(data)))
    _fail_next_write(daemon.store.catalog.rocks)
    with pytest.raises(CapacityExceeded):
        objects.commit_filled_many(puts, path="grpc")
    assert daemon.store.ssd._inline_bytes == inline
