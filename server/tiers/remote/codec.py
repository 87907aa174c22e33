"""Names and value layout of objects in the remote store.

**Names** are namespaced so daemons of one deployment share values and
unrelated deployments on the same cluster never collide::

    {deployment}/{namespace}/{kind number}/{key, percent-encoded}
    {deployment}/~{daemon id}/{namespace}/{kind number}/{key, percent-encoded}

The first is an object's *shared* name; the second the *private* name of a
value a session of that daemon owns (see "Private values"). The deployment
name and the namespace use ``[A-Za-z0-9._-]`` only (so no namespace starts
with ``~``), the daemon id ``[0-9a-f]``, and the key is percent-encoded (``/``
and ``%`` included), so a name maps back to exactly one object and one of the
two scopes. KV chunk keys already carry the model, world size, worker, dtype,
the tenant salt's tag and the chunk hash (``services/kv.py``), so two daemons
name the same chunk alike.

**Values** carry what a daemon that never saw the object needs to serve it::

    offset 0   4s   magic "TMR1"
           4   u32  metadata length M
           8   u64  payload length N
          16   u64  payload checksum (xxh3-64)
          24   u32  CRC-32 of the metadata bytes
          28   M    tiermem.v1.ObjectMeta (key, size, checksum, codec, tensor
                    dtype/shape/memory format, profile; no tier; as session
                    "" or the private marker, see below)
        28+M   N    payload (the stored bytes, as in any local tier)

A value may instead have a **head of fixed size** (magic "TMR2"): the same
header and metadata, then zeros up to ``FIXED_HEAD_BYTES``, then the payload.
A reader that must say where every byte goes before it reads any (Mooncake's
get session and ``batch_get_into_multi_buffer_ranges``) then knows from the value's length alone
where the payload starts, and lands it straight where it is wanted. Values of
at least ``FIXED_HEAD_MIN_PAYLOAD_BYTES`` are written that way on Mooncake
(``RemoteTier.pack``).

**Private values.** The store keeps no owner. An object a session owns reaches
the store only when its daemon demotes it there (sessions' objects are never
published), under its *private* name: the daemon's id (``DAEMON_ID_BYTES``
random bytes, hex, kept in its catalog: one per data directory) scopes it, so
it never replaces the shared value of the same key (KV blocks are
content-addressed: two daemons hold the same key), a delete of it never
removes that value, and another daemon, which reads and asks for shared names
only, never finds it. Its metadata names ``PRIVATE_OWNER`` as its session
(never the session's id, which no other daemon knows; no session id can be it:
ids have no NUL). The daemon that demoted it reads it back through its catalog
entry, under the private name. A value that names the marker under a shared
name (written before private names, by this version's predecessor) is treated
as absent by every daemon without a catalog entry of its own (``private``).
Values written before the marker name no session: shared, as they were. A
daemon of an older version never reads private names.

A reader checks the magic, the lengths, the metadata CRC and that the
metadata names the object asked for, then hashes the payload: bytes that do
not match their checksum are DATA_LOSS, never data.
"""

from __future__ import annotations

import dataclasses
import re
import secrets
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import quote

from tiermem.server.errors import Corrupted, InvariantViolation
from tiermem.server.model import ObjectKey, ObjectMeta, Tier
from tiermem.server.protoconv import meta_from_proto, meta_to_proto
from tiermem.v1 import common_pb2

MAGIC = b"TMR1"
#: Magic of a value whose head (header, metadata, zeros) is FIXED_HEAD_BYTES long.
MAGIC_FIXED = b"TMR2"
HEADER = struct.Struct("<4sIQQI")
#: Length of a fixed-size head (a value's metadata is a few hundred bytes).
FIXED_HEAD_BYTES = 1024
#: Smallest payload written with a fixed-size head (the zeros cost little next to it).
FIXED_HEAD_MIN_PAYLOAD_BYTES = 64 * 1024
#: Largest metadata block a value may carry (a key is at most 1 KiB).
MAX_META_BYTES = 64 * 1024
#: Session named in the metadata of a value a session owns (see "Private values").
PRIVATE_OWNER = "\x00private"
#: Characters kept as they are in the key part of a name (everything else is %XX).
_SAFE = "@-_.~:+=,!*()$"
#: Random bytes of a daemon id (hex in private names: 32 characters).
DAEMON_ID_BYTES = 16
_DAEMON_ID = re.compile(f"[0-9a-f]{{{2 * DAEMON_ID_BYTES}}}")


def remote_name(deployment: str, key: ObjectKey, daemon: str = "") -> str:
    """The object's name in the remote store: its shared name, or with
    ``daemon`` (a daemon id, ``new_daemon_id``) the private name of a value a
    session of that daemon owns (see "Names")."""
    name = f"{key.namespace}/{int(key.kind)}/{quote(key.key, safe=_SAFE)}"
    if not daemon:
        return f"{deployment}/{name}"
    if not _DAEMON_ID.fullmatch(daemon):
        raise InvariantViolation(f"daemon id {daemon!r} is not {DAEMON_ID_BYTES} bytes in hex")
    return f"{deployment}/~{daemon}/{name}"


def new_daemon_id() -> str:
    """A fresh daemon id (random: ids of daemons sharing a deployment differ)."""
    return secrets.token_hex(DAEMON_ID_BYTES)


def valid_daemon_id(daemon: str) -> bool:
    return _DAEMON_ID.fullmatch(daemon) is not None


def encode_header(meta: ObjectMeta, fixed: bool = False) -> bytes:
    """Header plus metadata that precede the payload of ``meta``'s object;
    ``fixed``: padded to FIXED_HEAD_BYTES (magic TMR2) when the metadata fits.
    A ``meta`` that names a session is written private (``PRIVATE_OWNER``):
    callers clear the session of an object a plain owner tag owns, which is
    shared like an unowned one."""
    owner = PRIVATE_OWNER if meta.session else ""
    shared = dataclasses.replace(meta, session=owner, tier=Tier.REMOTE, persisted=False)
    body = meta_to_proto(shared).SerializeToString()
    if fixed and HEADER.size + len(body) <= FIXED_HEAD_BYTES:
        head = HEADER.pack(MAGIC_FIXED, len(body), meta.size_bytes, meta.checksum, zlib.crc32(body))
        return (head + body).ljust(FIXED_HEAD_BYTES, b"\0")
    return HEADER.pack(MAGIC, len(body), meta.size_bytes, meta.checksum, zlib.crc32(body)) + body


def _head_of(magic: bytes, meta_len: int) -> int:
    """Length of the head a value's magic and metadata length announce (-1: neither)."""
    if magic == MAGIC and meta_len <= MAX_META_BYTES:
        return HEADER.size + meta_len
    if magic == MAGIC_FIXED and HEADER.size + meta_len <= FIXED_HEAD_BYTES:
        return FIXED_HEAD_BYTES
    return -1


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
    head = _head_of(magic, meta_len)
    return head if head >= 0 and head + size == value_len else -1


def decode_head(head: memoryview, value_len: int, key: ObjectKey, name: str) -> ObjectMeta:
    """The metadata of a ``value_len``-byte value read under ``name`` from its
    first bytes ``head`` (at least the header and the metadata). Raises
    Corrupted when the layout is broken or the value belongs to another object.
    The payload's checksum is not verified here (see ``RemoteTier``)."""
    if len(head) < HEADER.size:
        raise Corrupted(f"remote value {name!r} is {len(head)} bytes, shorter than its header")
    magic, meta_len, size, checksum, crc = HEADER.unpack_from(head)
    if magic not in (MAGIC, MAGIC_FIXED):
        raise Corrupted(f"remote value {name!r} does not start with a tiermem header")
    length = _head_of(magic, meta_len)
    if length < 0 or length + size != value_len or len(head) < HEADER.size + meta_len:
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
    if meta.session:
        meta.session = PRIVATE_OWNER
    return meta


def private(meta: ObjectMeta) -> bool:
    """Whether a value read back (``meta`` from ``decode_head``) belongs to a
    session of the daemon that wrote it: absent for any daemon without a
    catalog entry for it (see "Private values")."""
    return meta.session == PRIVATE_OWNER


def decode(raw: memoryview, key: ObjectKey, name: str) -> tuple[ObjectMeta, memoryview]:
    """Metadata and payload view of a value read under ``name`` (see
    ``decode_head``: raises Corrupted the same way; the payload's checksum is
    not verified here)."""
    meta = decode_head(raw, len(raw), key, name)
    return meta, raw[len(raw) - meta.size_bytes :]
