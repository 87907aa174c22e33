"""The agent scratchpad from the client: ``client.scratch``.

Appends are acknowledged per their durability: BUFFERED (in the daemon's DRAM
buffer; a crash may lose the last ``buffered_window_ms``), LOGGED (default: in
the daemon's log, survives kill -9) or SYNC (fsynced). ``append_stream`` packs
many records per message for high rates."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

from tiermem.client._transport import Transport
from tiermem.v1 import scratch_pb2, scratch_pb2_grpc


class RecordKind(IntEnum):
    OBSERVATION = 1
    THOUGHT = 2
    TOOL_CALL = 3
    DECISION = 4
    RESULT = 5


class RecordDurability(IntEnum):
    BUFFERED = 1
    LOGGED = 2
    SYNC = 3


@dataclass(frozen=True, slots=True)
class NewRecord:
    kind: RecordKind
    payload: bytes | str
    key: str = ""  # records with one key update one entry (the latest wins)
    tags: Sequence[str] = ()
    key_node: bool = False  # flush right after it
    ts_unix_ms: int = 0
    durability: RecordDurability = RecordDurability.LOGGED


@dataclass(frozen=True, slots=True)
class ScratchRecord:
    id: int
    session: str
    ts_unix_ms: int
    kind: RecordKind
    key: str
    payload: bytes
    tags: tuple[str, ...]
    key_node: bool
    flushed: bool


@dataclass(frozen=True, slots=True)
class FlushResult:
    records: int
    deduplicated: int
    merged: int
    stored_bytes: int


@dataclass(frozen=True, slots=True)
class ScratchStats:
    buffered_records: int
    buffered_bytes: int
    unlogged_records: int
    stored_records: int
    stored_bytes: int
    appended_records: int
    flushes: int
    write_batches: int
    index_updates: int
    deduplicated: int
    merged: int
    flushes_by_reason: dict[str, int] = field(default_factory=dict)
    embedder: str = ""
    mode: str = ""
    index_bytes: int = 0


def _msg(r: NewRecord) -> scratch_pb2.NewRecord:
    return scratch_pb2.NewRecord(
        kind=int(r.kind),  # type: ignore[arg-type]
        key=r.key,
        payload=r.payload.encode() if isinstance(r.payload, str) else r.payload,
        tags=list(r.tags),
        key_node=r.key_node,
        ts_unix_ms=r.ts_unix_ms,
        durability=int(r.durability),  # type: ignore[arg-type]
    )


def _record(m: scratch_pb2.ScratchRecord) -> ScratchRecord:
    return ScratchRecord(
        id=m.id,
        session=m.session,
        ts_unix_ms=m.ts_unix_ms,
        kind=RecordKind(m.kind),
        key=m.key,
        payload=m.payload,
        tags=tuple(m.tags),
        key_node=m.key_node,
        flushed=m.flushed,
    )


class ScratchClient:
    def __init__(self, transport: Transport) -> None:
        self._t = transport
        self._stub = scratch_pb2_grpc.ScratchServiceStub(transport.channel)

    def append(
        self,
        session: str,
        kind: RecordKind,
        payload: bytes | str,
        *,
        key: str = "",
        tags: Sequence[str] = (),
        key_node: bool = False,
        durability: RecordDurability = RecordDurability.LOGGED,
        timeout_s: float | None = None,
    ) -> int:
        """Append one record; returns its id."""
        return self.append_many(
            session,
            [NewRecord(kind, payload, key, tags, key_node, 0, durability)],
            timeout_s=timeout_s,
        )[0]

    def append_many(
        self, session: str, records: Sequence[NewRecord], *, timeout_s: float | None = None
    ) -> list[int]:
        """Append records in one call; returns their ids."""
        request = scratch_pb2.AppendRequest(session=session, records=[_msg(r) for r in records])
        reply = self._t.call(
            lambda t: self._stub.Append(request, timeout=t, metadata=self._t.metadata), timeout_s
        )
        return list(range(reply.first_id, reply.first_id + reply.count))

    def append_stream(
        self,
        session: str,
        records: Iterable[NewRecord],
        *,
        per_message: int = 256,
        timeout_s: float | None = None,
    ) -> int:
        """Stream records (packed ``per_message`` to a message); returns how many
        were appended. Not retried: a failure mid-stream may have appended a prefix."""

        def messages() -> Iterator[scratch_pb2.AppendRequest]:
            batch: list[scratch_pb2.NewRecord] = []
            for r in records:
                batch.append(_msg(r))
                if len(batch) >= per_message:
                    yield scratch_pb2.AppendRequest(session=session, records=batch)
                    batch = []
            if batch:
                yield scratch_pb2.AppendRequest(session=session, records=batch)

        reply = self._t.call(
            lambda t: self._stub.AppendStream(messages(), timeout=t, metadata=self._t.metadata),
            timeout_s,
        )
        return int(reply.count)

    def replay(
        self,
        session: str,
        *,
        since_unix_ms: int = 0,
        until_unix_ms: int = 0,
        kinds: Sequence[RecordKind] = (),
        tags: Sequence[str] = (),
        key: str = "",
        limit: int = 0,
        after_id: int = 0,
        timeout_s: float | None = None,
    ) -> list[ScratchRecord]:
        """The session's records in append order (buffered ones included)."""
        request = scratch_pb2.ReplayRequest(
            session=session,
            since_unix_ms=since_unix_ms,
            until_unix_ms=until_unix_ms,
            kinds=[int(k) for k in kinds],  # type: ignore[misc]
            tags=list(tags),
            key=key,
            limit=limit,
            after_id=after_id,
        )

        def call(t: float) -> list[ScratchRecord]:
            stream = self._stub.Replay(request, timeout=t, metadata=self._t.metadata)
            return [_record(m) for page in stream for m in page.records]

        return self._t.call(call, timeout_s)

    def flush(self, session: str = "", *, timeout_s: float | None = None) -> FlushResult:
        request = scratch_pb2.FlushRequest(session=session)
        reply = self._t.call(
            lambda t: self._stub.Flush(request, timeout=t, metadata=self._t.metadata), timeout_s
        )
        return FlushResult(reply.records, reply.deduplicated, reply.merged, reply.stored_bytes)

    def query(
        self,
        session: str,
        text: str,
        *,
        k: int = 10,
        kinds: Sequence[RecordKind] = (),
        tags: Sequence[str] = (),
        timeout_s: float | None = None,
    ) -> list[tuple[ScratchRecord, float]]:
        """Flushed records of the session closest in meaning to ``text`` (cosine)."""
        request = scratch_pb2.QueryRequest(
            session=session,
            text=text,
            k=k,
            kinds=[int(x) for x in kinds],  # type: ignore[misc]
            tags=list(tags),
        )
        reply = self._t.call(
            lambda t: self._stub.Query(request, timeout=t, metadata=self._t.metadata), timeout_s
        )
        return [(_record(h.record), h.score) for h in reply.hits]

    def stats(self, *, timeout_s: float | None = None) -> ScratchStats:
        reply = self._t.call(
            lambda t: self._stub.Stats(
                scratch_pb2.ScratchStatsRequest(), timeout=t, metadata=self._t.metadata
            ),
            timeout_s,
        )
        return ScratchStats(
            buffered_records=reply.buffered_records,
            buffered_bytes=reply.buffered_bytes,
            unlogged_records=reply.unlogged_records,
            stored_records=reply.stored_records,
            stored_bytes=reply.stored_bytes,
            appended_records=reply.appended_records,
            flushes=reply.flushes,
            write_batches=reply.write_batches,
            index_updates=reply.index_updates,
            deduplicated=reply.deduplicated,
            merged=reply.merged,
            flushes_by_reason=dict(reply.flushes_by_reason),
            embedder=reply.embedder,
            mode=reply.mode,
            index_bytes=reply.index_bytes,
        )
