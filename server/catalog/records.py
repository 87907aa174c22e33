"""On-disk encoding of catalog records (column family "objects").

A record is a fixed-width little-endian header followed by the object's
``tiermem.v1.ObjectMeta`` protobuf::

    offset  0  u8   version            offset 12  u64  segment offset
            1  u8   kind                      20  u64  size bytes
            2  u8   flags                     28  u64  checksum (xxh3-64)
            3  u8   access hint               36  u64  expires unix ms
            4  u16  namespace id              44  u64  key hash, high half
            6  u16  encoded key length        52  u64  key hash, low half
            8  i32  segment (-1 inline,       60  ...  ObjectMeta protobuf
                    -2 none)

The header holds everything start-up recovery needs, so recovery decodes a
million headers as one numpy array instead of parsing a million protobufs; the
protobuf (profile, tensor info, session, version ...) is parsed only when a
request needs the full metadata.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from tiermem.server.catalog.index import FLAG_DURABLE, FLAG_PINNED, SEG_NONE, key_hash
from tiermem.server.errors import Corrupted
from tiermem.server.model import Durability, Kind, ObjectKey, ObjectMeta
from tiermem.server.protoconv import meta_to_proto
from tiermem.v1 import common_pb2

#: Version 2 hashes canonical KV block keys with ``index.kv_chain_halves``;
#: version 1 (readable) hashed every key with xxh3-128, so recovery rehashes
#: version-1 KV records (``needs_rehash``).
VERSION = 2
READABLE_VERSIONS = frozenset({1, 2})
#: Header flag: the object has a copy on SSD (records without one are volatile).
FLAG_ON_SSD = 8
#: Header flag: the object is owned by a session (recovery parses only these).
FLAG_HAS_SESSION = 16

HEADER = struct.Struct("<BBBBHHiQQQQQQ")
RECORD_DTYPE = np.dtype(
    [
        ("version", "u1"),
        ("kind", "u1"),
        ("flags", "u1"),
        ("hint", "u1"),
        ("ns", "<u2"),
        ("key_len", "<u2"),
        ("seg", "<i4"),
        ("seg_off", "<u8"),
        ("size", "<u8"),
        ("checksum", "<u8"),
        ("expires", "<u8"),
        ("key_hi", "<u8"),
        ("key_lo", "<u8"),
    ]
)
if RECORD_DTYPE.itemsize != HEADER.size:  # pragma: no cover - layout guard
    raise ImportError("record header dtype and struct disagree")

_FLAGS_OFFSET = 2
_SEG_OFFSET = 8  # i32 segment then u64 offset


@dataclass(slots=True)
class StoredRecord:
    """A decoded record: header fields plus the parsed metadata."""

    meta: common_pb2.ObjectMeta
    flags: int
    seg: int
    seg_off: int

    @property
    def on_ssd(self) -> bool:
        return bool(self.flags & FLAG_ON_SSD)


def encode(
    meta: ObjectMeta,
    encoded_key: bytes,
    ns_id: int,
    seg: int,
    seg_off: int,
    wire: common_pb2.ObjectMeta | None = None,
) -> bytes:
    """The record of ``meta``; ``wire``: ``meta`` already converted to its message."""
    flags = 0
    if meta.profile.durability == Durability.DURABLE:
        flags |= FLAG_DURABLE
    if meta.profile.pin:
        flags |= FLAG_PINNED
    if seg != SEG_NONE:
        flags |= FLAG_ON_SSD
    if meta.session:
        flags |= FLAG_HAS_SESSION
    hi, lo = key_hash(encoded_key)
    header = HEADER.pack(
        VERSION,
        int(meta.key.kind),
        flags,
        int(meta.profile.hint),
        ns_id,
        len(encoded_key),
        seg,
        seg_off if seg != SEG_NONE else 0,
        meta.size_bytes,
        meta.checksum,
        meta.expires_unix_ms,
        hi,
        lo,
    )
    return header + (meta_to_proto(meta) if wire is None else wire).SerializeToString()


def decode(raw: bytes) -> StoredRecord:
    if len(raw) < HEADER.size or raw[0] not in READABLE_VERSIONS:
        raise Corrupted(f"catalog record of {len(raw)} bytes has an unknown format")
    fields = HEADER.unpack_from(raw)
    flags, seg, seg_off = fields[2], fields[6], fields[7]
    meta = common_pb2.ObjectMeta()
    meta.ParseFromString(raw[HEADER.size :])
    return StoredRecord(meta, flags, seg, seg_off)


def with_ssd_location(raw: bytes, seg: int, seg_off: int) -> bytes:
    """The same record pointing at a new SSD copy (demotion, compaction), or at
    none (``SEG_NONE``: the copy was released; recovery purges the record)."""
    out = bytearray(raw)
    if seg == SEG_NONE:
        out[_FLAGS_OFFSET] &= ~FLAG_ON_SSD & 0xFF
        seg_off = 0
    else:
        out[_FLAGS_OFFSET] |= FLAG_ON_SSD
    struct.pack_into("<iQ", out, _SEG_OFFSET, seg, seg_off)
    return bytes(out)


def with_pinned(raw: bytes, pinned: bool) -> bytes:
    out = bytearray(raw)
    if pinned:
        out[_FLAGS_OFFSET] |= FLAG_PINNED
    else:
        out[_FLAGS_OFFSET] &= ~FLAG_PINNED & 0xFF
    return bytes(out)


def headers(raws: list[bytes]) -> np.ndarray[Any, np.dtype[np.void]]:
    """Decode many record headers at once into a RECORD_DTYPE array."""
    size = HEADER.size
    blob = b"".join([raw[:size] for raw in raws])
    return np.frombuffer(blob, dtype=RECORD_DTYPE)


def encoded_key_of(rec: StoredRecord) -> bytes:
    """The catalog key of a record (for the rare paths that only have the value)."""
    k = rec.meta.key
    return ObjectKey(k.namespace, Kind(k.kind), k.key).encode()
