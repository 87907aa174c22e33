"""Names and value layout of objects in the remote store.

**Names** are namespaced so daemons of one deployment share values and
unrelated deployments on the same cluster never collide::

    {deployment}/{namespace}/{kind number}/{key, percent-encoded}

The deployment name and the namespace use ``[A-Za-z0-9._-]`` only, and the key
is percent-encoded (``/`` and ``%`` included), so a name maps back to exactly
one object. KV chunk keys already carry the model, world size, worker, dtype,
the tenant salt's tag and the chunk hash (``services/kv.py``), so two daemons
name the same chunk alike.

**Values** carry what a daemon that never saw the object needs to serve it::

    offset 0   4s   magic "TMR1"
           4   u32  metadata length M
           8   u64  payload length N
          16   u64  payload checksum (xxh3-64)
          24   u32  CRC-32 of the metadata bytes
          28   M    tiermem.v1.ObjectMeta (key, size, checksum, codec, tensor
                    dtype/shape/memory format, profile; no session, no tier)
        28+M   N    payload (the stored bytes, as in any local tier)

A reader checks the magic, the lengths, the metadata CRC and that the
metadata names the object asked for, then hashes the payload: bytes that do
not match their checksum are DATA_LOSS, never data.
"""

from __future__ import annotations

import dataclasses
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import quote

from tiermem.server.errors import Corrupted
from tiermem.server.model import ObjectKey, ObjectMeta, Tier
from tiermem.server.protoconv import meta_from_proto, meta_to_proto
from tiermem.v1 import common_pb2

MAGIC = b"TMR1"
HEADER = struct.Struct("<4sIQQI")
#: Largest metadata block a value may carry (a key is at most 1 KiB).
MAX_META_BYTES = 64 * 1024
#: Characters kept as they are in the key part of a name (everything else is %XX).
_SAFE = "@-_.~:+=,!*()$"


def remote_name(deployment: str, key: ObjectKey) -> str:
    """The object's name in the remote store."""
    return f"{deployment}/{key.namespace}/{int(key.kind)}/{quote(key.key, safe=_SAFE)}"


def encode_header(meta: ObjectMeta) -> bytes:
    """Header plus metadata that precede the payload of ``meta``'s object."""
    shared = dataclasses.replace(meta, session="", tier=Tier.REMOTE, persisted=False)
    body = meta_to_proto(shared).SerializeToString()
    return HEADER.pack(MAGIC, len(body), meta.size_bytes, meta.checksum, zlib.crc32(body)) + body


@dataclass(slots=True)
class RemoteValue:
    """A value read back from the remote store: its metadata and a view of its
    payload. ``release`` frees the buffer the view points into (a Mooncake
    buffer handle); call it once the view is no longer used."""

    meta: ObjectMeta
    payload: memoryview
    release: Callable[[], None] = field(default=lambda: None)


def head_length(fixed: memoryview, value_len: int) -> int:
    """Length of the header plus metadata of a ``value_len``-byte value whose
    first ``HEADER.size`` bytes are ``fixed``; -1 when they are not a header
    that fits the value (``decode_head`` then says what is wrong)."""
    magic, meta_len, size, _checksum, _crc = HEADER.unpack_from(fixed)
    if magic != MAGIC or meta_len > MAX_META_BYTES or HEADER.size + meta_len + size != value_len:
        return -1
    return HEADER.size + int(meta_len)


def decode_head(head: memoryview, value_len: int, key: ObjectKey, name: str) -> ObjectMeta:
    """The metadata of a ``value_len``-byte value read under ``name`` from its
    first bytes ``head`` (at least the header and the metadata). Raises
    Corrupted when the layout is broken or the value belongs to another object.
    The payload's checksum is not verified here (see ``RemoteTier``)."""
    if len(head) < HEADER.size:
        raise Corrupted(f"remote value {name!r} is {len(head)} bytes, shorter than its header")
    magic, meta_len, size, checksum, crc = HEADER.unpack_from(head)
    if magic != MAGIC:
        raise Corrupted(f"remote value {name!r} does not start with a tiermem header")
    if (
        meta_len > MAX_META_BYTES
        or HEADER.size + meta_len + size != value_len
        or len(head) < HEADER.size + meta_len
    ):
        raise Corrupted(
            f"remote value {name!r} is {value_len} bytes but its header announces "
            f"{meta_len} bytes of metadata and {size} of payload"
        )
    body = head[HEADER.size : HEADER.size + meta_len]
    if zlib.crc32(body) != crc:
        raise Corrupted(f"the metadata of remote value {name!r} fails its CRC")
    msg = common_pb2.ObjectMeta()
    try:
        msg.ParseFromString(bytes(body))
        meta = meta_from_proto(msg)
    except Exception as exc:  # a damaged protobuf or an unknown enum value
        raise Corrupted(f"the metadata of remote value {name!r} does not parse: {exc}") from None
    if meta.key != key or meta.size_bytes != size or meta.checksum != checksum:
        raise Corrupted(f"remote value {name!r} describes another object ({meta.key})")
    meta.tier = Tier.REMOTE
    return meta


def decode(raw: memoryview, key: ObjectKey, name: str) -> tuple[ObjectMeta, memoryview]:
    """Metadata and payload view of a value read under ``name`` (see
    ``decode_head``: raises Corrupted the same way; the payload's checksum is
    not verified here)."""
    meta = decode_head(raw, len(raw), key, name)
    return meta, raw[len(raw) - meta.size_bytes :]
