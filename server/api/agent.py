"""Servicers of the agent-memory services: sessions, scratchpad, operators.
They convert messages and delegate; every rule lives in the services."""

from __future__ import annotations

from collections.abc import Iterator

import grpc

from tiermem.server.api.convert import acting_session
from tiermem.server.errors import InvalidArgument
from tiermem.server.model import Tier
from tiermem.server.operators.runner import OperatorRunner
from tiermem.server.scratch.records import Record, RecordDurability
from tiermem.server.scratch.service import NewRecord, ReplayFilter, ScratchService
from tiermem.server.services.guard import Role, current_principal
from tiermem.server.sessions.model import Grant, OpenSpec, Session, SessionView
from tiermem.server.sessions.service import SessionService
from tiermem.v1 import (
    operators_pb2,
    operators_pb2_grpc,
    scratch_pb2,
    scratch_pb2_grpc,
    sessions_pb2,
    sessions_pb2_grpc,
)


def _tier(value: int) -> Tier:
    try:
        return Tier(value)
    except ValueError:
        raise InvalidArgument(f"unknown tier {value}") from None


def _session_info(view: SessionView) -> sessions_pb2.SessionInfo:
    s: Session = view.session
    return sessions_pb2.SessionInfo(
        id=s.id,
        parent=s.parent,
        label=s.label,
        namespace=s.namespace,
        state=int(s.state),  # type: ignore[arg-type]
        quotas=[
            sessions_pb2.TierQuota(tier=int(t), bytes=q)  # type: ignore[arg-type]
            for t, q in sorted(s.quotas.items())
        ],
        created_unix_ms=s.created_ms,
        expires_unix_ms=s.expires_ms,
        lease_s=s.lease_s,
        heartbeat_unix_ms=s.heartbeat_ms,
        grants=[
            sessions_pb2.Grant(namespace=g.namespace, kind=int(g.kind), key_prefix=g.key_prefix)  # type: ignore[arg-type]
            for g in s.grants
        ],
        children=sorted(s.children),
        usage=[
            sessions_pb2.TierUsage(tier=int(t), bytes=b, objects=n)  # type: ignore[arg-type]
            for t, (b, n) in sorted(view.usage.items())
        ],
        ledger_bytes=s.ledger_bytes,
        ledger_tokens=s.ledger_tokens,
        children_closed=s.children_closed,
        depth=view.depth,
    )


class SessionServicer(sessions_pb2_grpc.SessionServiceServicer):
    def __init__(self, sessions: SessionService) -> None:
        self._sessions = sessions

    def Open(
        self, request: sessions_pb2.OpenSessionRequest, context: grpc.ServicerContext
    ) -> sessions_pb2.OpenSessionResponse:
        namespace = request.namespace
        if not namespace:
            parent = self._sessions.get(request.parent) if request.parent else None
            namespace = parent.namespace if parent is not None else "default"
        # The interceptor checked only a namespace the request names; a child
        # takes its parent's, which the caller must be granted as well, and a
        # parent's record changes (its children, its ledger) when a child opens.
        self._sessions.store.guard.authorize(namespace, Role.WRITE)
        if request.parent:
            self._sessions.authorize(request.parent, Role.WRITE)
        spec = OpenSpec(
            parent=request.parent,
            label=request.label,
            quotas={_tier(int(q.tier)): int(q.bytes) for q in request.quotas},
            ttl_s=int(request.ttl_s),
            lease_s=int(request.lease_s),
            # a grant naming no namespace is for the session's own
            grants=[
                Grant.checked(g.namespace or namespace, int(g.kind), g.key_prefix)
                for g in request.grants
            ],
            namespace=namespace,
            id=request.id,
        )
        session = self._sessions.open(spec, acting_session(context))
        return sessions_pb2.OpenSessionResponse(session=_session_info(SessionView(session, {})))

    def Describe(
        self, request: sessions_pb2.DescribeSessionRequest, context: grpc.ServicerContext
    ) -> sessions_pb2.DescribeSessionResponse:
        self._sessions.authorize(request.id, Role.READ)
        view = self._sessions.describe(request.id)
        reply = sessions_pb2.DescribeSessionResponse(session=_session_info(view))
        if request.with_ledger:
            for e in self._sessions.ledger(request.id):
                reply.ledger.add(
                    child=e.child,
                    label=e.label,
                    bytes=e.bytes,
                    tokens=e.tokens,
                    reason=int(e.reason),
                    closed_unix_ms=e.closed_ms,
                )
        return reply

    def List(
        self, request: sessions_pb2.ListSessionsRequest, context: grpc.ServicerContext
    ) -> sessions_pb2.ListSessionsResponse:
        who = current_principal.get()  # only sessions of namespaces it may read
        return sessions_pb2.ListSessionsResponse(
            sessions=[
                _session_info(v)
                for v in self._sessions.tree(request.root)
                if who.allows(v.session.namespace or "default", Role.READ)
            ]
        )

    def Close(
        self, request: sessions_pb2.CloseSessionRequest, context: grpc.ServicerContext
    ) -> sessions_pb2.CloseSessionResponse:
        self._sessions.authorize(request.id, Role.WRITE)
        report = self._sessions.close(
            request.id,
            bytes(request.result),
            int(request.result_tokens),
            caller=acting_session(context),
        )
        return sessions_pb2.CloseSessionResponse(
            freed=[
                sessions_pb2.TierUsage(tier=int(t), bytes=b)  # type: ignore[arg-type]
                for t, b in sorted(report.freed.items())
            ],
            sessions_closed=report.sessions_closed,
            objects_freed=report.objects_freed,
            records_freed=report.records_freed,
            result_record_id=report.result_record_id,
        )

    def Heartbeat(
        self, request: sessions_pb2.HeartbeatRequest, context: grpc.ServicerContext
    ) -> sessions_pb2.HeartbeatResponse:
        self._sessions.authorize(request.id, Role.WRITE)
        return sessions_pb2.HeartbeatResponse(expires_unix_ms=self._sessions.heartbeat(request.id))


_DURABILITY = {0: RecordDurability.LOGGED, **{int(d): d for d in RecordDurability}}


def _new_records(request: scratch_pb2.AppendRequest) -> list[NewRecord]:
    out = []
    for r in request.records:
        durability = _DURABILITY.get(r.durability)
        if durability is None:
            raise InvalidArgument(f"unknown record durability {r.durability}")
        out.append(
            NewRecord(
                kind=r.kind,
                payload=r.payload,
                key=r.key,
                tags=tuple(r.tags),
                key_node=r.key_node,
                ts_ms=r.ts_unix_ms,
                durability=durability,
            )
        )
    return out


def _record_msg(r: Record) -> scratch_pb2.ScratchRecord:
    return scratch_pb2.ScratchRecord(
        id=r.id,
        session=r.session,
        ts_unix_ms=r.ts_ms,
        kind=r.kind,  # type: ignore[arg-type]
        key=r.key,
        payload=r.payload,
        tags=r.tags,
        key_node=r.key_node,
        flushed=r.flushed,
    )


class ScratchServicer(scratch_pb2_grpc.ScratchServiceServicer):
    def __init__(self, scratch: ScratchService, page_records: int) -> None:
        self._scratch = scratch
        self._page = page_records

    def Append(
        self, request: scratch_pb2.AppendRequest, context: grpc.ServicerContext
    ) -> scratch_pb2.AppendResponse:
        self._scratch.sessions.authorize(request.session, Role.WRITE)
        first, count = self._scratch.append(
            request.session, _new_records(request), acting_session(context)
        )
        return scratch_pb2.AppendResponse(first_id=first, count=count)

    def AppendStream(
        self, request_iterator: Iterator[scratch_pb2.AppendRequest], context: grpc.ServicerContext
    ) -> scratch_pb2.AppendResponse:
        caller = acting_session(context)
        first, total = 0, 0
        for request in request_iterator:
            self._scratch.sessions.authorize(request.session, Role.WRITE)
            start, count = self._scratch.append(request.session, _new_records(request), caller)
            first = first or start
            total += count
        return scratch_pb2.AppendResponse(first_id=first, count=total)

    def Replay(
        self, request: scratch_pb2.ReplayRequest, context: grpc.ServicerContext
    ) -> Iterator[scratch_pb2.ReplayResponse]:
        flt = ReplayFilter(
            since_ms=int(request.since_unix_ms),
            until_ms=int(request.until_unix_ms),
            kinds=frozenset(int(k) for k in request.kinds),
            tags=frozenset(request.tags),
            key=request.key,
            limit=int(request.limit),
            after_id=int(request.after_id),
        )
        self._scratch.sessions.authorize(request.session, Role.READ)
        records = self._scratch.replay(request.session, flt, acting_session(context))
        for start in range(0, len(records), self._page):
            yield scratch_pb2.ReplayResponse(
                records=[_record_msg(r) for r in records[start : start + self._page]]
            )

    def Flush(
        self, request: scratch_pb2.FlushRequest, context: grpc.ServicerContext
    ) -> scratch_pb2.FlushResponse:
        report = self._scratch.flush("client")
        return scratch_pb2.FlushResponse(
            records=report.records,
            deduplicated=report.deduplicated,
            merged=report.merged,
            stored_bytes=report.stored_bytes,
        )

    def Query(
        self, request: scratch_pb2.QueryRequest, context: grpc.ServicerContext
    ) -> scratch_pb2.QueryResponse:
        self._scratch.sessions.authorize(request.session, Role.READ)
        hits = self._scratch.query(
            request.session,
            request.text,
            int(request.k) or 10,
            [int(k) for k in request.kinds],
            list(request.tags),
            acting_session(context),
        )
        return scratch_pb2.QueryResponse(
            hits=[scratch_pb2.QueryHit(record=_record_msg(r), score=score) for r, score in hits]
        )

    def Stats(
        self, request: scratch_pb2.ScratchStatsRequest, context: grpc.ServicerContext
    ) -> scratch_pb2.ScratchStatsResponse:
        s = self._scratch.stats()
        return scratch_pb2.ScratchStatsResponse(
            buffered_records=s.buffered_records,
            buffered_bytes=s.buffered_bytes,
            unlogged_records=s.unlogged_records,
            stored_records=s.stored_records,
            stored_bytes=s.stored_bytes,
            appended_records=s.appended_records,
            flushes=s.flushes,
            write_batches=s.write_batches,
            index_updates=s.index_updates,
            deduplicated=s.deduplicated,
            merged=s.merged,
            flushes_by_reason=s.flushes_by_reason,
            embedder=s.embedder,
            mode=s.mode,
            index_bytes=s.index_bytes,
        )


class OperatorServicer(operators_pb2_grpc.OperatorServiceServicer):
    def __init__(self, runner: OperatorRunner) -> None:
        self._runner = runner

    def ListOperators(
        self, request: operators_pb2.ListOperatorsRequest, context: grpc.ServicerContext
    ) -> operators_pb2.ListOperatorsResponse:
        import json

        reply = operators_pb2.ListOperatorsResponse()
        for op in self._runner.list():
            reply.operators.add(
                name=op.name,
                description=op.description,
                args=[
                    operators_pb2.ArgSpec(
                        name=a.name,
                        type=a.type,
                        required=a.required,
                        default_json="" if a.required else json.dumps(a.default),
                        description=a.description,
                    )
                    for a in op.args
                ],
                returns=op.returns,
                origin=op.origin,
                timeout_s=self._runner.timeout_of(op),
            )
        return reply

    def Invoke(
        self, request: operators_pb2.InvokeRequest, context: grpc.ServicerContext
    ) -> operators_pb2.InvokeResponse:
        self._runner.sessions.authorize(request.session, Role.READ)
        result = self._runner.invoke(
            request.name,
            request.args_json,
            request.session,
            float(request.timeout_s),
            acting_session(context),
        )
        return operators_pb2.InvokeResponse(
            result_json=result.result_json, elapsed_s=result.elapsed_s
        )
