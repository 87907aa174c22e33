"""Creating a segment file and syncing its directory can wait behind other I/O
for tens of milliseconds. The segment store's lock must not be held meanwhile:
every commit that replaces or deletes an SSD value releases its space under
that lock (while holding the daemon's store lock), so one slow directory sync
used to stall every request."""

import os
import threading
from pathlib import Path

import pytest

from tiermem.server.tiers import segments as segments_module
from tiermem.server.tiers.segments import SegmentStore


def test_a_release_completes_while_a_new_segment_waits_for_its_directory_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SegmentStore(tmp_path / "segments", segment_bytes=16 * 1024)
    first, _ = store.append(b"first", memoryview(os.urandom(8 * 1024)), 1, sync=True)

    in_sync, let_go = threading.Event(), threading.Event()
    real_fsync = os.fsync

    def slow_fsync(fd: int) -> None:
        in_sync.set()
        assert let_go.wait(10), "the test never let the sync finish"
        real_fsync(fd)

    monkeypatch.setattr(segments_module.os, "fsync", slow_fsync)
    rolled: list[tuple[int, int]] = []
    writer = threading.Thread(
        target=lambda: rolled.append(
            store.append(b"second", memoryview(b"x" * 12 * 1024), 2, sync=True)
        )
    )
    writer.start()
    try:
        assert in_sync.wait(10), "the second value did not roll a new segment"
        released = threading.Thread(target=store.release, args=(first, len(b"first"), 8 * 1024))
        released.start()
        released.join(2)
        assert not released.is_alive(), "release waited for another segment's directory sync"
        assert not rolled  # the synced append has not returned before its name is durable
    finally:
        let_go.set()
        writer.join(10)
    assert rolled and rolled[0][0] != first
    buf = bytearray(12 * 1024)
    store.read_into(rolled[0][0], rolled[0][1], memoryview(buf))
    assert bytes(buf) == b"x" * 12 * 1024
    assert store.live_bytes(first) == 0
    store.close()
