"""DataPlaneService servicer: converts messages and delegates to server.dataplane.

The caller's principal (what leases and tickets are bound to) is taken from
the ``authorization`` metadata value, or the peer's host when there is none.
"""

from __future__ import annotations

import grpc

from tiermem.server.api.convert import acting_session, put_spec
from tiermem.server.dataplane.identity import grpc_principal
from tiermem.server.dataplane.plane import DataPlane
from tiermem.server.dataplane.transfers import Ticket
from tiermem.server.protoconv import key_from_proto, key_to_proto, meta_to_proto
from tiermem.v1 import common_pb2, dataplane_pb2, dataplane_pb2_grpc


def _owner(context: grpc.ServicerContext) -> str:
    return grpc_principal(context.invocation_metadata(), context.peer())


class DataPlaneServicer(dataplane_pb2_grpc.DataPlaneServiceServicer):
    def __init__(self, plane: DataPlane) -> None:
        self._plane = plane

    def Hello(
        self, request: dataplane_pb2.HelloRequest, context: grpc.ServicerContext
    ) -> dataplane_pb2.HelloResponse:
        h = self._plane.hello()
        reply = dataplane_pb2.HelloResponse(
            host_id=h.host_id,
            bulk_address=h.bulk_address,
            arena_min_bytes=h.arena_min_bytes,
            inline_max_bytes=h.inline_max_bytes,
            default_lease_ttl_ms=h.default_lease_ttl_ms,
            max_lease_ttl_ms=h.max_lease_ttl_ms,
            max_batch_objects=h.max_batch_objects,
            max_object_bytes=h.max_object_bytes,
            bulk_protocol=h.bulk_protocol,
            bulk_unix_address=h.bulk_unix_address,
        )
        if h.arena is not None:
            a = h.arena
            reply.arena.CopyFrom(
                dataplane_pb2.ArenaInfo(
                    path=a.path,
                    size_bytes=a.size_bytes,
                    arena_id=a.arena_id,
                    device=a.device,
                    inode=a.inode,
                )
            )
        return reply

    # -- shared memory ----------------------------------------------------------------
    def Reserve(
        self, request: dataplane_pb2.ReserveRequest, context: grpc.ServicerContext
    ) -> dataplane_pb2.ReserveResponse:
        return reserve_reply(self._plane, _owner(context), acting_session(context), request)

    def Commit(
        self, request: dataplane_pb2.CommitRequest, context: grpc.ServicerContext
    ) -> dataplane_pb2.CommitResponse:
        return commit_reply(self._plane, _owner(context), request)

    def Lease(
        self, request: dataplane_pb2.LeaseRequest, context: grpc.ServicerContext
    ) -> dataplane_pb2.LeaseResponse:
        return lease_reply(self._plane, _owner(context), acting_session(context), request)

    def Release(
        self, request: dataplane_pb2.ReleaseRequest, context: grpc.ServicerContext
    ) -> dataplane_pb2.ReleaseResponse:
        return release_reply(self._plane, _owner(context), request)

    # -- bulk channel -----------------------------------------------------------------
    def BeginPut(
        self, request: dataplane_pb2.BeginPutRequest, context: grpc.ServicerContext
    ) -> dataplane_pb2.Ticket:
        specs = [put_spec(h, acting_session(context)) for h in request.objects]
        ticket = self._plane.transfers.begin_put(_owner(context), specs)
        return ticket_message(ticket, self._plane.transfers.address)

    def BeginGet(
        self, request: dataplane_pb2.BeginGetRequest, context: grpc.ServicerContext
    ) -> dataplane_pb2.Ticket:
        keys = [key_from_proto(k) for k in request.keys]
        ticket = self._plane.transfers.begin_get(
            _owner(context), keys, int(request.inline_max_bytes), acting_session(context)
        )
        return ticket_message(ticket, self._plane.transfers.address)


def ticket_message(ticket: Ticket, address: str) -> dataplane_pb2.Ticket:
    msg = dataplane_pb2.Ticket(
        ticket_id=ticket.ticket_id,
        address=address,
        ttl_ms=int(ticket.ttl_s * 1000),
        stream_bytes=ticket.stream_bytes,
    )
    for put in ticket.puts:
        obj = msg.objects.add(size_bytes=put.spec.size_bytes)
        obj.key.CopyFrom(key_to_proto(put.spec.key))
        if put.spec.checksum is not None:
            algorithm, value = put.spec.checksum
            obj.checksum.CopyFrom(common_pb2.Checksum(algorithm=algorithm, value=value))  # type: ignore[arg-type]
    for get in ticket.gets:
        meta = get.wire
        obj = msg.objects.add(size_bytes=get.size, inline=get.inline is not None)
        obj.key.CopyFrom(meta.key)
        obj.checksum.CopyFrom(meta.checksum)
        obj.meta.CopyFrom(meta)
        if get.inline is not None:
            obj.inline_data = get.inline
    return msg


# -- shared-memory requests, for the gRPC methods and the bulk session's ops alike --
def reserve_reply(
    plane: DataPlane, owner: str, caller: str, request: dataplane_pb2.ReserveRequest
) -> dataplane_pb2.ReserveResponse:
    """Reserve: write leases in the arena for ``owner`` (acting as ``caller``)."""
    shm = plane.shm
    ttl_s = shm.ttl_s(request.ttl_ms)
    leases = shm.reserve(owner, [put_spec(h, caller) for h in request.objects], ttl_s)
    info = shm.info()
    return dataplane_pb2.ReserveResponse(
        arena_id=info.arena_id if info is not None else "",
        ttl_ms=int(ttl_s * 1000),
        leases=[
            dataplane_pb2.WriteLease(lease_id=x.lease_id, offset=x.offset, length=x.length)
            for x in leases
        ],
    )


def commit_reply(
    plane: DataPlane, owner: str, request: dataplane_pb2.CommitRequest
) -> dataplane_pb2.CommitResponse:
    """Commit: the objects written into ``owner``'s write leases."""
    items = [
        (
            int(item.lease_id),
            (int(item.checksum.algorithm), int(item.checksum.value))
            if item.HasField("checksum") and item.checksum.algorithm
            else None,
        )
        for item in request.items
    ]
    metas = plane.shm.commit(owner, items)
    return dataplane_pb2.CommitResponse(metas=[meta_to_proto(m) for m in metas])


def lease_reply(
    plane: DataPlane, owner: str, caller: str, request: dataplane_pb2.LeaseRequest
) -> dataplane_pb2.LeaseResponse:
    """Lease: read leases (or inline values) of whole objects for ``owner``."""
    shm = plane.shm
    ttl_s = shm.ttl_s(request.ttl_ms)
    keys = [key_from_proto(k) for k in request.keys]
    grants = shm.lease(owner, keys, ttl_s, int(request.inline_max_bytes), caller)
    reply = dataplane_pb2.LeaseResponse(ttl_ms=int(ttl_s * 1000))
    info = shm.info()
    reply.arena_id = info.arena_id if info is not None else ""
    for g in grants:
        item = reply.leases.add()
        item.meta.CopyFrom(g.wire)
        if g.lease is not None:
            item.lease_id = g.lease.lease_id
            item.offset = g.lease.offset
            item.length = g.lease.length
        else:
            item.inline = True
            item.inline_data = g.inline or b""
            item.length = g.wire.size_bytes
    return reply


def release_reply(
    plane: DataPlane, owner: str, request: dataplane_pb2.ReleaseRequest
) -> dataplane_pb2.ReleaseResponse:
    """Release: end ``owner``'s leases."""
    n = plane.shm.release(owner, [int(x) for x in request.lease_ids])
    return dataplane_pb2.ReleaseResponse(released=n)
