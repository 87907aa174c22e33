"""Vector collections from the client: numpy in, numpy out.

``Client.vectors`` is a ``VectorClient``::

    c.vectors.create("docs", dimension=384, metric="cosine", index="hnsw")
    c.vectors.upsert("docs", ids, vectors, payloads=[{"lang": "en"}, ...])
    hits = c.vectors.search("docs", queries, k=10, where={"lang": "en"})
    hits.ids, hits.distances            # (nq, k) int64 / float32; id -1 = no result

Upserts and searches larger than one message are split into several calls
(``max_message_bytes``); each upsert call is durable on its own, so a failure
part-way leaves the earlier chunks stored.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from tiermem.client._transport import Transport
from tiermem.client.errors import InvalidArgumentError
from tiermem.client.types import Kind, Tier
from tiermem.v1 import common_pb2, vectors_pb2, vectors_pb2_grpc

T = TypeVar("T")

#: Keep requests and replies under this many bytes (the daemon's default limit is 8 MiB).
DEFAULT_MAX_MESSAGE_BYTES = 4 << 20


class Metric(IntEnum):
    L2 = 1
    INNER_PRODUCT = 2
    COSINE = 3


class IndexType(IntEnum):
    AUTO = 1
    FLAT = 2
    HNSW = 3
    IVF_PQ = 4


class Op(IntEnum):
    EQ = 1
    NE = 2
    IN = 3
    LT = 4
    LE = 5
    GT = 6
    GE = 7
    EXISTS = 8


Scalar = str | int | float | bool


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """A reference from a vector to another tiermem object."""

    kind: Kind
    key: str
    namespace: str


@dataclass(frozen=True, slots=True)
class Payload:
    fields: Mapping[str, Scalar] = field(default_factory=dict)
    ref: ObjectRef | None = None
    session: str = ""


@dataclass(frozen=True, slots=True)
class Condition:
    """``field op value``; IN takes a sequence of values, EXISTS none."""

    field: str
    op: Op
    value: Scalar | Sequence[Scalar] | None = None


@dataclass(frozen=True, slots=True)
class IndexParams:
    hnsw_m: int = 0
    hnsw_ef_construction: int = 0
    hnsw_ef_search: int = 0
    ivf_nlist: int = 0
    ivf_nprobe: int = 0
    pq_m: int = 0
    pq_nbits: int = 0


@dataclass(frozen=True, slots=True)
class CollectionInfo:
    namespace: str
    name: str
    dimension: int
    metric: Metric
    index_type: IndexType
    built_index: IndexType
    params: IndexParams
    session: str
    loaded: bool
    tier: Tier
    count: int
    memory_bytes: int
    snapshot_bytes: int
    log_seq: int
    snapshot_seq: int
    created_unix_ms: int
    accessed_unix_ms: int


@dataclass(slots=True)
class SearchResults:
    ids: npt.NDArray[np.int64]  # (nq, k), -1 = no result
    distances: npt.NDArray[np.float32]  # (nq, k)
    payloads: builtins.list[builtins.list[Payload | None]] | None = None  # [nq][k]


def _value(v: Scalar) -> vectors_pb2.PayloadValue:
    if isinstance(v, bool):
        return vectors_pb2.PayloadValue(b=v)
    if isinstance(v, int | np.integer):
        return vectors_pb2.PayloadValue(i=int(v))
    if isinstance(v, float | np.floating):
        return vectors_pb2.PayloadValue(f=float(v))
    if isinstance(v, str):
        return vectors_pb2.PayloadValue(s=v)
    raise TypeError(f"payload values are str, int, float or bool, not {type(v).__name__}")


def _from_value(v: vectors_pb2.PayloadValue) -> Scalar:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else ""


def payload_msg(p: Payload | Mapping[str, Scalar] | None) -> vectors_pb2.VectorPayload:
    if p is None:
        return vectors_pb2.VectorPayload()
    if not isinstance(p, Payload):
        p = Payload(fields=p)
    msg = vectors_pb2.VectorPayload(
        fields={k: _value(v) for k, v in p.fields.items()}, session=p.session
    )
    if p.ref is not None:
        msg.ref.CopyFrom(
            common_pb2.ObjectKey(
                namespace=p.ref.namespace,
                kind=int(p.ref.kind),  # type: ignore[arg-type]
                key=p.ref.key,
            )
        )
    return msg


def payload_from(msg: vectors_pb2.VectorPayload) -> Payload | None:
    if not msg.fields and not msg.HasField("ref") and not msg.session:
        return None
    ref = None
    if msg.HasField("ref"):
        ref = ObjectRef(Kind(msg.ref.kind), msg.ref.key, msg.ref.namespace)
    return Payload({k: _from_value(v) for k, v in msg.fields.items()}, ref, msg.session)


def filter_msg(
    where: Mapping[str, Any] | Sequence[Condition] | None, session: str
) -> vectors_pb2.Filter:
    """``where``: ``{"lang": "en", "tag": ["a", "b"]}`` (equality / IN), or Conditions."""
    msg = vectors_pb2.Filter(session=session)
    if where is None:
        return msg
    conditions: list[Condition]
    if isinstance(where, Mapping):
        conditions = [
            Condition(k, Op.IN, v) if isinstance(v, list | tuple) else Condition(k, Op.EQ, v)
            for k, v in where.items()
        ]
    else:
        conditions = list(where)
    for c in conditions:
        if c.value is None:
            values: list[Scalar] = []
        elif isinstance(c.value, list | tuple):
            values = list(c.value)
        else:
            values = [c.value]  # type: ignore[list-item]
        msg.conditions.append(
            vectors_pb2.Condition(
                field=c.field,
                op=int(c.op),  # type: ignore[arg-type]
                values=[_value(v) for v in values],
            )
        )
    return msg


def info_from(msg: vectors_pb2.CollectionInfo) -> CollectionInfo:
    p = msg.params
    return CollectionInfo(
        namespace=msg.collection.namespace,
        name=msg.collection.name,
        dimension=msg.dimension,
        metric=Metric(msg.metric),
        index_type=IndexType(msg.index_type),
        built_index=IndexType(msg.built_index),
        params=IndexParams(
            p.hnsw_m,
            p.hnsw_ef_construction,
            p.hnsw_ef_search,
            p.ivf_nlist,
            p.ivf_nprobe,
            p.pq_m,
            p.pq_nbits,
        ),
        session=msg.session,
        loaded=msg.state == vectors_pb2.LOADED,
        tier=Tier(msg.tier),
        count=msg.count,
        memory_bytes=msg.memory_bytes,
        snapshot_bytes=msg.snapshot_bytes,
        log_seq=msg.log_seq,
        snapshot_seq=msg.snapshot_seq,
        created_unix_ms=msg.created_unix_ms,
        accessed_unix_ms=msg.accessed_unix_ms,
    )


def _enum_arg(cls: type[Metric] | type[IndexType], value: Any) -> int:
    if isinstance(value, str):
        try:
            return int(cls[value.upper().replace("-", "_")])
        except KeyError:
            names = ", ".join(m.name.lower() for m in cls)
            raise ValueError(f"unknown {cls.__name__} {value!r}: use {names}") from None
    return int(cls(value))


def _chunks(total: int, row_bytes: Sequence[int] | int, limit: int) -> Iterator[slice]:
    """Consecutive row slices whose bytes stay under ``limit`` (at least one row each)."""
    start = 0
    while start < total:
        size, end = 0, start
        while end < total:
            b = row_bytes if isinstance(row_bytes, int) else row_bytes[end]
            if end > start and size + b > limit:
                break
            size += b
            end += 1
        yield slice(start, end)
        start = end


class VectorClient:
    """Vector collections over a shared ``Transport`` (see ``Client.vectors``)."""

    def __init__(
        self,
        transport: Transport,
        namespace: str = "default",
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    ) -> None:
        self.transport = transport
        self.namespace = namespace
        self.max_message_bytes = max_message_bytes
        self._stub = vectors_pb2_grpc.VectorServiceStub(transport.channel)
        self._md = transport.metadata

    def _ref(self, name: str, namespace: str | None) -> vectors_pb2.CollectionRef:
        return vectors_pb2.CollectionRef(namespace=namespace or self.namespace, name=name)

    def _call(self, fn: Callable[[float], T], timeout_s: float | None) -> T:
        return self.transport.call(fn, timeout_s)

    # -- collections ----------------------------------------------------------
    def create(
        self,
        name: str,
        dimension: int,
        *,
        metric: Metric | str = Metric.L2,
        index: IndexType | str = IndexType.AUTO,
        params: IndexParams | None = None,
        session: str = "",
        if_absent: bool = False,
        namespace: str | None = None,
        timeout_s: float | None = None,
    ) -> CollectionInfo:
        p = params or IndexParams()
        request = vectors_pb2.CreateCollectionRequest(
            collection=self._ref(name, namespace),
            dimension=dimension,
            metric=_enum_arg(Metric, metric),  # type: ignore[arg-type]
            index_type=_enum_arg(IndexType, index),  # type: ignore[arg-type]
            params=vectors_pb2.IndexParams(
                hnsw_m=p.hnsw_m,
                hnsw_ef_construction=p.hnsw_ef_construction,
                hnsw_ef_search=p.hnsw_ef_search,
                ivf_nlist=p.ivf_nlist,
                ivf_nprobe=p.ivf_nprobe,
                pq_m=p.pq_m,
                pq_nbits=p.pq_nbits,
            ),
            session=session,
            if_absent=if_absent,
        )
        reply = self._call(
            lambda t: self._stub.CreateCollection(request, timeout=t, metadata=self._md), timeout_s
        )
        return info_from(reply.info)

    def describe(
        self, name: str, *, namespace: str | None = None, timeout_s: float | None = None
    ) -> CollectionInfo:
        request = vectors_pb2.DescribeCollectionRequest(collection=self._ref(name, namespace))
        reply = self._call(
            lambda t: self._stub.DescribeCollection(request, timeout=t, metadata=self._md),
            timeout_s,
        )
        return info_from(reply.info)

    def list(
        self, *, session: str = "", namespace: str | None = None, timeout_s: float | None = None
    ) -> builtins.list[CollectionInfo]:
        request = vectors_pb2.ListCollectionsRequest(
            namespace=namespace or self.namespace, session=session
        )
        reply = self._call(
            lambda t: self._stub.ListCollections(request, timeout=t, metadata=self._md), timeout_s
        )
        return [info_from(m) for m in reply.collections]

    def drop(
        self, name: str, *, namespace: str | None = None, timeout_s: float | None = None
    ) -> bool:
        request = vectors_pb2.DropCollectionRequest(collection=self._ref(name, namespace))
        reply = self._call(
            lambda t: self._stub.DropCollection(request, timeout=t, metadata=self._md), timeout_s
        )
        return bool(reply.dropped)

    # -- vectors ---------------------------------------------------------------
    def upsert(
        self,
        name: str,
        ids: Sequence[int] | npt.NDArray[Any],
        vectors: npt.ArrayLike,
        payloads: Sequence[Payload | Mapping[str, Scalar] | None] | None = None,
        *,
        namespace: str | None = None,
        timeout_s: float | None = None,
    ) -> int:
        """Insert or replace ``vectors`` (n x d) under ``ids``; returns how many.
        Each call the batch is split into is durable when it returns."""
        id_arr = np.ascontiguousarray(ids, dtype="<i8").ravel()
        vec = np.ascontiguousarray(vectors, dtype="<f4")
        if vec.ndim == 1:
            vec = vec.reshape(1, -1)
        if len(vec) != len(id_arr):
            raise ValueError(f"{len(id_arr)} ids but {len(vec)} vectors")
        msgs = [payload_msg(p) for p in payloads] if payloads is not None else []
        if msgs and len(msgs) != len(id_arr):
            raise ValueError(f"{len(id_arr)} ids but {len(msgs)} payloads")
        row = 8 + 4 * vec.shape[1]
        sizes: int | list[int] = [row + m.ByteSize() + 8 for m in msgs] if msgs else row
        ref = self._ref(name, namespace)
        done = 0
        for part in _chunks(len(id_arr), sizes, self.max_message_bytes):
            request = vectors_pb2.UpsertRequest(
                collection=ref,
                ids=id_arr[part].tobytes(),
                vectors=vec[part].tobytes(),
                payloads=msgs[part] if msgs else [],
            )
            reply = self._call(
                lambda t, r=request: self._stub.Upsert(r, timeout=t, metadata=self._md),  # type: ignore[misc]
                timeout_s,
            )
            done += reply.upserted
        return done

    def delete(
        self,
        name: str,
        ids: Sequence[int] | npt.NDArray[Any],
        *,
        namespace: str | None = None,
        timeout_s: float | None = None,
    ) -> int:
        """Delete by id; returns how many existed."""
        id_arr = np.ascontiguousarray(ids, dtype="<i8").ravel()
        ref = self._ref(name, namespace)
        deleted = 0
        for part in _chunks(len(id_arr), 8, self.max_message_bytes):
            request = vectors_pb2.DeleteVectorsRequest(collection=ref, ids=id_arr[part].tobytes())
            reply = self._call(
                lambda t, r=request: self._stub.Delete(r, timeout=t, metadata=self._md),  # type: ignore[misc]
                timeout_s,
            )
            deleted += reply.deleted
        return deleted

    def search(
        self,
        name: str,
        queries: npt.ArrayLike,
        k: int = 10,
        *,
        where: Mapping[str, Any] | Sequence[Condition] | None = None,
        session: str = "",
        include_payloads: bool = False,
        ef_search: int = 0,
        nprobe: int = 0,
        namespace: str | None = None,
        timeout_s: float | None = None,
    ) -> SearchResults:
        """k nearest neighbours of each query row (a 1-D array is one query)."""
        q = np.ascontiguousarray(queries, dtype="<f4")
        if q.ndim == 1:
            q = q.reshape(1, -1)
        if len(q) == 0:
            raise ValueError("search needs at least one query row")
        flt = filter_msg(where, session)
        ref = self._ref(name, namespace)
        # payloads are guessed at 512 bytes a hit; a reply that would be larger
        # than a message is refused by the daemon, and the part is split
        per_query = max(4 * q.shape[1], 12 * k + (512 * k if include_payloads else 0))

        def search_rows(rows: slice) -> builtins.list[vectors_pb2.SearchResponse]:
            request = vectors_pb2.SearchRequest(
                collection=ref,
                queries=q[rows].tobytes(),
                k=k,
                filter=flt,
                include_payloads=include_payloads,
                hnsw_ef_search=ef_search,
                ivf_nprobe=nprobe,
            )
            try:
                return [
                    self._call(
                        lambda t: self._stub.Search(request, timeout=t, metadata=self._md),
                        timeout_s,
                    )
                ]
            except InvalidArgumentError as exc:
                n = rows.stop - rows.start
                if n < 2 or not exc.message.startswith("results with payloads are"):
                    raise
                middle = rows.start + n // 2
                return search_rows(slice(rows.start, middle)) + search_rows(
                    slice(middle, rows.stop)
                )

        ids, dists = [], []
        payloads: builtins.list[builtins.list[Payload | None]] = []
        replies = [
            reply
            for part in _chunks(len(q), per_query, self.max_message_bytes)
            for reply in search_rows(part)
        ]
        for reply in replies:
            shape = (reply.nq, reply.k)
            ids.append(np.frombuffer(reply.ids, dtype="<i8").reshape(shape))
            dists.append(np.frombuffer(reply.distances, dtype="<f4").reshape(shape))
            if include_payloads:
                flat = [payload_from(m) for m in reply.payloads]
                payloads += [flat[i * reply.k : (i + 1) * reply.k] for i in range(reply.nq)]
        return SearchResults(
            np.concatenate(ids).astype(np.int64, copy=False),
            np.concatenate(dists).astype(np.float32, copy=False),
            payloads if include_payloads else None,
        )

    def count(
        self, name: str, *, namespace: str | None = None, timeout_s: float | None = None
    ) -> int:
        request = vectors_pb2.CountRequest(collection=self._ref(name, namespace))
        reply = self._call(
            lambda t: self._stub.Count(request, timeout=t, metadata=self._md), timeout_s
        )
        return int(reply.count)

    # -- placement ---------------------------------------------------------------
    def load(
        self, name: str, *, namespace: str | None = None, timeout_s: float | None = None
    ) -> float:
        """Bring the collection into memory; returns the seconds the daemon took (0 if loaded)."""
        request = vectors_pb2.LoadCollectionRequest(collection=self._ref(name, namespace))
        reply = self._call(
            lambda t: self._stub.LoadCollection(request, timeout=t, metadata=self._md), timeout_s
        )
        return float(reply.load_s)

    def unload(
        self, name: str, *, namespace: str | None = None, timeout_s: float | None = None
    ) -> bool:
        """Snapshot the collection to SSD and free its memory; False if it was not loaded."""
        request = vectors_pb2.UnloadCollectionRequest(collection=self._ref(name, namespace))
        reply = self._call(
            lambda t: self._stub.UnloadCollection(request, timeout=t, metadata=self._md),
            timeout_s,
        )
        return bool(reply.unloaded)
