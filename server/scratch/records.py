"""Scratchpad records, their on-disk encoding and the batch codecs."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np
import numpy.typing as npt

from tiermem.server.errors import CapacityExceeded, Corrupted, InvalidArgument
from tiermem.v1 import agent_records_pb2 as agent_pb2


class RecordKind(IntEnum):
    OBSERVATION = 1
    THOUGHT = 2
    TOOL_CALL = 3
    DECISION = 4
    RESULT = 5


class RecordDurability(IntEnum):
    BUFFERED = 1
    LOGGED = 2
    SYNC = 3


#: Bytes a record costs beyond its payload, key and tags (id, times, framing).
RECORD_OVERHEAD_BYTES = 48
MAX_TAG_BYTES = 256
#: Tags starting with this are the daemon's: ``child:<id>`` marks the result
#: record a closing child hands its parent (``child_result_tag``), and start-up
#: recovery of an interrupted close finds that record by it, so client appends
#: may not use it (``check_client_tags``).
CHILD_RESULT_TAG_PREFIX = "child:"
MAX_KEY_BYTES = 1024


@dataclass(slots=True)
class Record:
    id: int
    session: str
    ts_ms: int
    kind: int
    key: str
    payload: bytes
    tags: tuple[str, ...]
    key_node: bool
    durability: RecordDurability = RecordDurability.LOGGED
    flushed: bool = False  # True once written back to RocksDB
    #: DRAM the record holds in the buffer (an estimate used for limits).
    size: int = field(default=0, compare=False)

    def __post_init__(self) -> None:
        self.size = RECORD_OVERHEAD_BYTES + len(self.payload) + len(self.key)
        for tag in self.tags:
            self.size += len(tag)

    def text(self) -> str:
        """What the memory index embeds."""
        return self.payload.decode("utf-8", "replace")


def validate_record(
    kind: int, key: str, payload: bytes, tags: tuple[str, ...], max_payload: int, max_tags: int
) -> None:
    if kind not in RecordKind._value2member_map_:
        raise InvalidArgument(
            f"record kind {kind} is unknown: use OBSERVATION, THOUGHT, TOOL_CALL, DECISION "
            "or RESULT"
        )
    if len(payload) > max_payload:
        raise CapacityExceeded(
            f"record payload is {len(payload)} bytes; the limit is {max_payload} "
            "(agent.scratch.max_record_bytes): store large values as objects"
        )
    if len(tags) > max_tags:
        raise InvalidArgument(f"record has {len(tags)} tags; the limit is {max_tags}")
    for tag in tags:
        if not tag or len(tag.encode()) > MAX_TAG_BYTES or "\x00" in tag:
            raise InvalidArgument(f"tag {tag[:40]!r} must be 1..{MAX_TAG_BYTES} bytes without NUL")
    if len(key.encode()) > MAX_KEY_BYTES or "\x00" in key:
        raise InvalidArgument(f"record key must be at most {MAX_KEY_BYTES} bytes without NUL")


def child_result_tag(child: str) -> str:
    """The tag of the result record session ``child``'s close adds to its parent."""
    return CHILD_RESULT_TAG_PREFIX + child


def check_client_tags(tags: tuple[str, ...]) -> None:
    """Refuse a client's record tagged as a child's result (reserved for the daemon)."""
    for tag in tags:
        if tag.startswith(CHILD_RESULT_TAG_PREFIX):
            raise InvalidArgument(
                f"tag {tag[:40]!r}: tags starting with {CHILD_RESULT_TAG_PREFIX!r} are reserved "
                "for the daemon (they mark a closed child's result record); choose another tag"
            )


def to_stored(r: Record, vector: bytes = b"") -> agent_pb2.StoredRecord:
    """The record as logged (no vector) or stored (``vector``: float16 bytes)."""
    return agent_pb2.StoredRecord(
        id=r.id,
        session=r.session,
        ts_unix_ms=r.ts_ms,
        kind=r.kind,
        key=r.key,
        payload=r.payload,
        tags=r.tags,
        key_node=r.key_node,
        vector=vector,
    )


def from_stored(msg: agent_pb2.StoredRecord) -> Record:
    return Record(
        id=int(msg.id),
        session=msg.session,
        ts_ms=int(msg.ts_unix_ms),
        kind=int(msg.kind),
        key=msg.key,
        payload=bytes(msg.payload),
        tags=tuple(msg.tags),
        key_node=bool(msg.key_node),
        flushed=True,
    )


def vector_of(msg: agent_pb2.StoredRecord) -> npt.NDArray[np.float32] | None:
    if not msg.vector:
        return None
    return np.frombuffer(msg.vector, dtype=np.float16).astype(np.float32)


# -- batch values --------------------------------------------------------------------
#   value = codec (1 byte) | record count (u32 LE) | compressed StoredBatch
CODEC_NONE, CODEC_ZLIB, CODEC_ZSTD = 0, 1, 2
_HEADER = struct.Struct("<BI")


def _zstd() -> object | None:
    try:
        import zstandard
    except ImportError:  # pragma: no cover - zstandard is in the server extra
        return None
    return zstandard


def codec_id(name: str) -> int:
    if name == "zstd":
        return CODEC_ZSTD if _zstd() is not None else CODEC_ZLIB
    return CODEC_ZLIB if name == "zlib" else CODEC_NONE


def encode_batch(records: list[agent_pb2.StoredRecord], codec: int) -> bytes:
    raw = agent_pb2.StoredBatch(records=records).SerializeToString()
    if codec == CODEC_ZSTD:
        import zstandard

        body = zstandard.ZstdCompressor(level=3).compress(raw)
    elif codec == CODEC_ZLIB:
        body = zlib.compress(raw, 6)
    else:
        body = raw
    return _HEADER.pack(codec, len(records)) + body


def batch_count(value: bytes) -> int:
    return int(_HEADER.unpack_from(value)[1])


def decode_batch(value: bytes, where: str) -> list[agent_pb2.StoredRecord]:
    codec, _count = _HEADER.unpack_from(value)
    body = memoryview(value)[_HEADER.size :]
    try:
        if codec == CODEC_ZSTD:
            import zstandard

            raw = zstandard.ZstdDecompressor().decompress(body)
        elif codec == CODEC_ZLIB:
            raw = zlib.decompress(body)
        else:
            raw = bytes(body)
        batch = agent_pb2.StoredBatch()
        batch.ParseFromString(raw)
    except Exception as exc:  # any decode failure of stored bytes is damage
        raise Corrupted(f"scratchpad batch {where} cannot be decoded: {exc}") from None
    return list(batch.records)
