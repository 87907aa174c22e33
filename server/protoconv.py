"""Conversions between domain types (``model``) and generated protobuf messages.

Used by the gRPC servicers and by the catalog's on-disk records, which embed the
wire ``ObjectMeta``.
"""

from __future__ import annotations

from typing import TypeVar

from tiermem.server.model import (
    KIND_BY_VALUE,
    AccessHint,
    Durability,
    ObjectKey,
    ObjectMeta,
    Precision,
    Profile,
    TensorInfo,
    Tier,
)
from tiermem.v1 import common_pb2 as pb

_E = TypeVar("_E")


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


#: Enum members by wire value: a dict lookup costs a fraction of ``Enum(value)``,
#: and these conversions run once per object of every read.
_HINTS = {int(m): m for m in AccessHint}
_PRECISIONS = {int(m): m for m in Precision}
_DURABILITIES = {int(m): m for m in Durability}
_TIERS = {int(m): m for m in Tier}


def _member(members: dict[int, _E], value: int, field: str) -> _E:
    try:
        return members[value]
    except KeyError:
        from tiermem.server.errors import InvalidArgument

        raise InvalidArgument(f"profile.{field}: unknown value {value}") from None


def profile_from_proto(msg: pb.Profile) -> Profile:
    tier = msg.preferred_tier
    return Profile(
        hint=_member(_HINTS, msg.hint, "hint"),
        ttl_s=msg.ttl_s,
        next_access_unix_ms=msg.next_access_unix_ms,
        precision=_member(_PRECISIONS, msg.precision, "precision"),
        lossy_max_error=msg.lossy_max_error,
        durability=_member(_DURABILITIES, msg.durability, "durability"),
        pin=msg.pin,
        preferred_tier=_member(_TIERS, tier, "preferred_tier") if tier else None,
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
    key = msg.key
    return ObjectMeta(
        key=ObjectKey(key.namespace, KIND_BY_VALUE[key.kind], key.key),
        size_bytes=msg.size_bytes,
        checksum=msg.checksum.value,
        profile=profile_from_proto(msg.profile),
        tier=_TIERS[msg.tier] if msg.tier else Tier.SSD,
        session=msg.session,
        codec=msg.codec,
        tensor=tensor_from_proto(msg.tensor if msg.HasField("tensor") else None),
        created_unix_ms=msg.created_unix_ms,
        accessed_unix_ms=msg.accessed_unix_ms,
        persisted=msg.persisted,
        version=msg.version,
        expires_unix_ms=msg.expires_unix_ms,
    )
