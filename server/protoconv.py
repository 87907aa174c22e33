"""Conversions between domain types (``model``) and generated protobuf messages.

Used by the gRPC servicers and by the catalog's on-disk records, which embed the
wire ``ObjectMeta``.
"""

from __future__ import annotations

from tiermem.server.model import (
    AccessHint,
    Durability,
    Kind,
    ObjectKey,
    ObjectMeta,
    Precision,
    Profile,
    TensorInfo,
    Tier,
)
from tiermem.v1 import common_pb2 as pb


def key_to_proto(key: ObjectKey) -> pb.ObjectKey:
    return pb.ObjectKey(namespace=key.namespace, kind=int(key.kind), key=key.key)  # type: ignore[arg-type]


def key_from_proto(msg: pb.ObjectKey) -> ObjectKey:
    """Validating conversion (raises InvalidArgument with the reason)."""
    return ObjectKey.checked(msg.namespace, int(msg.kind), msg.key)


def profile_to_proto(p: Profile) -> pb.Profile:
    return pb.Profile(
        hint=int(p.hint),  # type: ignore[arg-type]
        ttl_s=p.ttl_s,
        next_access_unix_ms=p.next_access_unix_ms,
        precision=int(p.precision),  # type: ignore[arg-type]
        lossy_max_error=p.lossy_max_error,
        durability=int(p.durability),  # type: ignore[arg-type]
        pin=p.pin,
        preferred_tier=int(p.preferred_tier or 0),  # type: ignore[arg-type]
    )


def profile_from_proto(msg: pb.Profile) -> Profile:
    from tiermem.server.errors import InvalidArgument

    def enum(cls: type, value: int, field: str) -> object:
        try:
            return cls(value)
        except ValueError:
            raise InvalidArgument(f"profile.{field}: unknown value {value}") from None

    tier = int(msg.preferred_tier)
    return Profile(
        hint=enum(AccessHint, int(msg.hint), "hint"),  # type: ignore[arg-type]
        ttl_s=int(msg.ttl_s),
        next_access_unix_ms=int(msg.next_access_unix_ms),
        precision=enum(Precision, int(msg.precision), "precision"),  # type: ignore[arg-type]
        lossy_max_error=float(msg.lossy_max_error),
        durability=enum(Durability, int(msg.durability), "durability"),  # type: ignore[arg-type]
        pin=bool(msg.pin),
        preferred_tier=enum(Tier, tier, "preferred_tier") if tier else None,  # type: ignore[arg-type]
    )


def tensor_to_proto(t: TensorInfo | None) -> pb.TensorInfo | None:
    if t is None:
        return None
    return pb.TensorInfo(dtype=t.dtype, shape=list(t.shape), memory_format=t.memory_format)


def tensor_from_proto(msg: pb.TensorInfo | None) -> TensorInfo | None:
    if msg is None or not msg.dtype:
        return None
    return TensorInfo(msg.dtype, tuple(int(d) for d in msg.shape), msg.memory_format)


def meta_to_proto(m: ObjectMeta) -> pb.ObjectMeta:
    msg = pb.ObjectMeta(
        key=key_to_proto(m.key),
        session=m.session,
        size_bytes=m.size_bytes,
        checksum=pb.Checksum(algorithm=pb.XXH3_64, value=m.checksum),
        codec=m.codec,
        created_unix_ms=m.created_unix_ms,
        accessed_unix_ms=m.accessed_unix_ms,
        profile=profile_to_proto(m.profile),
        tier=int(m.tier),  # type: ignore[arg-type]
        persisted=m.persisted,
        version=m.version,
        expires_unix_ms=m.expires_unix_ms,
    )
    tensor = tensor_to_proto(m.tensor)
    if tensor is not None:
        msg.tensor.CopyFrom(tensor)
    return msg


def meta_from_proto(msg: pb.ObjectMeta) -> ObjectMeta:
    """Trusted conversion (records written by this daemon)."""
    return ObjectMeta(
        key=ObjectKey(msg.key.namespace, Kind(msg.key.kind), msg.key.key),
        size_bytes=int(msg.size_bytes),
        checksum=int(msg.checksum.value),
        profile=profile_from_proto(msg.profile),
        tier=Tier(msg.tier) if msg.tier else Tier.SSD,
        session=msg.session,
        codec=msg.codec,
        tensor=tensor_from_proto(msg.tensor if msg.HasField("tensor") else None),
        created_unix_ms=int(msg.created_unix_ms),
        accessed_unix_ms=int(msg.accessed_unix_ms),
        persisted=bool(msg.persisted),
        version=int(msg.version),
        expires_unix_ms=int(msg.expires_unix_ms),
    )
