"""No payload file outlives the records that reference it.

* A put whose catalog write fails (a full disk) removes the payload it had
  adopted: no record names it. It stayed on disk until the next start.
* A replace or delete whose catalog sync fails has its batch applied but not
  known to be durable: the payload it freed is kept until a later sync
  succeeds (a power loss could bring back the record naming it), then
  removed. It was never removed while the daemon ran.
* At start-up, payload files no content record names (a crash between a
  commit and the removal) are deleted, and the count is logged."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from typing import Any

import pytest

from tests.blobs.helpers import MiB, pattern
from tiermem.client import CapacityError, Client, NotFoundError
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


def fail_next_sync(rocks: Any) -> None:
    """The next WAL sync of ``rocks`` fails (after its batch was applied)."""
    real = rocks.flush
    armed = [True]

    def flush() -> None:
        if armed[0]:
            armed[0] = False
            raise CapacityExceeded("catalog sync failed, the disk is full (injected)")
        real()

    rocks.flush = flush


def sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def test_a_put_whose_catalog_write_fails_leaves_no_payload_file(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(**LIGHT)
    blobs = daemon.blobs
    data = pattern(3 * MiB, seed=1)
    with Client(daemon.address, timeout_s=30) as c:
        fail_next_write(blobs.catalog.rocks)
        with pytest.raises(TiermemClientError):
            c.blobs.put("a.bin", data)
        with pytest.raises(NotFoundError):
            c.blobs.stat("a.bin")
        assert not blobs.files.path(sha(data)).exists()
        assert list(blobs.files.hashes()) == []
        c.blobs.put("a.bin", data)  # a retry stores it
        assert c.blobs.get("a.bin") == data


def test_a_payload_freed_by_a_replace_whose_sync_failed_goes_once_synced(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(**LIGHT)
    blobs = daemon.blobs
    old, new = pattern(3 * MiB, seed=1), pattern(2 * MiB, seed=2)
    with Client(daemon.address, timeout_s=30) as c:
        c.blobs.put("a.bin", old)
        old_path = blobs.files.path(sha(old))
        assert old_path.exists()
        fail_next_sync(blobs.catalog.rocks)
        with pytest.raises(CapacityError, match="sync failed"):
            c.blobs.put("a.bin", new)
        assert c.blobs.get("a.bin") == new  # applied, not known durable
        assert old_path.exists()  # a power loss could bring the old record back
        c.blobs.put("b.bin", pattern(MiB, seed=3))  # a sync that succeeds
        assert not old_path.exists()
        assert c.blobs.get("a.bin") == new
        assert set(blobs.files.hashes()) == {sha(new), sha(pattern(MiB, seed=3))}


def test_a_payload_freed_by_a_delete_whose_sync_failed_goes_once_synced(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(**LIGHT)
    blobs = daemon.blobs
    data = pattern(3 * MiB, seed=4)
    with Client(daemon.address, timeout_s=30) as c:
        c.blobs.put("a.bin", data)
        path = blobs.files.path(sha(data))
        fail_next_sync(blobs.catalog.rocks)
        with pytest.raises(CapacityError, match="sync failed"):
            c.blobs.delete("a.bin")
        with pytest.raises(NotFoundError):
            c.blobs.stat("a.bin")
        assert path.exists()
        blobs.maintain()  # maintenance syncs, then removes it
        assert not path.exists()
        # the same bytes stored again after a failed delete are kept
        c.blobs.put("b.bin", data)
        fail_next_sync(blobs.catalog.rocks)
        with pytest.raises(CapacityError, match="sync failed"):
            c.blobs.delete("b.bin")
        c.blobs.put("c.bin", data)  # refers to the same bytes again
        blobs.maintain()
        assert path.exists() and c.blobs.get("c.bin") == data


def test_payload_files_no_record_names_are_deleted_at_start_up(
    make_daemon: Callable[..., Daemon], caplog: pytest.LogCaptureFixture
) -> None:
    daemon = make_daemon("p", **LIGHT)
    data = pattern(3 * MiB, seed=5)
    with Client(daemon.address, timeout_s=30) as c:
        c.blobs.put("a.bin", data)
    kept = daemon.blobs.files.path(sha(data))
    orphans = [daemon.blobs.files.path(sha(pattern(MiB, seed=s))) for s in (6, 7)]
    daemon.stop(grace_s=0)
    for path in orphans:  # as a crash between a commit and the removal leaves them
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"x" * 4096)

    with caplog.at_level(logging.INFO, logger="tiermem.server.services.blobs"):
        daemon = make_daemon("p", **LIGHT)
    assert not any(path.exists() for path in orphans)
    assert kept.exists()
    assert "deleted 2 blob payloads no record references" in caplog.text
    with Client(daemon.address, timeout_s=30) as c:
        assert c.blobs.get("a.bin") == data
