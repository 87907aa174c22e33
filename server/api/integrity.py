"""IntegrityService servicer."""

from __future__ import annotations

import grpc

from tiermem.server.model import Kind, ObjectKey
from tiermem.server.protoconv import key_to_proto
from tiermem.server.services.integrity import IntegrityService
from tiermem.v1 import common_pb2, integrity_pb2, integrity_pb2_grpc


def _key(name: str) -> common_pb2.ObjectKey:
    namespace, _, rest = name.partition("/")
    kind, _, key = rest.partition("/")
    if kind in Kind.__members__:
        return key_to_proto(ObjectKey(namespace, Kind[kind], key))
    return common_pb2.ObjectKey(key=name)


class IntegrityServicer(integrity_pb2_grpc.IntegrityServiceServicer):
    def __init__(self, integrity: IntegrityService) -> None:
        self._integrity = integrity

    def Check(
        self, request: integrity_pb2.CheckRequest, context: grpc.ServicerContext
    ) -> integrity_pb2.CheckResponse:
        report = self._integrity.check(
            request.namespace,
            read_bytes=not request.metadata_only,
            max_damaged=request.max_damaged,
        )
        return integrity_pb2.CheckResponse(
            objects_checked=report.objects_checked,
            bytes_checked=report.bytes_checked,
            damaged_total=report.damaged_total,
            damaged=[
                integrity_pb2.DamagedObject(key=_key(d.key), where=d.where, reason=d.reason)
                for d in report.damaged
            ],
            notes=report.notes,
            seconds=report.seconds,
        )
