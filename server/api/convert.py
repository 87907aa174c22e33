"""Request/response conversions shared by the servicers."""

from __future__ import annotations

import grpc

from tiermem.server.errors import InvalidArgument
from tiermem.server.model import Kind
from tiermem.server.protoconv import key_from_proto, profile_from_proto, tensor_from_proto
from tiermem.server.services.objects import PutSpec
from tiermem.v1 import object_pb2

#: gRPC metadata naming the session a caller acts as (see sessions.proto).
SESSION_METADATA = "x-tiermem-session"


def acting_session(context: grpc.ServicerContext) -> str:
    """The session the caller acts as ("" = none: a trusted tool)."""
    for key, value in context.invocation_metadata() or ():
        if key == SESSION_METADATA and isinstance(value, str):
            return value
    return ""


def put_spec(header: object_pb2.PutHeader, caller: str = "") -> PutSpec:
    checksum = None
    if header.HasField("checksum") and header.checksum.algorithm:
        checksum = (int(header.checksum.algorithm), int(header.checksum.value))
    return PutSpec(
        key=key_from_proto(header.key),
        size_bytes=int(header.size_bytes),
        profile=profile_from_proto(header.profile),
        tensor=tensor_from_proto(header.tensor if header.HasField("tensor") else None),
        session=header.session,
        checksum=checksum,
        if_absent=header.if_absent,
        caller=caller,
    )


def optional_kind(value: int) -> Kind | None:
    if value == 0:
        return None
    try:
        return Kind(value)
    except ValueError:
        raise InvalidArgument(f"unknown kind {value}") from None
