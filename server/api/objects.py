"""ObjectService servicer: converts messages and delegates to services.objects."""

from __future__ import annotations

from collections.abc import Iterator

import grpc

from tiermem.server.api.convert import acting_session, optional_kind, put_spec
from tiermem.server.errors import InvalidArgument
from tiermem.server.protoconv import key_from_proto, meta_to_proto
from tiermem.server.services.objects import ObjectService
from tiermem.v1 import object_pb2, object_pb2_grpc


def _chunks(requests: Iterator[object_pb2.PutRequest]) -> Iterator[bytes]:
    for i, msg in enumerate(requests, start=2):
        if msg.WhichOneof("part") != "chunk":
            raise InvalidArgument(
                f"message #{i} of the Put stream is a {msg.WhichOneof('part') or 'empty message'}; "
                "only the first message may be the header, the rest must be chunks"
            )
        yield msg.chunk


def stat_reply(
    objects: ObjectService, acting: str, request: object_pb2.StatRequest
) -> object_pb2.StatResponse:
    """ObjectService.Stat's answer (gRPC and bulk sessions run this same code)."""
    meta = objects.stat(key_from_proto(request.key), acting)
    return object_pb2.StatResponse(meta=meta_to_proto(meta))


def delete_reply(
    objects: ObjectService, acting: str, request: object_pb2.DeleteRequest
) -> object_pb2.DeleteResponse:
    """ObjectService.Delete's answer (gRPC and bulk sessions)."""
    freed = objects.delete(key_from_proto(request.key), acting)
    return object_pb2.DeleteResponse(deleted=freed is not None, freed_bytes=freed or 0)


def list_reply(
    objects: ObjectService, acting: str, request: object_pb2.ListRequest
) -> object_pb2.ListResponse:
    """ObjectService.List's answer: one page (gRPC and bulk sessions)."""
    page, token = objects.list_wire(
        request.namespace,
        optional_kind(request.kind),
        request.key_prefix,
        request.session,
        request.page_size,
        request.page_token,
        acting,
    )
    return object_pb2.ListResponse(objects=[wire for _meta, wire in page], next_page_token=token)


class ObjectServicer(object_pb2_grpc.ObjectServiceServicer):
    def __init__(self, objects: ObjectService, chunk_bytes: int) -> None:
        self._objects = objects
        self._chunk_bytes = chunk_bytes

    def Put(
        self, request_iterator: Iterator[object_pb2.PutRequest], context: grpc.ServicerContext
    ) -> object_pb2.PutResponse:
        first = next(request_iterator, None)
        if first is None or first.WhichOneof("part") != "header":
            raise InvalidArgument("the first message of a Put stream must be its header")
        spec = put_spec(first.header, acting_session(context))
        meta = self._objects.put(spec, _chunks(request_iterator))
        return object_pb2.PutResponse(meta=meta_to_proto(meta))

    def Get(
        self, request: object_pb2.GetRequest, context: grpc.ServicerContext
    ) -> Iterator[object_pb2.GetResponse]:
        reader = self._objects.read(
            key_from_proto(request.key), request.offset, request.length, acting_session(context)
        )
        try:
            yield object_pb2.GetResponse(meta=reader.wire)
            for chunk in reader.chunks(self._chunk_bytes):
                yield object_pb2.GetResponse(chunk=chunk)
            self._objects.store.metrics.data_bytes.labels("grpc", "out").inc(len(reader.view))
        finally:
            reader.release()

    def Stat(
        self, request: object_pb2.StatRequest, context: grpc.ServicerContext
    ) -> object_pb2.StatResponse:
        return stat_reply(self._objects, acting_session(context), request)

    def Delete(
        self, request: object_pb2.DeleteRequest, context: grpc.ServicerContext
    ) -> object_pb2.DeleteResponse:
        return delete_reply(self._objects, acting_session(context), request)

    def List(
        self, request: object_pb2.ListRequest, context: grpc.ServicerContext
    ) -> object_pb2.ListResponse:
        return list_reply(self._objects, acting_session(context), request)
