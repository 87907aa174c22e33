"""Message building and parsing shared by the sync and async clients."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from tiermem.client.errors import ChecksumError
from tiermem.client.types import (
    AccessHint,
    CostLine,
    CostReport,
    Durability,
    Kind,
    ObjectInfo,
    Precision,
    Profile,
    Stats,
    Tier,
    TierCost,
    TierStats,
)
from tiermem.v1 import admin_pb2, common_pb2, object_pb2

try:  # optional: 4x faster than zlib's CRC-32 and the daemon's own algorithm
    import xxhash

    HAVE_XXHASH = True
except ImportError:  # pragma: no cover - depends on the environment
    HAVE_XXHASH = False

DEFAULT_CHUNK_BYTES = 1 << 20

#: numpy dtype name -> wire (torch) dtype name, for arrays.
NUMPY_DTYPES = {
    "float64": "float64",
    "float32": "float32",
    "float16": "float16",
    "int64": "int64",
    "int32": "int32",
    "int16": "int16",
    "int8": "int8",
    "uint64": "uint64",
    "uint32": "uint32",
    "uint16": "uint16",
    "uint8": "uint8",
    "bool": "bool",
}


def as_view(data: Any) -> memoryview:
    """A flat byte view of bytes-like data or a C-contiguous numpy array."""
    if isinstance(data, np.ndarray):
        if not data.flags.c_contiguous:
            data = np.ascontiguousarray(data)
        return memoryview(data.reshape(-1).view(np.uint8))
    view = memoryview(data)
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


def checksum_of(view: memoryview) -> common_pb2.Checksum:
    if HAVE_XXHASH:
        return common_pb2.Checksum(
            algorithm=common_pb2.XXH3_64, value=xxhash.xxh3_64_intdigest(view)
        )
    return common_pb2.Checksum(algorithm=common_pb2.CRC32, value=zlib.crc32(view))


def object_key(namespace: str, kind: Kind, key: str) -> common_pb2.ObjectKey:
    return common_pb2.ObjectKey(namespace=namespace, kind=int(kind), key=key)  # type: ignore[arg-type]


def profile_msg(p: Profile | None) -> common_pb2.Profile | None:
    if p is None:
        return None
    return common_pb2.Profile(
        hint=int(p.hint),  # type: ignore[arg-type]
        ttl_s=p.ttl_s,
        next_access_unix_ms=p.next_access_unix_ms,
        precision=int(p.precision),  # type: ignore[arg-type]
        lossy_max_error=p.lossy_max_error,
        durability=int(p.durability),  # type: ignore[arg-type]
        pin=p.pin,
        preferred_tier=int(p.preferred_tier or 0),  # type: ignore[arg-type]
    )


def put_requests(
    header: object_pb2.PutHeader, view: memoryview, chunk_bytes: int
) -> Iterator[object_pb2.PutRequest]:
    yield object_pb2.PutRequest(header=header)
    for start in range(0, len(view), chunk_bytes):
        yield object_pb2.PutRequest(chunk=bytes(view[start : start + chunk_bytes]))


def put_header(
    namespace: str,
    kind: Kind,
    key: str,
    view: memoryview,
    *,
    profile: Profile | None,
    session: str,
    dtype: str,
    shape: tuple[int, ...],
    memory_format: str,
    if_absent: bool,
    verify: bool,
) -> object_pb2.PutHeader:
    header = object_pb2.PutHeader(
        key=object_key(namespace, kind, key),
        size_bytes=len(view),
        session=session,
        if_absent=if_absent,
    )
    prof = profile_msg(profile)
    if prof is not None:
        header.profile.CopyFrom(prof)
    if dtype:
        header.tensor.CopyFrom(
            common_pb2.TensorInfo(dtype=dtype, shape=list(shape), memory_format=memory_format)
        )
    if verify:
        header.checksum.CopyFrom(checksum_of(view))
    return header


#: members by wire value: a dict lookup is several times cheaper than ``Kind(value)``
_KINDS = {int(m): m for m in Kind}
_TIERS = {int(m): m for m in Tier}
_HINTS = {int(m): m for m in AccessHint}
_PRECISIONS = {int(m): m for m in Precision}
_DURABILITIES = {int(m): m for m in Durability}
#: Profiles seen, by their fields: a profile is immutable and nearly every
#: object of a workload shares one of a handful, so ``info`` reuses them.
_PROFILES: dict[tuple[Any, ...], Profile] = {}
_PROFILES_MAX = 1024


def _member(members: dict[int, Any], enum: Any, value: int) -> Any:
    """``enum(value)`` through its members table (unknown values raise as before)."""
    found = members.get(value)
    return found if found is not None else enum(value)


def _profile(p: common_pb2.Profile) -> Profile:
    fields = (
        p.hint,
        p.ttl_s,
        p.next_access_unix_ms,
        p.precision,
        p.lossy_max_error,
        p.durability,
        p.pin,
        p.preferred_tier,
    )
    known = _PROFILES.get(fields)
    if known is not None:
        return known
    hint, ttl_s, next_ms, precision, max_error, durability, pin, tier = fields
    profile = Profile(
        _member(_HINTS, AccessHint, hint),
        ttl_s,
        next_ms,
        _member(_PRECISIONS, Precision, precision),
        max_error,
        _member(_DURABILITIES, Durability, durability),
        pin,
        _member(_TIERS, Tier, tier) if tier else None,
    )
    if len(_PROFILES) >= _PROFILES_MAX:
        _PROFILES.clear()
    _PROFILES[fields] = profile
    return profile


def info(meta: common_pb2.ObjectMeta) -> ObjectInfo:
    """The client's view of an object's metadata message. (Called for every
    object of every batch: fields are passed by position and enums looked up.)"""
    key, tensor = meta.key, meta.tensor
    return ObjectInfo(
        key.namespace,
        _member(_KINDS, Kind, key.kind),
        key.key,
        meta.size_bytes,
        meta.checksum.value,
        _member(_TIERS, Tier, meta.tier) if meta.tier else Tier.SSD,
        meta.persisted,
        meta.version,
        meta.session,
        tensor.dtype,
        tuple(tensor.shape),
        tensor.memory_format,
        meta.codec,
        meta.created_unix_ms,
        meta.accessed_unix_ms,
        meta.expires_unix_ms,
        _profile(meta.profile),
    )


def verify_get(meta: ObjectInfo, data: bytes | bytearray | memoryview, whole: bool) -> None:
    """Check a whole-object read against the daemon's checksum (needs xxhash)."""
    if whole:
        verify_checksum(meta.checksum, data, lambda: meta)


def verify_checksum(
    expected: int, data: bytes | bytearray | memoryview, info: Callable[[], ObjectInfo]
) -> None:
    """``verify_get`` of a whole object whose metadata (``info()``, for the
    error's message) is made only if the bytes do not match."""
    if not HAVE_XXHASH:
        return
    actual = xxhash.xxh3_64_intdigest(data)
    if actual != expected:
        meta = info()
        raise ChecksumError(
            "DATA_LOSS",
            f"object {meta.namespace}/{meta.kind.name}/{meta.key} arrived damaged "
            f"(checksum {actual:x}, expected {expected:x})",
        )


def cost(msg: admin_pb2.CostReport) -> CostReport:
    def lines(items: Any) -> list[CostLine]:
        return [CostLine(x.name, x.bytes, x.usd_per_hour) for x in items]

    return CostReport(
        tiers=[
            TierCost(
                Tier(t.tier),
                t.capacity_bytes,
                t.used_bytes,
                t.price_per_gib_hour,
                t.capacity_usd_per_hour,
                t.used_usd_per_hour,
            )
            for t in msg.tiers
        ],
        kinds=lines(msg.kinds),
        namespaces=lines(msg.namespaces),
        sessions=lines(msg.sessions),
        sessions_omitted=msg.sessions_omitted,
        used_usd_per_hour=msg.used_usd_per_hour,
        capacity_usd_per_hour=msg.capacity_usd_per_hour,
    )


def stats(msg: admin_pb2.StatsResponse) -> Stats:
    return Stats(
        cost=cost(msg.cost) if msg.HasField("cost") else None,
        version=msg.version,
        objects=msg.objects,
        uptime_s=msg.uptime_s,
        tiers=[
            TierStats(
                tier=Tier(t.tier),
                enabled=t.enabled,
                capacity_bytes=t.capacity_bytes,
                used_bytes=t.used_bytes,
                high_watermark=t.high_watermark,
                low_watermark=t.low_watermark,
                device=t.device,
                by_kind={Kind(k.kind): (k.objects, k.bytes) for k in t.by_kind},
            )
            for t in msg.tiers
        ],
    )


def array_from(meta: ObjectInfo, data: bytes | bytearray) -> np.ndarray[Any, Any]:
    if not meta.dtype:
        raise ValueError(f"object {meta.key} carries no dtype/shape; use get() for raw bytes")
    if meta.dtype not in NUMPY_DTYPES:
        raise ValueError(f"dtype {meta.dtype} has no numpy equivalent; use get_tensor()")
    return np.frombuffer(data, dtype=np.dtype(meta.dtype)).reshape(meta.shape)


def tensor_from(meta: ObjectInfo, data: bytes | bytearray) -> Any:
    import torch

    if not meta.dtype:
        raise ValueError(f"object {meta.key} carries no dtype/shape; use get() for raw bytes")
    dtype = getattr(torch, meta.dtype)
    buf = bytearray(data) if isinstance(data, bytes) else data
    return (
        torch.frombuffer(buf, dtype=dtype).reshape(meta.shape)
        if buf
        else torch.empty(meta.shape, dtype=dtype)
    )


def tensor_view(tensor: Any) -> tuple[memoryview, str, tuple[int, ...]]:
    """Bytes, dtype name and shape of a CPU tensor (moved to CPU if needed)."""
    import torch

    t = tensor.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous()
    dtype = str(t.dtype).removeprefix("torch.")
    raw = t.reshape(-1).view(torch.uint8).numpy()
    return memoryview(raw), dtype, tuple(t.shape)
