"""Client of the placement service: prefetch hints, pins (``client.placement``)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from tiermem.client import _wire
from tiermem.client._transport import Transport
from tiermem.client.types import Kind, PrefetchResult, Tier
from tiermem.v1 import common_pb2, placement_pb2, placement_pb2_grpc


class PlacementClient:
    """Tells the daemon's planner what is about to be read and what must stay put.
    Keys are ``(kind, key)`` pairs in the client's namespace unless given."""

    def __init__(self, transport: Transport, namespace: str) -> None:
        self._transport = transport
        self.namespace = namespace
        self._stub = placement_pb2_grpc.PlacementServiceStub(transport.channel)

    def _keys(
        self, keys: Sequence[tuple[Kind, str]], namespace: str | None
    ) -> list[common_pb2.ObjectKey]:
        ns = namespace or self.namespace
        return [_wire.object_key(ns, kind, key) for kind, key in keys]

    def prefetch(
        self,
        keys: Sequence[tuple[Kind, str]],
        *,
        deadline_s: float | None = None,
        namespace: str | None = None,
        timeout_s: float | None = None,
    ) -> PrefetchResult:
        """Ask for ``keys`` to be promoted before ``deadline_s`` (unix seconds;
        None = as soon as possible). Returns at once; moves happen in the background."""
        request = placement_pb2.PrefetchRequest(
            keys=self._keys(keys, namespace),
            deadline_unix_ms=int(deadline_s * 1000) if deadline_s else 0,
        )
        reply = self._transport.call(
            lambda t: self._stub.Prefetch(request, timeout=t, metadata=self._transport.metadata),
            timeout_s,
        )
        return PrefetchResult(reply.queued, reply.resident, reply.missing)

    def prefetch_in(
        self, keys: Sequence[tuple[Kind, str]], seconds: float, **kw: object
    ) -> PrefetchResult:
        """Prefetch for a read expected ``seconds`` from now."""
        return self.prefetch(keys, deadline_s=time.time() + seconds, **kw)  # type: ignore[arg-type]

    def pin(
        self,
        keys: Sequence[tuple[Kind, str]],
        *,
        tier: Tier | None = None,
        namespace: str | None = None,
        timeout_s: float | None = None,
    ) -> list[Tier]:
        """Pin objects (moved to ``tier`` first if given); returns where each is pinned."""
        request = placement_pb2.PinRequest(
            keys=self._keys(keys, namespace),
            tier=int(tier or 0),  # type: ignore[arg-type]
        )
        reply = self._transport.call(
            lambda t: self._stub.Pin(request, timeout=t, metadata=self._transport.metadata),
            timeout_s,
        )
        return [Tier(t) for t in reply.tiers]

    def unpin(
        self,
        keys: Sequence[tuple[Kind, str]],
        *,
        namespace: str | None = None,
        timeout_s: float | None = None,
    ) -> int:
        """Unpin objects; returns how many were pinned."""
        request = placement_pb2.UnpinRequest(keys=self._keys(keys, namespace))
        reply = self._transport.call(
            lambda t: self._stub.Unpin(request, timeout=t, metadata=self._transport.metadata),
            timeout_s,
        )
        return int(reply.unpinned)
