"""Operators from the client: ``client.operators``: native functions the daemon
runs next to the data (shortest paths, arithmetic, top-k ...)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tiermem.client._transport import Transport
from tiermem.v1 import operators_pb2, operators_pb2_grpc


@dataclass(frozen=True, slots=True)
class ArgInfo:
    name: str
    type: str
    required: bool
    default: Any
    description: str


@dataclass(frozen=True, slots=True)
class OperatorInfo:
    name: str
    description: str
    args: list[ArgInfo]
    returns: str
    origin: str
    timeout_s: float


class OperatorsClient:
    def __init__(self, transport: Transport) -> None:
        self._t = transport
        self._stub = operators_pb2_grpc.OperatorServiceStub(transport.channel)

    def list(self, *, timeout_s: float | None = None) -> list[OperatorInfo]:
        reply = self._t.call(
            lambda t: self._stub.ListOperators(
                operators_pb2.ListOperatorsRequest(), timeout=t, metadata=self._t.metadata
            ),
            timeout_s,
        )
        return [
            OperatorInfo(
                name=o.name,
                description=o.description,
                args=[
                    ArgInfo(
                        a.name,
                        a.type,
                        a.required,
                        json.loads(a.default_json) if a.default_json else None,
                        a.description,
                    )
                    for a in o.args
                ],
                returns=o.returns,
                origin=o.origin,
                timeout_s=o.timeout_s,
            )
            for o in reply.operators
        ]

    def invoke(
        self,
        name: str,
        args: dict[str, Any] | None = None,
        *,
        session: str = "",
        limit_s: float = 0.0,
        timeout_s: float | None = None,
    ) -> Any:
        """Run operator ``name`` with ``args``; returns its JSON result as Python
        values. ``limit_s`` is the operator's time limit (0 = its default); the
        call's own deadline (``timeout_s``) should be longer."""
        request = operators_pb2.InvokeRequest(
            name=name,
            args_json=json.dumps(args or {}),
            session=session,
            timeout_s=limit_s,
        )
        reply = self._t.call(
            lambda t: self._stub.Invoke(request, timeout=t, metadata=self._t.metadata), timeout_s
        )
        return json.loads(reply.result_json)
