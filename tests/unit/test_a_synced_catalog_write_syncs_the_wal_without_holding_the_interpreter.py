"""A synced catalog write must not sync inside ``Rdict.write``: rocksdict holds the
interpreter lock for the whole of that call, so every other thread of the daemon
would wait for the disk. The sync goes through ``flush_wal``, which releases it
(bench/catalog_sync.py measures what other threads get done meanwhile)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from tiermem.server.storage.rocks import RocksStore


class RecordingDb:
    """Passes every call to the real database and records writes and WAL syncs."""

    def __init__(self, db: Any) -> None:
        self._db = db
        self.calls: list[tuple[str, bool]] = []

    def write(self, batch: Any, options: Any) -> None:
        self.calls.append(("write", bool(options.sync)))
        self._db.write(batch, options)

    def flush_wal(self, sync: bool) -> None:
        self.calls.append(("flush_wal", sync))
        self._db.flush_wal(sync)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


def test_a_synced_write_is_written_unsynced_then_the_wal_is_synced(tmp_path: Path) -> None:
    store = RocksStore(tmp_path / "catalog")
    real = store._db
    recorder = RecordingDb(real)
    store._db = recorder
    try:
        batch = store.batch()
        batch.put("meta", b"durable", b"value")
        batch.commit(sync=True)
        assert recorder.calls == [("write", False), ("flush_wal", True)]
        assert store.get("meta", b"durable") == b"value"

        recorder.calls.clear()
        batch = store.batch()
        batch.put("meta", b"cached", b"value")
        batch.commit(sync=False)
        assert recorder.calls == [("write", False)]
    finally:
        store._db = real
        store.close()


def test_synced_writes_from_many_threads_all_land(tmp_path: Path) -> None:
    store = RocksStore(tmp_path / "catalog")
    try:

        def writer(w: int) -> None:
            for i in range(50):
                batch = store.batch()
                batch.put("meta", f"{w}/{i}".encode(), f"{w}:{i}".encode())
                batch.commit(sync=True)

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for w in range(4):
            for i in range(50):
                assert store.get("meta", f"{w}/{i}".encode()) == f"{w}:{i}".encode()
    finally:
        store.close()
    reopened = RocksStore(tmp_path / "catalog")
    try:
        assert reopened.get("meta", b"3/49") == b"3:49"
    finally:
        reopened.close()
