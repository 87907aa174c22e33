"""Agent sessions from the client: ``client.sessions``.

A session owns what is put with its id; closing it frees all of that at once
and hands the parent only a short result. Act as a session with
``client.as_session(id)`` (or ``Client(..., session=id)``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

from tiermem.client._transport import Transport
from tiermem.client.types import Kind, Tier
from tiermem.v1 import sessions_pb2, sessions_pb2_grpc

#: gRPC metadata naming the session a call acts as.
SESSION_METADATA = "x-tiermem-session"


class CloseReason(IntEnum):
    CLIENT = 1
    EXPIRED = 2
    ABANDONED = 3
    PARENT_CLOSED = 4


@dataclass(frozen=True, slots=True)
class Grant:
    """Read-only access for a child to its ancestors' objects of ``kind`` under
    ``key_prefix`` (for SCRATCH: their scratch records with keys under it)."""

    kind: Kind
    key_prefix: str = ""
    namespace: str = ""  # "" = the session's namespace


@dataclass(frozen=True, slots=True)
class SessionInfo:
    id: str
    parent: str
    label: str
    namespace: str
    state: str
    quotas: dict[Tier, int]
    created_unix_ms: int
    expires_unix_ms: int
    lease_s: int
    heartbeat_unix_ms: int
    grants: list[Grant]
    children: list[str]
    usage: dict[Tier, tuple[int, int]]  # bytes, items
    ledger_bytes: int
    ledger_tokens: int
    children_closed: int
    depth: int

    def used_bytes(self, tier: Tier) -> int:
        return self.usage.get(tier, (0, 0))[0]


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    child: str
    label: str
    bytes: int
    tokens: int
    reason: CloseReason
    closed_unix_ms: int


@dataclass(frozen=True, slots=True)
class CloseResult:
    freed: dict[Tier, int] = field(default_factory=dict)
    sessions_closed: int = 0
    objects_freed: int = 0
    records_freed: int = 0
    result_record_id: int = 0

    @property
    def freed_bytes(self) -> int:
        return sum(self.freed.values())


def _info(msg: sessions_pb2.SessionInfo) -> SessionInfo:
    return SessionInfo(
        id=msg.id,
        parent=msg.parent,
        label=msg.label,
        namespace=msg.namespace,
        state=sessions_pb2.SessionState.Name(msg.state),
        quotas={Tier(q.tier): q.bytes for q in msg.quotas},
        created_unix_ms=msg.created_unix_ms,
        expires_unix_ms=msg.expires_unix_ms,
        lease_s=msg.lease_s,
        heartbeat_unix_ms=msg.heartbeat_unix_ms,
        grants=[Grant(Kind(g.kind), g.key_prefix, g.namespace) for g in msg.grants],
        children=list(msg.children),
        usage={Tier(u.tier): (u.bytes, u.objects) for u in msg.usage},
        ledger_bytes=msg.ledger_bytes,
        ledger_tokens=msg.ledger_tokens,
        children_closed=msg.children_closed,
        depth=msg.depth,
    )


class SessionsClient:
    def __init__(self, transport: Transport) -> None:
        self._t = transport
        self._stub = sessions_pb2_grpc.SessionServiceStub(transport.channel)

    def open(
        self,
        *,
        parent: str = "",
        label: str = "",
        quotas: Mapping[Tier, int] | None = None,
        ttl_s: int = 0,
        lease_s: int = 0,
        grants: Sequence[Grant] = (),
        namespace: str = "",
        id: str = "",
        timeout_s: float | None = None,
    ) -> SessionInfo:
        """Open a session (a child of ``parent`` if set). ``quotas``: bytes per
        tier; ``ttl_s``: closed after this long; ``lease_s``: closed after this
        long without a heartbeat (any call made as it counts, reads included,
        and its scratchpad calls)."""
        request = sessions_pb2.OpenSessionRequest(
            parent=parent,
            label=label,
            quotas=[
                sessions_pb2.TierQuota(tier=int(t), bytes=int(b))  # type: ignore[arg-type]
                for t, b in (quotas or {}).items()
            ],
            ttl_s=ttl_s,
            lease_s=lease_s,
            namespace=namespace,
            id=id,
        )
        for grant in grants:
            request.grants.add(
                namespace=grant.namespace or namespace or "",  # "": the session's
                kind=int(grant.kind),
                key_prefix=grant.key_prefix,
            )
        reply = self._t.call(
            lambda t: self._stub.Open(request, timeout=t, metadata=self._t.metadata), timeout_s
        )
        return _info(reply.session)

    def describe(self, session: str, *, timeout_s: float | None = None) -> SessionInfo:
        request = sessions_pb2.DescribeSessionRequest(id=session)
        reply = self._t.call(
            lambda t: self._stub.Describe(request, timeout=t, metadata=self._t.metadata), timeout_s
        )
        return _info(reply.session)

    def ledger(self, session: str, *, timeout_s: float | None = None) -> list[LedgerEntry]:
        """What the session's closed children appended to it, most recent first."""
        request = sessions_pb2.DescribeSessionRequest(id=session, with_ledger=True)
        reply = self._t.call(
            lambda t: self._stub.Describe(request, timeout=t, metadata=self._t.metadata), timeout_s
        )
        return [
            LedgerEntry(
                e.child, e.label, e.bytes, e.tokens, CloseReason(e.reason), e.closed_unix_ms
            )
            for e in reply.ledger
        ]

    def list(self, root: str = "", *, timeout_s: float | None = None) -> list[SessionInfo]:
        """The session tree (or ``root``'s subtree), parents before children."""
        request = sessions_pb2.ListSessionsRequest(root=root)
        reply = self._t.call(
            lambda t: self._stub.List(request, timeout=t, metadata=self._t.metadata), timeout_s
        )
        return [_info(s) for s in reply.sessions]

    def close(
        self,
        session: str,
        result: bytes | str = b"",
        *,
        result_tokens: int = 0,
        timeout_s: float | None = None,
    ) -> CloseResult:
        """Free everything ``session`` (and its open children) owns; ``result`` (at
        most 1 KiB by default) is appended to the parent's scratchpad."""
        payload = result.encode() if isinstance(result, str) else result
        request = sessions_pb2.CloseSessionRequest(
            id=session, result=payload, result_tokens=result_tokens
        )
        reply = self._t.call(
            lambda t: self._stub.Close(request, timeout=t, metadata=self._t.metadata), timeout_s
        )
        return CloseResult(
            freed={Tier(u.tier): u.bytes for u in reply.freed},
            sessions_closed=reply.sessions_closed,
            objects_freed=reply.objects_freed,
            records_freed=reply.records_freed,
            result_record_id=reply.result_record_id,
        )

    def heartbeat(self, session: str, *, timeout_s: float | None = None) -> int:
        request = sessions_pb2.HeartbeatRequest(id=session)
        reply = self._t.call(
            lambda t: self._stub.Heartbeat(request, timeout=t, metadata=self._t.metadata), timeout_s
        )
        return int(reply.expires_unix_ms)
