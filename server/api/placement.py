"""PlacementService servicer: converts messages and delegates to services.placement."""

from __future__ import annotations

import grpc

from tiermem.server.api.convert import acting_session
from tiermem.server.errors import InvalidArgument
from tiermem.server.model import Tier
from tiermem.server.protoconv import key_from_proto
from tiermem.server.services.objects import ObjectService
from tiermem.server.services.placement import PlacementService
from tiermem.v1 import placement_pb2, placement_pb2_grpc


class PlacementServicer(placement_pb2_grpc.PlacementServiceServicer):
    def __init__(self, placement: PlacementService, objects: ObjectService) -> None:
        self._placement = placement
        self._objects = objects

    def Prefetch(
        self, request: placement_pb2.PrefetchRequest, context: grpc.ServicerContext
    ) -> placement_pb2.PrefetchResponse:
        keys = [key_from_proto(k) for k in request.keys]
        result = self._placement.prefetch(
            keys, int(request.deadline_unix_ms), acting_session(context), self._objects.guard
        )
        return placement_pb2.PrefetchResponse(
            queued=result.queued, resident=result.resident, missing=result.missing
        )

    def Pin(
        self, request: placement_pb2.PinRequest, context: grpc.ServicerContext
    ) -> placement_pb2.PinResponse:
        keys = [key_from_proto(k) for k in request.keys]
        tier = None
        if request.tier:
            try:
                tier = Tier(int(request.tier))
            except ValueError:
                raise InvalidArgument(f"unknown tier {request.tier}") from None
        tiers = self._placement.pin(keys, tier, acting_session(context), self._objects.guard)
        return placement_pb2.PinResponse(tiers=[int(t) for t in tiers])  # type: ignore[misc]

    def Unpin(
        self, request: placement_pb2.UnpinRequest, context: grpc.ServicerContext
    ) -> placement_pb2.UnpinResponse:
        keys = [key_from_proto(k) for k in request.keys]
        unpinned = self._placement.unpin(keys, acting_session(context), self._objects.guard)
        return placement_pb2.UnpinResponse(unpinned=unpinned)
