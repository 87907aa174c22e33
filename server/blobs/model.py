"""Blob domain types, request validation and record conversions.

Limits (``BlobsConfig``): key 1..1024 bytes UTF-8 without NUL (as object
keys); size up to ``max_blob_bytes``; media type ``type/subtype`` (lower-cased,
at most 255 bytes); at most ``max_tags`` tags of ``max_tag_bytes`` each; at most
``max_embeddings`` embeddings, one per space, of 1..``max_dimension`` finite
float32 values; session ids as elsewhere (256 bytes).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from tiermem.server.blobs.blocks import AlignedRange
from tiermem.server.blobs.hashing import SHA256_BYTES
from tiermem.server.blobs.index import SPACE_RE
from tiermem.server.config import BlobsConfig
from tiermem.server.errors import CapacityExceeded, InvalidArgument
from tiermem.server.model import Kind, ObjectKey, validate_session
from tiermem.v1 import blob_records_pb2 as rec_pb
from tiermem.v1 import blobs_pb2

DEFAULT_MEDIA_TYPE = "application/octet-stream"
DEFAULT_SPACE = "default"
_TOKEN = r"[a-z0-9!#$&^_.+-]{1,127}"
_MEDIA_RE = re.compile(rf"^{_TOKEN}/{_TOKEN}$")
_TEXT_TYPES = ("application/json", "application/xml", "application/x-ndjson", "application/yaml")

Vector = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class BlobSpec:
    """What a client announces about a blob before (or with) its bytes."""

    namespace: str
    key: str
    size_bytes: int
    media_type: str = DEFAULT_MEDIA_TYPE
    tags: tuple[str, ...] = ()
    embeddings: tuple[tuple[str, Vector], ...] = ()
    session: str = ""
    sha256: bytes = b""  # the client's hash, if known up front
    if_absent: bool = False
    skip_text_embedding: bool = False

    @property
    def is_text(self) -> bool:
        return is_text(self.media_type)


def is_text(media_type: str) -> bool:
    return (
        media_type.startswith("text/")
        or media_type in _TEXT_TYPES
        or (media_type.startswith("application/") and media_type.endswith(("+json", "+xml")))
    )


@dataclass(frozen=True, slots=True)
class BlobInfo:
    namespace: str
    key: str
    size_bytes: int
    sha256: bytes
    media_type: str
    tags: tuple[str, ...]
    session: str
    created_unix_ms: int
    spaces: tuple[str, ...]
    block_bytes: int
    content_refs: int = 0
    cached: bool = False
    version: int = 1


@dataclass(frozen=True, slots=True)
class Filter:
    media_type: str = ""
    tags_all: tuple[str, ...] = ()
    tags_any: tuple[str, ...] = ()
    session: str = ""
    key_prefix: str = ""

    def matches(self, rec: rec_pb.BlobRecord) -> bool:
        if self.media_type:
            if self.media_type.endswith("/*"):
                if not rec.media_type.startswith(self.media_type[:-1]):
                    return False
            elif rec.media_type != self.media_type:
                return False
        tags = set(rec.tags)
        if self.tags_all and not tags.issuperset(self.tags_all):
            return False
        if self.tags_any and tags.isdisjoint(self.tags_any):
            return False
        return not self.session or rec.session == self.session


@dataclass(frozen=True, slots=True)
class ShmGrant:
    lease_id: int
    arena_id: str
    offset: int
    length: int
    ttl_ms: int
    range_offset: int = 0  # byte of the blob the region starts at


@dataclass(frozen=True, slots=True)
class LocalFile:
    """A streamed download's answer for a client on this host that may read the
    payload file itself (``BlobService.download`` with "file" in its paths)."""

    path: str
    device: int
    inode: int
    size_bytes: int


@dataclass(frozen=True, slots=True)
class UploadRing:
    """A same-host upload's ring of slots in the arena (``BlobService.shm_upload``):
    slot ``i`` is ``[grant.offset + i * slot_bytes, ... + slot_bytes)``."""

    grant: ShmGrant
    slots: int
    slot_bytes: int


@dataclass(frozen=True, slots=True)
class StreamGrant:
    """OpenDownload's answer for a long range not in memory: read it with a
    streamed Download through shared memory (``BlobService.download``)."""


@dataclass(slots=True)
class DownloadPlan:
    """A read: the blob, the aligned range and its block checksums."""

    info: BlobInfo
    range: AlignedRange
    block_bytes: int
    sums: bytes  # of the blocks of the aligned range
    # bytes (inline), ShmGrant, a bulk Ticket, StreamGrant, or None
    grant: object = field(default=None)
    # with a ShmGrant on an extent still being filled: the verified prefix as it grows
    filled: Iterator[int] | None = None


# -- validation ---------------------------------------------------------------------------
def checked_key(namespace: str, key: str) -> ObjectKey:
    """(namespace, key) with the object-key rules; raises InvalidArgument."""
    return ObjectKey.checked(namespace, int(Kind.BLOB), key)


def media_type(value: str) -> str:
    value = value.strip().lower() or DEFAULT_MEDIA_TYPE
    if len(value) > 255 or not _MEDIA_RE.match(value):
        raise InvalidArgument(
            f"media type {value[:64]!r} is not type/subtype (e.g. image/png, text/plain)"
        )
    return value


def media_filter(value: str) -> str:
    """A media-type filter: "", "type/subtype" or "type/*"."""
    if not value:
        return ""
    if value.endswith("/*"):
        media_type(value[:-1] + "x")  # the family must be a valid type
        return value.lower()
    return media_type(value)


def tags(
    values: list[str] | tuple[str, ...], config: BlobsConfig, what: str = "tags"
) -> tuple[str, ...]:
    out: list[str] = []
    for tag in values:
        raw = tag.encode()
        if not raw or len(raw) > config.max_tag_bytes or "\x00" in tag:
            raise InvalidArgument(
                f"{what}: {tag[:64]!r} is not a tag (1..{config.max_tag_bytes} bytes, no NUL)"
            )
        if tag not in out:
            out.append(tag)
    if len(out) > config.max_tags:
        raise InvalidArgument(f"{len(out)} {what}; the limit is {config.max_tags} (blobs.max_tags)")
    return tuple(out)


def space_name(value: str) -> str:
    name = value or DEFAULT_SPACE
    if not SPACE_RE.fullmatch(name):
        raise InvalidArgument(
            f"embedding space {name[:80]!r} is invalid: use 1..64 of A-Z a-z 0-9 _ . -"
        )
    return name


def vector(values: object, config: BlobsConfig, what: str) -> Vector:
    arr = np.asarray(values, dtype=np.float32).reshape(-1)
    if arr.size == 0 or arr.size > config.max_dimension:
        raise InvalidArgument(
            f"{what} has {arr.size} values; use 1..{config.max_dimension} (blobs.max_dimension)"
        )
    if not np.isfinite(arr).all():
        raise InvalidArgument(f"{what} has NaN or infinite values")
    return arr


def checked_spec(spec: BlobSpec, config: BlobsConfig) -> BlobSpec:
    """The spec with defaults filled in and every limit checked."""
    checked_key(spec.namespace, spec.key)
    limit = int(config.max_blob_bytes)
    if spec.size_bytes < 0:
        raise InvalidArgument(f"blob size_bytes is {spec.size_bytes}; it cannot be negative")
    if spec.size_bytes > limit:
        raise CapacityExceeded(
            f"blob is {spec.size_bytes} bytes; the limit is {limit} (blobs.max_blob_bytes)"
        )
    validate_session(spec.session)
    if spec.sha256 and len(spec.sha256) != SHA256_BYTES:
        raise InvalidArgument(f"sha256 must be {SHA256_BYTES} bytes, got {len(spec.sha256)}")
    if len(spec.embeddings) > config.max_embeddings:
        raise InvalidArgument(
            f"{len(spec.embeddings)} embeddings; the limit is {config.max_embeddings} "
            "(blobs.max_embeddings)"
        )
    embeddings: list[tuple[str, Vector]] = []
    for space, values in spec.embeddings:
        name = space_name(space)
        if any(name == s for s, _ in embeddings):
            raise InvalidArgument(f"two embeddings in space {name!r}; one per space")
        embeddings.append((name, vector(values, config, f"embedding in space {name!r}")))
    return BlobSpec(
        spec.namespace,
        spec.key,
        spec.size_bytes,
        media_type(spec.media_type),
        tags(spec.tags, config),
        tuple(embeddings),
        spec.session,
        spec.sha256,
        spec.if_absent,
        spec.skip_text_embedding,
    )


# -- conversions (the upload record keeps the spec as the wire header) ---------------------
def spec_from_proto(msg: blobs_pb2.BeginUploadRequest) -> BlobSpec:
    return BlobSpec(
        namespace=msg.ref.namespace,
        key=msg.ref.key,
        size_bytes=int(msg.size_bytes),
        media_type=msg.media_type,
        tags=tuple(msg.tags),
        embeddings=tuple((e.space, np.asarray(e.values, dtype=np.float32)) for e in msg.embeddings),
        session=msg.session,
        sha256=bytes(msg.sha256),
        if_absent=msg.if_absent,
        skip_text_embedding=msg.skip_text_embedding,
    )


def spec_to_proto(spec: BlobSpec) -> blobs_pb2.BeginUploadRequest:
    return blobs_pb2.BeginUploadRequest(
        ref=blobs_pb2.BlobRef(namespace=spec.namespace, key=spec.key),
        size_bytes=spec.size_bytes,
        media_type=spec.media_type,
        tags=list(spec.tags),
        embeddings=[blobs_pb2.Embedding(space=s, values=v.tolist()) for s, v in spec.embeddings],
        session=spec.session,
        sha256=spec.sha256,
        if_absent=spec.if_absent,
        skip_text_embedding=spec.skip_text_embedding,
    )


def info_from_record(
    rec: rec_pb.BlobRecord, block_bytes: int, refs: int = 0, cached: bool = False
) -> BlobInfo:
    return BlobInfo(
        namespace=rec.namespace,
        key=rec.key,
        size_bytes=int(rec.size_bytes),
        sha256=bytes(rec.sha256),
        media_type=rec.media_type,
        tags=tuple(rec.tags),
        session=rec.session,
        created_unix_ms=int(rec.created_unix_ms),
        spaces=tuple(e.space for e in rec.embeddings),
        block_bytes=block_bytes,
        content_refs=refs,
        cached=cached,
        version=int(rec.version),
    )
