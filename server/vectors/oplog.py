"""Durable state of vector collections in the shared RocksDB.

```
 vec_collections   namespace NUL name            -> CollectionRecord
 vec_log           id u64 BE | seq u64 BE        -> VectorLogEntry   (one per acknowledged batch)
 vec_payloads      id u64 BE | vector id u64 BE  -> VectorPayload    (current payload per vector)
 meta              b"vectors.next_collection_id" -> u64 BE
```

An upsert or delete is one write batch (log entry + payload puts/deletes),
synced before the call returns when ``fsync``: acknowledged means in the WAL.
A snapshot switch is one batch too: the record now names the new snapshot
and the log up to its seq is range-deleted.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence

from tiermem.server.errors import InvariantViolation
from tiermem.server.storage.rocks import RocksStore
from tiermem.v1 import vector_records_pb2 as records
from tiermem.v1 import vectors_pb2

CF_COLLECTIONS = "vec_collections"
CF_LOG = "vec_log"
CF_PAYLOADS = "vec_payloads"
NEXT_ID_KEY = b"vectors.next_collection_id"

_U64 = struct.Struct(">Q")
_U64x2 = struct.Struct(">QQ")


def record_key(namespace: str, name: str) -> bytes:
    return namespace.encode() + b"\x00" + name.encode()


def log_key(cid: int, seq: int) -> bytes:
    return _U64x2.pack(cid, seq)


def payload_key(cid: int, vid: int) -> bytes:
    return _U64x2.pack(cid, vid)


class VectorStore:
    def __init__(self, rocks: RocksStore, fsync: bool) -> None:
        self.rocks = rocks
        self.fsync = fsync

    # -- collections -------------------------------------------------------------
    def collection_records(self) -> Iterator[records.CollectionRecord]:
        for _key, value in self.rocks.scan(CF_COLLECTIONS):
            rec = records.CollectionRecord()
            rec.ParseFromString(bytes(value))
            yield rec

    def record(self, namespace: str, name: str) -> records.CollectionRecord | None:
        raw = self.rocks.get(CF_COLLECTIONS, record_key(namespace, name))
        if raw is None:
            return None
        rec = records.CollectionRecord()
        rec.ParseFromString(bytes(raw))
        return rec

    def allocate_id(self) -> int:
        """A new collection id (call under the service's registry lock)."""
        raw = self.rocks.get("meta", NEXT_ID_KEY)
        cid = _U64.unpack(raw)[0] if raw else 1
        batch = self.rocks.batch()
        batch.put("meta", NEXT_ID_KEY, _U64.pack(cid + 1))
        batch.commit(sync=self.fsync)
        return cid

    def put_record(self, rec: records.CollectionRecord, trim_log_to: int = 0) -> None:
        """Write the record; with ``trim_log_to``, drop log entries up to that seq
        in the same atomic batch (a snapshot covering them is in charge)."""
        batch = self.rocks.batch()
        batch.put(CF_COLLECTIONS, record_key(rec.namespace, rec.name), rec.SerializeToString())
        if trim_log_to:
            batch.delete_range(CF_LOG, log_key(rec.id, 0), log_key(rec.id, trim_log_to + 1))
        batch.commit(sync=self.fsync)

    def drop(self, rec: records.CollectionRecord) -> None:
        """Remove the record, its whole log and payloads (one atomic batch)."""
        batch = self.rocks.batch()
        batch.delete(CF_COLLECTIONS, record_key(rec.namespace, rec.name))
        batch.delete_range(CF_LOG, log_key(rec.id, 0), log_key(rec.id + 1, 0))
        batch.delete_range(CF_PAYLOADS, payload_key(rec.id, 0), payload_key(rec.id + 1, 0))
        batch.commit(sync=self.fsync)

    # -- operations --------------------------------------------------------------
    def append(
        self,
        cid: int,
        seq: int,
        entry: records.VectorLogEntry,
        payloads: Sequence[tuple[int, bytes | None]] = (),
    ) -> None:
        """Log one operation and set (bytes) or clear (None) payloads, durably."""
        batch = self.rocks.batch()
        batch.put(CF_LOG, log_key(cid, seq), entry.SerializeToString())
        for vid, payload in payloads:
            if payload is None:
                batch.delete(CF_PAYLOADS, payload_key(cid, vid))
            else:
                batch.put(CF_PAYLOADS, payload_key(cid, vid), payload)
        batch.commit(sync=self.fsync)

    def entries(self, cid: int, after_seq: int) -> Iterator[tuple[int, records.VectorLogEntry]]:
        """Logged operations of collection ``cid`` with seq > ``after_seq``, in order."""
        prefix = _U64.pack(cid)
        for key, value in self.rocks.scan(CF_LOG, prefix, start=log_key(cid, after_seq + 1)):
            seq = _U64x2.unpack(bytes(key))[1]
            entry = records.VectorLogEntry()
            entry.ParseFromString(bytes(value))
            yield seq, entry

    def payloads(self, cid: int, vids: Sequence[int]) -> list[bytes | None]:
        """Stored payloads of vectors (None where there is none)."""
        if not vids:
            return []
        cf = self.rocks.cf(CF_PAYLOADS)
        values = cf[[payload_key(cid, v) for v in vids]]
        if not isinstance(values, list):
            raise InvariantViolation(f"RocksDB multi-get returned {type(values).__name__}")
        return [None if v is None else bytes(v) for v in values]


def empty_payload() -> bytes:
    return vectors_pb2.VectorPayload().SerializeToString()
