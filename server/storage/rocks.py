"""One RocksDB instance for all durable metadata, one column family per concern.

Sharing one database gives one WAL, so a write batch spanning column families
(say, an object record plus its inline value) is atomic. Components ask for
their column family by name; new concerns add a name to ``COLUMN_FAMILIES``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

from rocksdict import (
    AccessType,
    DBCompressionType,
    Options,
    Rdict,
    ReadOptions,
    WriteBatch,
    WriteOptions,
)

#: Column families and what they hold.
COLUMN_FAMILIES: dict[str, str] = {
    "objects": "catalog records, keyed by encoded object key",
    "values": "small SSD-resident values, keyed by encoded object key",
    "by_session": "session NUL encoded-object-key -> empty (session ownership index)",
    "expiry": "big-endian u64 expiry unix ms + encoded-object-key -> empty (TTL index)",
    "namespaces": "namespace name -> creation time",
    "meta": "daemon bookkeeping (format version, id counters)",
    "sessions": "session id -> tiermem.v1.SessionRecord (agent sessions)",
    "session_ledger": "parent NUL u64-be seq -> tiermem.v1.LedgerRecord (context ledger)",
    "scratch": "b session NUL u64-be id -> batch; k session NUL key -> keyed record",
    # -- vectors (server/vectors) --
    "vec_collections": "namespace NUL name -> CollectionRecord (vector collections)",
    "vec_log": "collection id u64 BE + seq u64 BE -> VectorLogEntry (operation log)",
    "vec_payloads": "collection id u64 BE + vector id u64 BE -> VectorPayload",
    # -- blobs (server/blobs) --
    "blobs": "namespace NUL key -> BlobRecord",
    "blob_contents": "sha256 -> ContentRecord (reference counts, block checksums)",
    "blob_inline": "sha256 -> bytes of a small content",
    "blob_uploads": "upload id -> UploadRecord (uploads in progress)",
    "blob_by_session": "session NUL namespace NUL key -> empty (session ownership index)",
    "blob_journal": "u64 BE seq -> JournalEntry (changes the search tables have not taken)",
}


def _options() -> Options:
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    opts.set_compression_type(DBCompressionType.lz4())
    opts.set_max_background_jobs(2)
    opts.set_keep_log_file_num(3)
    return opts


class RocksStore:
    """Thread-safe handle over one RocksDB directory with named column families.

    Durability contract: ``write(batch, sync=True)`` returns after the WAL is
    fsynced, so the batch survives ``kill -9`` and power loss; ``sync=False``
    survives a process crash (the WAL is in the OS page cache) but not power loss.
    """

    def __init__(self, path: Path, extra_column_families: tuple[str, ...] = ()) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self._path = path
        names = list(COLUMN_FAMILIES) + list(extra_column_families)
        opts = _options()
        self._db = Rdict(
            str(path),
            options=opts,
            column_families={name: _options() for name in names},
            access_type=AccessType.read_write(),
        )
        self._cfs = {name: self._db.get_column_family(name) for name in names}
        self._handles = {name: self._db.get_column_family_handle(name) for name in names}
        self._sync = WriteOptions()
        self._sync.sync = True
        self._nosync = WriteOptions()
        self._closed = False
        self._lock = threading.Lock()

    @property
    def path(self) -> Path:
        return self._path

    def cf(self, name: str) -> Rdict:
        """The column family as a dict-like view (``get``, ``put``, ``items``...)."""
        return self._cfs[name]

    def batch(self) -> Batch:
        return Batch(self)

    def write(self, batch: WriteBatch, *, sync: bool) -> None:
        if batch.is_empty():
            return
        self._db.write(batch, self._sync if sync else self._nosync)

    def get(self, cf: str, key: bytes) -> bytes | None:
        value = self._cfs[cf].get(key)
        return value if value is None else bytes(value)

    def scan(
        self, cf: str, prefix: bytes = b"", start: bytes | None = None, *, bulk: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """Items of ``cf`` whose key starts with ``prefix``, in key order, from ``start``.
        ``bulk`` scans (whole-table reads) bypass the block cache."""
        read = ReadOptions()
        if bulk:
            read.fill_cache(False)  # type: ignore[call-arg]  # stub lacks the flag argument
        it = self._cfs[cf].iter(read)
        it.seek(start if start is not None and start > prefix else prefix)
        while it.valid():
            key = it.key()
            if not key.startswith(prefix):
                break
            yield key, it.value()
            it.next()

    def values(self, cf: str) -> Iterator[bytes]:
        """Every value of ``cf`` in key order, read in bulk (bypassing the block
        cache): the fast path for whole-table scans at start-up."""
        read = ReadOptions()
        read.fill_cache(False)  # type: ignore[call-arg]  # stub lacks the flag argument
        return iter(self._cfs[cf].values(read_opt=read))

    def flush(self) -> None:
        self._db.flush_wal(True)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._db.flush_wal(True)
            # Column-family views share the database; RocksDB's lock is released
            # only when every view is gone, so drop them before closing.
            for cf in self._cfs.values():
                cf.close()
            self._cfs.clear()
            self._handles.clear()
            self._db.close()


class Batch:
    """A write batch addressed by column-family name."""

    def __init__(self, store: RocksStore) -> None:
        self._store = store
        self.raw = WriteBatch(raw_mode=True)

    def put(self, cf: str, key: bytes, value: bytes) -> None:
        self.raw.put(key, value, self._store._handles[cf])

    def delete(self, cf: str, key: bytes) -> None:
        self.raw.delete(key, self._store._handles[cf])

    def delete_range(self, cf: str, begin: bytes, end: bytes) -> None:
        """Delete every key in ``[begin, end)`` of ``cf``."""
        self.raw.delete_range(begin, end, self._store._handles[cf])

    def commit(self, *, sync: bool) -> None:
        self._store.write(self.raw, sync=sync)
