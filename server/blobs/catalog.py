"""Durable records of the blob store, in the daemon's RocksDB.

Column families (``storage/rocks.py``)::

    blobs            namespace NUL key      -> BlobRecord      (the truth for a blob)
    blob_contents    sha256                 -> ContentRecord   (refs, block checksums, store)
    blob_inline      sha256                 -> bytes           (contents <= inline_max_bytes)
    blob_uploads     upload id              -> UploadRecord    (uploads in progress)
    blob_by_session  session NUL ns NUL key -> ""              (what a session owns)
    blob_journal     u64 BE seq             -> JournalEntry    (search tables not yet updated)
    meta             "blobs/totals", "blobs/uid", "blobs/space/<name>"

Reference counting: a blob record names one content by hash; the content's
``refs`` is the number of records naming it. Every change — a blob stored,
replaced or deleted, with the reference counts, totals, session index and
journal entry it implies — is ONE write batch, synced before the call
returns: after ``kill -9`` the counts always match the records. A content
whose count reaches zero is deleted in that batch; its payload (a file or a
LanceDB row) is removed once the batch is synced (after a failed sync, once a
later sync succeeds: until then a power loss could bring back the record
naming it), and payloads left behind by a crash in between are removed at
start-up (``BlobService.open``).

The caller (``BlobService``) serialises writers with its lock; reads are
lock-free (RocksDB gives each a consistent value).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from dataclasses import astuple, dataclass, replace

from tiermem.server.errors import InvariantViolation
from tiermem.server.storage.rocks import Batch, RocksStore
from tiermem.v1 import blob_records_pb2 as rec_pb

BLOBS = "blobs"
CONTENTS = "blob_contents"
INLINE = "blob_inline"
UPLOADS = "blob_uploads"
BY_SESSION = "blob_by_session"
JOURNAL = "blob_journal"
META = "meta"

TOTALS_KEY = b"blobs/totals"
UID_KEY = b"blobs/uid"
SPACE_PREFIX = b"blobs/space/"
_TOTALS = struct.Struct("<QQQQ")
_U64 = struct.Struct("<Q")
_SEQ = struct.Struct(">Q")


def blob_key(namespace: str, key: str) -> bytes:
    return namespace.encode() + b"\x00" + key.encode()


def split_blob_key(raw: bytes) -> tuple[str, str]:
    ns, _, key = raw.partition(b"\x00")
    return ns.decode(), key.decode()


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class Totals:
    blobs: int = 0
    logical_bytes: int = 0
    contents: int = 0
    stored_bytes: int = 0


@dataclass(frozen=True, slots=True)
class Freed:
    """A content whose last reference went away (its payload must be removed)."""

    sha256: bytes
    content: rec_pb.ContentRecord


@dataclass(frozen=True, slots=True)
class Change:
    """What a commit or delete replaced: the previous record and a freed content."""

    old: rec_pb.BlobRecord | None
    freed: Freed | None


class BlobCatalog:
    def __init__(self, rocks: RocksStore) -> None:
        self.rocks = rocks
        raw = rocks.get(META, TOTALS_KEY)
        self.totals = Totals(*_TOTALS.unpack(raw)) if raw else Totals()
        raw = rocks.get(META, UID_KEY)
        self._uid = _U64.unpack(raw)[0] if raw else 0
        self._seq = 0
        self.journal_pending = 0
        #: namespace -> [blobs, logical bytes] (namespace quotas count blobs too)
        self._ns_usage: dict[str, list[int]] = {}
        #: session -> [blobs, logical bytes] it owns (session quotas count them)
        self._session_usage: dict[str, list[int]] = {}
        for _, raw in rocks.scan(BLOBS):
            r = rec_pb.BlobRecord.FromString(raw)
            self._count(r, 1)
        for key, _ in rocks.scan(JOURNAL):
            self._seq = _SEQ.unpack(key)[0]
            self.journal_pending += 1

    def _count(self, record: rec_pb.BlobRecord, sign: int) -> None:
        """Add (``sign`` 1) or take away (-1) ``record`` in the usage tallies."""
        tallies = [(self._ns_usage, record.namespace)]
        if record.session:
            tallies.append((self._session_usage, record.session))
        for table, name in tallies:
            usage = table.setdefault(name, [0, 0])
            usage[0] += sign
            usage[1] += sign * int(record.size_bytes)
            if usage[0] <= 0:
                del table[name]

    def namespace_usage(self, namespace: str) -> tuple[int, int]:
        """(blobs, logical bytes) ``namespace`` holds."""
        usage = self._ns_usage.get(namespace)
        return (usage[0], usage[1]) if usage is not None else (0, 0)

    def session_usage(self, session: str) -> tuple[int, int]:
        """(blobs, logical bytes) ``session`` owns."""
        usage = self._session_usage.get(session)
        return (usage[0], usage[1]) if usage is not None else (0, 0)

    # -- reads ------------------------------------------------------------------------
    def blob(self, key: bytes) -> rec_pb.BlobRecord | None:
        raw = self.rocks.get(BLOBS, key)
        return None if raw is None else rec_pb.BlobRecord.FromString(raw)

    def content(self, sha256: bytes) -> rec_pb.ContentRecord | None:
        raw = self.rocks.get(CONTENTS, sha256)
        return None if raw is None else rec_pb.ContentRecord.FromString(raw)

    def inline(self, sha256: bytes) -> bytes | None:
        return self.rocks.get(INLINE, sha256)

    def scan(self, prefix: bytes, start: bytes | None) -> Iterator[tuple[bytes, rec_pb.BlobRecord]]:
        """Blob records whose key starts with ``prefix``, after ``start``, in key order."""
        for key, raw in self.rocks.scan(BLOBS, prefix, start):
            if start is not None and key <= start:
                continue
            yield key, rec_pb.BlobRecord.FromString(raw)

    def session_blobs(self, session: str) -> list[bytes]:
        prefix = session.encode() + b"\x00"
        return [key[len(prefix) :] for key, _ in self.rocks.scan(BY_SESSION, prefix)]

    def content_hashes(self) -> Iterator[bytes]:
        for key, _ in self.rocks.scan(CONTENTS):
            yield key

    # -- commits (the caller holds the service's lock) ----------------------------------
    def next_uid(self) -> int:
        self._uid += 1
        return self._uid

    def commit(
        self,
        record: rec_pb.BlobRecord,
        *,
        new_content: rec_pb.ContentRecord | None,
        inline: bytes | None = None,
        upload_id: str = "",
        sync: bool = True,
    ) -> Change:
        """Store ``record`` (replacing the key's previous record), counting one more
        reference to its content — ``new_content`` when the bytes are new, else the
        stored content (which must exist). Synced before it returns, unless
        ``sync`` is False: the caller calls ``sync()`` (e.g. once it has let go
        of the store lock). The totals and usage tallies change once the batch
        is applied, not before: a failed write (a full disk) leaves them, like
        the records, as they were; a failed sync raises with the record applied
        and counted."""
        key = blob_key(record.namespace, record.key)
        batch = self.rocks.batch()
        totals = replace(self.totals)
        old = self.blob(key)
        freed = None
        drops: list[int] = []
        if old is not None:
            drops.append(old.uid)
            if old.session:
                batch.delete(BY_SESSION, _session_key(old.session, key))
            if old.sha256 != record.sha256:
                freed = self._unref(batch, old, totals)
            totals.blobs -= 1
            totals.logical_bytes -= old.size_bytes
        if old is None or old.sha256 != record.sha256:
            content = new_content if new_content is not None else self.content(record.sha256)
            if content is None:
                raise InvariantViolation(f"content {record.sha256.hex()} of a new blob is missing")
            if new_content is not None:
                totals.contents += 1
                totals.stored_bytes += new_content.size_bytes
                if inline is not None:
                    batch.put(INLINE, record.sha256, inline)
            content.refs += 1
            content.namespace_refs[record.namespace] += 1
            batch.put(CONTENTS, record.sha256, content.SerializeToString())
        totals.blobs += 1
        totals.logical_bytes += record.size_bytes
        batch.put(BLOBS, key, record.SerializeToString())
        if record.session:
            batch.put(BY_SESSION, _session_key(record.session, key), b"")
        if upload_id:
            batch.delete(UPLOADS, upload_id.encode())
        self._journal(batch, key, drops)
        batch.put(META, UID_KEY, _U64.pack(self._uid))
        self._write(batch, totals)
        self.journal_pending += 1
        if old is not None:
            self._count(old, -1)
        self._count(record, 1)
        if sync:
            self.sync()
        return Change(old, freed)

    def delete(self, key: bytes, *, sync: bool = True) -> Change:
        """Delete a blob record, dropping its content reference. Synced unless
        ``sync`` is False (the caller calls ``sync()``: a failed sync raises with
        the delete applied, and the caller keeps what it freed until a later
        sync succeeds); the totals and tallies change once the batch is applied
        (as in ``commit``)."""
        old = self.blob(key)
        if old is None:
            return Change(None, None)
        batch = self.rocks.batch()
        totals = replace(self.totals)
        batch.delete(BLOBS, key)
        if old.session:
            batch.delete(BY_SESSION, _session_key(old.session, key))
        freed = self._unref(batch, old, totals)
        totals.blobs -= 1
        totals.logical_bytes -= old.size_bytes
        self._journal(batch, key, [old.uid])
        self._write(batch, totals)
        self.journal_pending += 1
        self._count(old, -1)
        if sync:
            self.sync()
        return Change(old, freed)

    def _unref(self, batch: Batch, old: rec_pb.BlobRecord, totals: Totals) -> Freed | None:
        """Stage dropping ``old``'s reference to its content in ``batch`` and
        ``totals`` (the catalog's once the batch is written)."""
        content = self.content(old.sha256)
        if content is None:
            raise InvariantViolation(f"content {old.sha256.hex()} of {old.key!r} is missing")
        content.refs -= 1
        ns_refs = content.namespace_refs
        ns_refs[old.namespace] -= 1
        if ns_refs[old.namespace] <= 0:
            del ns_refs[old.namespace]
        if content.refs > 0:
            batch.put(CONTENTS, old.sha256, content.SerializeToString())
            return None
        batch.delete(CONTENTS, old.sha256)
        if content.store == rec_pb.ContentRecord.INLINE:
            batch.delete(INLINE, old.sha256)
        totals.contents -= 1
        totals.stored_bytes -= content.size_bytes
        return Freed(old.sha256, content)

    def update_content(
        self, sha256: bytes, content: rec_pb.ContentRecord, inline: bytes | None = None
    ) -> None:
        """Rewrite a content record in place (damage flag, repaired payload) and,
        for content kept inline, its bytes (a repair of lost inline bytes).
        Synced."""
        batch = self.rocks.batch()
        batch.put(CONTENTS, sha256, content.SerializeToString())
        if inline is not None:
            batch.put(INLINE, sha256, inline)
        batch.commit(sync=True)

    def drop_content(self, sha256: bytes) -> None:
        """Remove a content record nothing references (start-up clean-up)."""
        content = self.content(sha256)
        if content is None or content.refs > 0:
            return
        batch = self.rocks.batch()
        totals = replace(self.totals)
        batch.delete(CONTENTS, sha256)
        batch.delete(INLINE, sha256)
        totals.contents -= 1
        totals.stored_bytes -= content.size_bytes
        self._write(batch, totals)
        self.sync()

    def _journal(self, batch: Batch, key: bytes, drops: list[int]) -> None:
        """Stage a journal entry; the caller counts it in ``journal_pending`` once
        the batch is written (a sequence number a failed write used is skipped)."""
        self._seq += 1
        entry = rec_pb.JournalEntry(blob_key=key, drop_uids=drops)
        batch.put(JOURNAL, _SEQ.pack(self._seq), entry.SerializeToString())

    def _write(self, batch: Batch, totals: Totals) -> None:
        """Apply ``batch`` with ``totals``, unsynced (``sync`` follows); once it
        is applied (not before: a failed write changes nothing), they are the
        catalog's totals."""
        batch.put(META, TOTALS_KEY, _TOTALS.pack(*astuple(totals)))
        batch.commit(sync=False)
        self.totals = totals

    def sync(self) -> None:
        """Make every change applied so far durable (syncs the catalog's WAL,
        shared with other writers' syncs)."""
        self.rocks.flush()

    # -- the search journal ---------------------------------------------------------
    def journal(self, limit: int) -> list[tuple[bytes, rec_pb.JournalEntry]]:
        out = []
        for key, raw in self.rocks.scan(JOURNAL):
            out.append((key, rec_pb.JournalEntry.FromString(raw)))
            if len(out) >= limit:
                break
        return out

    def ack(self, keys: list[bytes]) -> None:
        """The search tables took these entries (replaying one again is harmless)."""
        if not keys:
            return
        batch = self.rocks.batch()
        for key in keys:
            batch.delete(JOURNAL, key)
        batch.commit(sync=False)
        self.journal_pending -= len(keys)

    def journal_all(self) -> None:
        """Journal every blob (rebuild the search tables from the records)."""
        batch = self.rocks.batch()
        staged = 0
        for key, _raw in self.rocks.scan(BLOBS):
            self._journal(batch, key, [])
            staged += 1
            if staged == 10_000:
                batch.commit(sync=False)
                self.journal_pending += staged
                batch, staged = self.rocks.batch(), 0
        batch.commit(sync=True)
        self.journal_pending += staged

    # -- uploads ----------------------------------------------------------------------
    def put_upload(self, record: rec_pb.UploadRecord, *, sync: bool) -> None:
        batch = self.rocks.batch()
        batch.put(UPLOADS, record.upload_id.encode(), record.SerializeToString())
        batch.commit(sync=sync)

    def delete_upload(self, upload_id: str) -> None:
        batch = self.rocks.batch()
        batch.delete(UPLOADS, upload_id.encode())
        batch.commit(sync=False)

    def uploads(self) -> list[rec_pb.UploadRecord]:
        return [rec_pb.UploadRecord.FromString(raw) for _, raw in self.rocks.scan(UPLOADS)]

    # -- embedding spaces -------------------------------------------------------------
    def spaces(self) -> dict[str, int]:
        out = {}
        for _, raw in self.rocks.scan(META, SPACE_PREFIX):
            space = rec_pb.SpaceRecord.FromString(raw)
            out[space.name] = space.dimension
        return out

    def put_space(self, name: str, dimension: int) -> None:
        batch = self.rocks.batch()
        record = rec_pb.SpaceRecord(name=name, dimension=dimension)
        batch.put(META, SPACE_PREFIX + name.encode(), record.SerializeToString())
        batch.commit(sync=True)

    def drop_space(self, name: str) -> None:
        """Forget a space that no blob record names (the put that registered it
        was refused). Synced."""
        batch = self.rocks.batch()
        batch.delete(META, SPACE_PREFIX + name.encode())
        batch.commit(sync=True)


def _session_key(session: str, key: bytes) -> bytes:
    return session.encode() + b"\x00" + key
