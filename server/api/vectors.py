"""VectorService servicer: converts messages and delegates to services.vectors."""

from __future__ import annotations

import grpc
import numpy as np
import numpy.typing as npt

from tiermem.server.api.convert import acting_session
from tiermem.server.errors import InvalidArgument, PermissionDenied
from tiermem.server.services.guard import Role
from tiermem.server.services.vectors import CollectionInfo, VectorService
from tiermem.server.sessions.service import SessionService
from tiermem.server.vectors.payloads import scalar
from tiermem.server.vectors.types import (
    Condition,
    Filter,
    FilterOp,
    IndexKind,
    IndexParams,
    Metric,
)
from tiermem.v1 import vectors_pb2, vectors_pb2_grpc


def _ids(raw: bytes) -> npt.NDArray[np.int64]:
    if len(raw) % 8:
        raise InvalidArgument(f"ids are {len(raw)} bytes, not a whole number of int64 values")
    return np.frombuffer(raw, dtype="<i8").astype(np.int64, copy=False)


def _floats(raw: bytes, what: str) -> npt.NDArray[np.float32]:
    if len(raw) % 4:
        raise InvalidArgument(f"{what} are {len(raw)} bytes, not a whole number of float32 values")
    return np.frombuffer(raw, dtype="<f4").astype(np.float32, copy=False)


def _enum(cls: type[Metric] | type[IndexKind], value: int, default: int, what: str) -> int:
    try:
        return int(cls(value or default))
    except ValueError:
        raise InvalidArgument(f"unknown {what} {value}") from None


def filter_from_proto(msg: vectors_pb2.Filter) -> Filter:
    conditions = []
    for c in msg.conditions:
        try:
            op = FilterOp(int(c.op))
        except ValueError:
            raise InvalidArgument(f"filter on {c.field!r}: unknown op {int(c.op)}") from None
        conditions.append(Condition(c.field, op, tuple(scalar(v) for v in c.values)))
    return Filter(tuple(conditions), msg.session)


def params_from_proto(p: vectors_pb2.IndexParams) -> IndexParams:
    return IndexParams(
        p.hnsw_m, p.hnsw_ef_construction, p.hnsw_ef_search,
        p.ivf_nlist, p.ivf_nprobe, p.pq_m, p.pq_nbits,
    )  # fmt: skip


def info_to_proto(info: CollectionInfo) -> vectors_pb2.CollectionInfo:
    spec, p = info.spec, info.params
    return vectors_pb2.CollectionInfo(
        collection=vectors_pb2.CollectionRef(namespace=spec.namespace, name=spec.name),
        dimension=spec.dimension,
        metric=int(spec.metric),  # type: ignore[arg-type]
        index_type=int(spec.index),  # type: ignore[arg-type]
        built_index=int(info.built),  # type: ignore[arg-type]
        params=vectors_pb2.IndexParams(
            hnsw_m=p.hnsw_m,
            hnsw_ef_construction=p.hnsw_ef_construction,
            hnsw_ef_search=p.hnsw_ef_search,
            ivf_nlist=p.ivf_nlist,
            ivf_nprobe=p.ivf_nprobe,
            pq_m=p.pq_m,
            pq_nbits=p.pq_nbits,
        ),
        session=spec.session,
        state=vectors_pb2.LOADED if info.loaded else vectors_pb2.UNLOADED,
        tier=int(info.tier),  # type: ignore[arg-type]
        count=info.count,
        memory_bytes=info.memory_bytes,
        snapshot_bytes=info.snapshot_bytes,
        log_seq=info.log_seq,
        snapshot_seq=info.snapshot_seq,
        created_unix_ms=info.created_unix_ms,
        accessed_unix_ms=info.accessed_unix_ms,
    )


class VectorServicer(vectors_pb2_grpc.VectorServiceServicer):
    def __init__(self, vectors: VectorService, sessions: SessionService | None = None) -> None:
        self._vectors = vectors
        self._sessions = sessions

    def _owner(self, named: str, caller: str) -> str:
        """The session a new collection belongs to, by the rule for object puts:
        a caller acting as a session creates only as itself, and a session that
        was opened must still be open (a collection of a closed one would never
        be dropped by any close)."""
        owner = named or caller
        if caller and owner != caller:
            raise PermissionDenied(
                f"session {caller!r} may create collections only as itself, not as {owner!r}"
            )
        sessions = self._sessions
        known = sessions is not None and (
            sessions.get(owner) is not None or sessions.was_closed(owner)
        )
        if owner and known and sessions is not None:
            sessions.require_open(owner)
            sessions.authorize(owner, Role.WRITE)  # its namespace, as for puts
        return owner

    def CreateCollection(
        self, request: vectors_pb2.CreateCollectionRequest, context: grpc.ServicerContext
    ) -> vectors_pb2.CreateCollectionResponse:
        ref = request.collection
        owner = self._owner(request.session, acting_session(context))
        info, created = self._vectors.create(
            ref.namespace,
            ref.name,
            int(request.dimension),
            Metric(_enum(Metric, int(request.metric), Metric.L2, "metric")),
            IndexKind(_enum(IndexKind, int(request.index_type), IndexKind.AUTO, "index type")),
            params_from_proto(request.params),
            owner,
            request.if_absent,
        )
        return vectors_pb2.CreateCollectionResponse(info=info_to_proto(info), created=created)

    def DescribeCollection(
        self, request: vectors_pb2.DescribeCollectionRequest, context: grpc.ServicerContext
    ) -> vectors_pb2.DescribeCollectionResponse:
        ref = request.collection
        info = self._vectors.describe(ref.namespace, ref.name)
        return vectors_pb2.DescribeCollectionResponse(info=info_to_proto(info))

    def ListCollections(
        self, request: vectors_pb2.ListCollectionsRequest, context: grpc.ServicerContext
    ) -> vectors_pb2.ListCollectionsResponse:
        infos = self._vectors.list_collections(request.namespace, request.session)
        return vectors_pb2.ListCollectionsResponse(collections=[info_to_proto(i) for i in infos])

    def DropCollection(
        self, request: vectors_pb2.DropCollectionRequest, context: grpc.ServicerContext
    ) -> vectors_pb2.DropCollectionResponse:
        ref = request.collection
        return vectors_pb2.DropCollectionResponse(
            dropped=self._vectors.drop(ref.namespace, ref.name)
        )

    def Upsert(
        self, request: vectors_pb2.UpsertRequest, context: grpc.ServicerContext
    ) -> vectors_pb2.UpsertResponse:
        ref = request.collection
        n, seq = self._vectors.upsert(
            ref.namespace,
            ref.name,
            _ids(request.ids),
            _floats(request.vectors, "vectors"),
            request.payloads,
        )
        return vectors_pb2.UpsertResponse(upserted=n, seq=seq)

    def Delete(
        self, request: vectors_pb2.DeleteVectorsRequest, context: grpc.ServicerContext
    ) -> vectors_pb2.DeleteVectorsResponse:
        ref = request.collection
        deleted, seq = self._vectors.delete(ref.namespace, ref.name, _ids(request.ids))
        return vectors_pb2.DeleteVectorsResponse(deleted=deleted, seq=seq)

    def Search(
        self, request: vectors_pb2.SearchRequest, context: grpc.ServicerContext
    ) -> vectors_pb2.SearchResponse:
        ref = request.collection
        result = self._vectors.search(
            ref.namespace,
            ref.name,
            _floats(request.queries, "queries"),
            int(request.k),
            filter_from_proto(request.filter),
            request.include_payloads,
            int(request.hnsw_ef_search),
            int(request.ivf_nprobe),
        )
        nq, k = result.ids.shape
        reply = vectors_pb2.SearchResponse(
            nq=nq,
            k=k,
            ids=result.ids.astype("<i8").tobytes(),
            distances=result.distances.astype("<f4").tobytes(),
        )
        if result.payloads:
            reply.payloads.extend(
                vectors_pb2.VectorPayload.FromString(raw) for raw in result.payloads
            )
        return reply

    def Count(
        self, request: vectors_pb2.CountRequest, context: grpc.ServicerContext
    ) -> vectors_pb2.CountResponse:
        ref = request.collection
        return vectors_pb2.CountResponse(count=self._vectors.count(ref.namespace, ref.name))

    def LoadCollection(
        self, request: vectors_pb2.LoadCollectionRequest, context: grpc.ServicerContext
    ) -> vectors_pb2.LoadCollectionResponse:
        ref = request.collection
        info, seconds = self._vectors.load(ref.namespace, ref.name)
        return vectors_pb2.LoadCollectionResponse(info=info_to_proto(info), load_s=seconds)

    def UnloadCollection(
        self, request: vectors_pb2.UnloadCollectionRequest, context: grpc.ServicerContext
    ) -> vectors_pb2.UnloadCollectionResponse:
        ref = request.collection
        return vectors_pb2.UnloadCollectionResponse(
            unloaded=self._vectors.unload(ref.namespace, ref.name)
        )
