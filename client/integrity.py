"""Integrity checks of a running daemon (``client.integrity``; admin role)."""

from __future__ import annotations

from dataclasses import dataclass, field

from tiermem.client._transport import Transport
from tiermem.client.types import Kind
from tiermem.v1 import integrity_pb2, integrity_pb2_grpc


@dataclass(frozen=True)
class DamagedObject:
    namespace: str
    kind: Kind | None
    key: str
    where: str  # "segment", "inline" or "catalog"
    reason: str


@dataclass(frozen=True)
class CheckResult:
    objects_checked: int
    bytes_checked: int
    damaged_total: int
    damaged: list[DamagedObject] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def clean(self) -> bool:
        return self.damaged_total == 0


class IntegrityClient:
    def __init__(self, transport: Transport) -> None:
        self._transport = transport
        self._stub = integrity_pb2_grpc.IntegrityServiceStub(transport.channel)

    def check(
        self,
        *,
        namespace: str = "",
        metadata_only: bool = False,
        max_damaged: int = 0,
        timeout_s: float | None = None,
    ) -> CheckResult:
        """Verify stored objects (every byte unless ``metadata_only``); lists the damaged."""
        request = integrity_pb2.CheckRequest(
            namespace=namespace, metadata_only=metadata_only, max_damaged=max_damaged
        )
        reply = self._transport.call(
            lambda t: self._stub.Check(request, timeout=t, metadata=self._transport.metadata),
            timeout_s,
        )
        return CheckResult(
            objects_checked=reply.objects_checked,
            bytes_checked=reply.bytes_checked,
            damaged_total=reply.damaged_total,
            damaged=[
                DamagedObject(
                    d.key.namespace,
                    Kind(d.key.kind) if d.key.kind else None,
                    d.key.key,
                    d.where,
                    d.reason,
                )
                for d in reply.damaged
            ],
            notes=list(reply.notes),
            seconds=reply.seconds,
        )
