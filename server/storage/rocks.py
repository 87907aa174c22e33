"""One RocksDB instance for all durable metadata, one column family per concern.

Sharing one database gives one WAL, so a write batch spanning column families
(say, an object record plus its inline value) is atomic. Components ask for
their column family by name; new concerns add a name to ``COLUMN_FAMILIES``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rocksdict import (
    AccessType,
    BlockBasedOptions,
    Cache,
    DBCompressionType,
    DBRecoveryMode,
    Options,
    Rdict,
    ReadOptions,
    WriteBatch,
    WriteOptions,
)

from tiermem.server.errors import CapacityExceeded, Corrupted, Unavailable
from tiermem.server.storage.group_sync import GroupSync, SyncFailed

log = logging.getLogger(__name__)

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
    # -- remote tier (server/tiers/remote/journal.py) --
    "remote_deletes": "encoded-object-key -> empty (remote copies still to delete)",
}


#: Memory bounds of the catalog (a daemon's memory must stay flat): all memtables
#: together, one memtable, and the block cache shared by every column family.
MEMTABLES_TOTAL_BYTES = 64 << 20
MEMTABLE_BYTES = 16 << 20
BLOCK_CACHE_BYTES = 64 << 20


def _options(cache: Cache) -> Options:
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    opts.set_compression_type(DBCompressionType.lz4())
    opts.set_max_background_jobs(2)
    # Obsolete files are deleted by a background job, not by the writer whose
    # write released them: rocksdict holds the interpreter lock through a write,
    # so any file-system wait inside one stalls every thread of the daemon.
    # Measured in the soak (4 runs each): writes over 4 ms per 40 s fell from
    # 12-19 to 6-9.
    opts.set_avoid_unnecessary_blocking_io(True)
    opts.set_keep_log_file_num(3)
    # A torn WAL tail (a crash mid-append) is cut off at the last whole record:
    # only writes that were never acknowledged as durable can be in it. Corruption
    # before the tail also stops replay there (RocksDB's kPointInTimeRecovery);
    # recovery then reports what is missing instead of refusing to start.
    opts.set_wal_recovery_mode(DBRecoveryMode.point_in_time())
    opts.set_paranoid_checks(True)
    opts.set_db_write_buffer_size(MEMTABLES_TOTAL_BYTES)
    opts.set_write_buffer_size(MEMTABLE_BYTES)
    table = BlockBasedOptions()
    table.set_block_cache(cache)
    opts.set_block_based_table_factory(table)
    return opts


def _is_corruption(exc: Exception) -> bool:
    return str(exc).startswith("Corruption")


@dataclass(slots=True)
class ScanGap:
    """A key range a salvage scan could not read: keys after ``after`` (exclusive,
    b"" = from the start) and before ``before`` (exclusive, None = to the end)."""

    after: bytes
    before: bytes | None
    error: str


class RocksStore:
    """Thread-safe handle over one RocksDB directory with named column families.

    Durability contract: ``write(batch, sync=True)`` returns after the WAL is
    fsynced, so the batch survives ``kill -9`` and power loss; ``sync=False``
    survives a process crash (the WAL is in the OS page cache) but not power loss.
    """

    def __init__(
        self,
        path: Path,
        extra_column_families: tuple[str, ...] = (),
        *,
        read_only: bool = False,
    ) -> None:
        """``read_only`` opens without taking RocksDB's lock (offline fsck next to
        a running daemon sees the state as of the open). It opens only the
        column families the directory has: one written by an older version
        lacks the newer ones (RocksDB refuses a read-only open naming them), and
        only a read-write open creates them."""
        if not read_only:
            path.mkdir(parents=True, exist_ok=True)
        elif not (path / "CURRENT").is_file():
            raise FileNotFoundError(f"no catalog at {path}")
        self._path = path
        names = list(COLUMN_FAMILIES) + list(extra_column_families)
        if read_only:
            present = set(Rdict.list_cf(str(path), Options(raw_mode=True)))
            names = [name for name in names if name in present]
        cache = self._cache = Cache(BLOCK_CACHE_BYTES)
        opts = _options(cache)
        self._db = Rdict(
            str(path),
            options=opts,
            column_families={name: _options(cache) for name in names},
            access_type=AccessType.read_only() if read_only else AccessType.read_write(),
        )
        self._cfs = {name: self._db.get_column_family(name) for name in names}
        self._handles = {name: self._db.get_column_family_handle(name) for name in names}
        self._nosync = WriteOptions()
        self._closed = False
        self._read_only = read_only
        self._lock = threading.Lock()
        self._group_sync = GroupSync()

    @property
    def path(self) -> Path:
        return self._path

    def cf(self, name: str) -> Rdict:
        """The column family as a dict-like view (``get``, ``put``, ``items``...)."""
        return self._cfs[name]

    def batch(self) -> Batch:
        return Batch(self)

    def write(self, batch: WriteBatch, *, sync: bool) -> None:
        """Apply a batch atomically. A failed write (e.g. a full disk) raises
        CapacityExceeded or Unavailable and changes nothing; a failed sync raises
        the same after the batch was applied (it survives a process crash, maybe
        not power loss, and the caller was not told it is durable).

        ``sync``: return once the WAL holding the batch is on stable storage. The
        batch is written unsynced, then the WAL is synced (``flush``): rocksdict
        holds the interpreter lock for the whole of ``write`` but releases it in
        ``flush_wal``, so other threads keep running while the disk syncs.
        Readers may see the batch before the sync returns; only its writer is
        told it is durable."""
        if batch.is_empty():
            return
        try:
            self._db.write(batch, self._nosync)
        except Exception as exc:
            raise _storage_error("write", exc) from None
        if sync:
            self.flush()

    def get(self, cf: str, key: bytes) -> bytes | None:
        """The value, None if absent; raises Corrupted if RocksDB finds the block
        holding it damaged (its block checksums are verified on every read)."""
        try:
            value = self._cfs[cf].get(key)
        except Exception as exc:
            if _is_corruption(exc):
                raise Corrupted(f"catalog storage is damaged ({cf}): {exc}") from None
            raise
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
                return
            yield key, it.value()
            it.next()
        _raise_status(it, cf)

    def scan_salvage(
        self, cf: str, gaps: list[ScanGap], *, bulk: bool = True
    ) -> Iterator[tuple[bytes, bytes]]:
        """Every readable item of ``cf``: a forward scan, and if it stops at damaged
        storage, a backward scan from the end down to the last key read. What lies
        between is lost to this scan and described in ``gaps``."""
        read = ReadOptions()
        if bulk:
            read.fill_cache(False)  # type: ignore[call-arg]
        it = self._cfs[cf].iter(read)
        it.seek_to_first()
        last = b""
        while it.valid():
            last = it.key()
            yield last, it.value()
            it.next()
        try:
            _raise_status(it, cf)
            return
        except Corrupted as exc:
            error = exc.message
        back = self._cfs[cf].iter(read)
        back.seek_to_last()
        tail: list[tuple[bytes, bytes]] = []
        while back.valid() and back.key() > last:
            tail.append((back.key(), back.value()))
            back.prev()
        try:
            _raise_status(back, cf)
            before: bytes | None = tail[-1][0] if tail else None
        except Corrupted:
            before = tail[-1][0] if tail else None
        gaps.append(ScanGap(last, before, error))
        yield from reversed(tail)

    def values(self, cf: str) -> Iterator[bytes]:
        """Every value of ``cf`` in key order, read in bulk (bypassing the block
        cache): the fast path for whole-table scans at start-up."""
        read = ReadOptions()
        read.fill_cache(False)  # type: ignore[call-arg]  # stub lacks the flag argument
        return iter(self._cfs[cf].values(read_opt=read))

    def flush(self) -> None:
        """Sync the WAL: every batch written so far survives power loss. Group
        commit: threads syncing at once share one ``flush_wal`` (``GroupSync``)."""
        try:
            self._group_sync.sync(self._sync_wal)
        except SyncFailed as exc:  # another writer's sync failed while this one waited
            raise _storage_error("sync", exc) from None

    def _sync_wal(self) -> None:
        try:
            self._db.flush_wal(True)
        except Exception as exc:
            raise _storage_error("sync", exc) from None

    def memory_bytes(self) -> dict[str, int]:
        """Memory RocksDB holds now: memtables of every column family, block cache."""
        memtables = 0
        with self._lock:
            if self._closed:
                return {}
            for cf in self._cfs.values():
                memtables += int(cf.property_int_value("rocksdb.cur-size-all-mem-tables") or 0)
        return {"memtables": memtables, "block_cache": int(self._cache.get_usage())}

    def flush_memtables(self) -> None:
        """Write memtables to SST files (shorter WAL replay at the next start)."""
        for cf in self._cfs.values():
            cf.flush(True)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if not self._read_only:
                # Memtables to SST, so the next start replays no WAL. Best effort:
                # on a full disk the synced WAL still holds everything.
                try:
                    for cf in self._cfs.values():
                        cf.flush(True)
                    self._db.flush_wal(True)
                except Exception as exc:
                    log.warning("catalog flush at close failed (the WAL is kept): %s", exc)
            # Column-family views share the database; RocksDB's lock is released
            # only when every view is gone, so drop them before closing.
            # A database in RocksDB's background-error state (e.g. after a full disk)
            # reports that error again on close; it closes all the same.
            for cf in self._cfs.values():
                try:
                    cf.close()
                except Exception as exc:
                    log.warning("catalog close: %s", exc)
            self._cfs.clear()
            self._handles.clear()
            try:
                self._db.close()
            except Exception as exc:
                log.warning("catalog close: %s", exc)


def _storage_error(what: str, exc: Exception) -> Exception:
    text = str(exc)
    if "No space left" in text or "ENOSPC" in text:
        return CapacityExceeded(
            f"catalog {what} failed, the disk is full: {text}. Free space; RocksDB may stay "
            "read-only until the daemon restarts"
        )
    if _is_corruption(exc):
        return Corrupted(f"catalog {what} failed, its storage is damaged: {text}")
    return Unavailable(f"catalog {what} failed: {text}")


def _raise_status(it: object, cf: str) -> None:
    try:
        it.status()  # type: ignore[attr-defined]
    except Exception as exc:
        if _is_corruption(exc):
            raise Corrupted(f"catalog storage is damaged ({cf}): {exc}") from None
        raise


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
