"""On-disk encoding of catalog records (column family "objects").

A record is a fixed-width little-endian header followed by the object's
``tiermem.v1.ObjectMeta`` protobuf::

    offset  0  u8   version            offset 12  u64  segment offset
            1  u8   kind                      20  u64  size bytes
            2  u8   flags                     28  u64  checksum (xxh3-64)
            3  u8   reserved                  36  u64  expires unix ms
            4  u16  namespace id              44  ...  ObjectMeta protobuf
            6  u16  reserved
            8  i32  segment (-1 inline, -2 none)
      44 bytes, numpy dtype RECORD_DTYPE

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

from tiermem.server.catalog.index import FLAG_DURABLE, FLAG_PINNED, SEG_NONE
from tiermem.server.errors import Corrupted
from tiermem.server.model import Durability, ObjectMeta
from tiermem.server.protoconv import meta_to_proto
from tiermem.v1 import common_pb2

VERSION = 1
#: Header flag: the object has a copy on SSD (records without one are volatile).
FLAG_ON_SSD = 8

HEADER = struct.Struct("<BBBBHHiQQQQ")
RECORD_DTYPE = np.dtype(
    [
        ("version", "u1"),
        ("kind", "u1"),
        ("flags", "u1"),
        ("rsvd0", "u1"),
        ("ns", "<u2"),
        ("rsvd1", "<u2"),
        ("seg", "<i4"),
        ("seg_off", "<u8"),
        ("size", "<u8"),
        ("checksum", "<u8"),
        ("expires", "<u8"),
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


def encode(meta: ObjectMeta, ns_id: int, seg: int, seg_off: int) -> bytes:
    flags = 0
    if meta.profile.durability == Durability.DURABLE:
        flags |= FLAG_DURABLE
    if meta.profile.pin:
        flags |= FLAG_PINNED
    if seg != SEG_NONE:
        flags |= FLAG_ON_SSD
    header = HEADER.pack(
        VERSION,
        int(meta.key.kind),
        flags,
        0,
        ns_id,
        0,
        seg,
        seg_off if seg != SEG_NONE else 0,
        meta.size_bytes,
        meta.checksum,
        meta.expires_unix_ms,
    )
    return header + meta_to_proto(meta).SerializeToString()


def decode(raw: bytes) -> StoredRecord:
    if len(raw) < HEADER.size or raw[0] != VERSION:
        raise Corrupted(f"catalog record of {len(raw)} bytes has an unknown format")
    _v, _kind, flags, _r0, _ns, _r1, seg, seg_off, _size, _sum, _exp = HEADER.unpack_from(raw)
    meta = common_pb2.ObjectMeta()
    meta.ParseFromString(raw[HEADER.size :])
    return StoredRecord(meta, flags, seg, seg_off)


def with_ssd_location(raw: bytes, seg: int, seg_off: int) -> bytes:
    """The same record pointing at a new SSD copy (demotion, compaction)."""
    out = bytearray(raw)
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
    blob = b"".join(raw[: HEADER.size] for raw in raws)
    return np.frombuffer(blob, dtype=RECORD_DTYPE)
