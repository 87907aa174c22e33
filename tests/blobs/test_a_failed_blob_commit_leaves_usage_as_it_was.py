"""A blob put, replace or delete whose synced catalog write fails (a full disk)
changes nothing: the blob is as it was, and so are the session's and the
namespace's usage and the blob totals. The tallies were changed before the
write, so a failed put of 3 MiB stayed charged to its session (Describe
showed the bytes and later puts were refused by its quota) until a restart."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.blobs.helpers import MiB, pattern
from tiermem.client import CapacityError, Client, NotFoundError, Tier
from tiermem.client.errors import TiermemClientError
from tiermem.server.app import Daemon
from tiermem.server.errors import CapacityExceeded

LIGHT = {
    "agent": {"scratch": {"embedder": "hash"}},
    "blobs": {"text_embedder": "off"},
}


def fail_next_write(rocks: Any) -> None:
    """The next non-empty write batch of ``rocks`` fails as on a full disk."""
    real = rocks.write
    armed = [True]

    def write(batch: Any, *, sync: bool) -> Any:
        if armed[0] and not batch.is_empty():
            armed[0] = False
            raise CapacityExceeded("catalog write failed: ENOSPC (injected)")
        return real(batch, sync=sync)

    rocks.write = write


def test_a_failed_blob_commit_leaves_usage_as_it_was(make_daemon: Callable[..., Daemon]) -> None:
    daemon = make_daemon(**LIGHT)
    blobs = daemon.blobs
    with Client(daemon.address, timeout_s=30) as c:
        root = c.sessions.open(label="main")
        s = c.sessions.open(parent=root.id, label="small", quotas={Tier.SSD: 4 * MiB})
        as_s = c.as_session(s.id)

        def usage() -> tuple[int, tuple[int, int], tuple[int, int, int, int]]:
            t = blobs.catalog.totals
            return (
                c.sessions.describe(s.id).used_bytes(Tier.SSD),
                daemon.store.guard.namespace_usage("default"),
                (t.blobs, t.logical_bytes, t.contents, t.stored_bytes),
            )

        empty = usage()
        fail_next_write(blobs.catalog.rocks)
        with pytest.raises(TiermemClientError):
            as_s.blobs.put("a.bin", pattern(3 * MiB, seed=1))
        with pytest.raises(NotFoundError):
            as_s.blobs.stat("a.bin")
        assert usage() == empty

        data = pattern(3 * MiB, seed=2)
        as_s.blobs.put("a.bin", data)  # the quota has its room: stored
        stored = usage()
        assert stored[0] == 3 * MiB

        fail_next_write(blobs.catalog.rocks)
        with pytest.raises(TiermemClientError):  # a failed replace
            as_s.blobs.put("a.bin", pattern(1 * MiB, seed=3))
        assert usage() == stored
        fail_next_write(blobs.catalog.rocks)
        with pytest.raises(TiermemClientError):  # a failed delete
            as_s.blobs.delete("a.bin")
        assert usage() == stored
        assert as_s.blobs.get("a.bin") == data

        as_s.blobs.delete("a.bin")
        assert usage() == empty


def test_a_blob_whose_sync_failed_counts_as_it_is_stored(
    make_daemon: Callable[..., Daemon],
) -> None:
    """A failed WAL sync comes after the batch was applied: the blob is stored
    (readable; it survives a process crash) and is counted, although its put
    reported the failure."""
    daemon = make_daemon(**LIGHT)
    rocks = daemon.blobs.catalog.rocks
    with Client(daemon.address, timeout_s=30) as c:
        root = c.sessions.open(label="main")
        s = c.sessions.open(parent=root.id, label="small", quotas={Tier.SSD: 4 * MiB})
        as_s = c.as_session(s.id)
        data = pattern(3 * MiB, seed=4)
        real_flush = rocks.flush
        armed = [True]

        def flush() -> None:
            if armed[0]:
                armed[0] = False
                raise CapacityExceeded("catalog sync failed, the disk is full (injected)")
            real_flush()

        rocks.flush = flush
        with pytest.raises(CapacityError, match="sync failed"):
            as_s.blobs.put("a.bin", data)
        assert as_s.blobs.get("a.bin") == data
        assert c.sessions.describe(s.id).used_bytes(Tier.SSD) == 3 * MiB
        assert daemon.store.guard.namespace_usage("default") == (1, 3 * MiB)
        with pytest.raises(CapacityError, match="SSD quota"):
            as_s.blobs.put("b.bin", pattern(2 * MiB, seed=5))
