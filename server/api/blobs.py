"""BlobService servicer: converts messages and delegates to services.blobs."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import grpc

from tiermem.server.api.convert import acting_session
from tiermem.server.blobs import model
from tiermem.server.blobs.model import (
    BlobInfo,
    DownloadPlan,
    Filter,
    LocalFile,
    ShmGrant,
    StreamGrant,
    UploadRing,
)
from tiermem.server.config import BlobsConfig
from tiermem.server.dataplane.identity import grpc_principal
from tiermem.server.dataplane.transfers import Ticket
from tiermem.server.errors import InvalidArgument
from tiermem.server.model import MAX_KEY_BYTES, validate_session
from tiermem.server.services.blobs import BlobService, UploadState
from tiermem.v1 import blobs_pb2, blobs_pb2_grpc, dataplane_pb2

PATHS = ("shm", "bulk", "grpc", "file")


def _owner(context: grpc.ServicerContext) -> str:
    return grpc_principal(context.invocation_metadata(), context.peer())


def _paths(requested: Iterable[str]) -> list[str]:
    paths = list(requested)
    unknown = set(paths) - set(PATHS)
    if unknown:
        raise InvalidArgument(f"unknown data paths {sorted(unknown)}; known: {list(PATHS)}")
    return paths


def lease_to_proto(grant: ShmGrant) -> blobs_pb2.BlobLease:
    return blobs_pb2.BlobLease(
        lease_id=grant.lease_id,
        arena_id=grant.arena_id,
        offset=grant.offset,
        length=grant.length,
        ttl_ms=grant.ttl_ms,
        range_offset=grant.range_offset,
    )


def info_to_proto(info: BlobInfo) -> blobs_pb2.BlobInfo:
    return blobs_pb2.BlobInfo(
        ref=blobs_pb2.BlobRef(namespace=info.namespace, key=info.key),
        size_bytes=info.size_bytes,
        sha256=info.sha256,
        media_type=info.media_type,
        tags=list(info.tags),
        session=info.session,
        created_unix_ms=info.created_unix_ms,
        embedding_spaces=list(info.spaces),
        block_bytes=info.block_bytes,
        content_refs=info.content_refs,
        cached=info.cached,
        version=info.version,
    )


def state_to_proto(state: UploadState) -> blobs_pb2.UploadReply:
    reply = blobs_pb2.UploadReply(
        upload_id=state.upload_id,
        size_bytes=state.size_bytes,
        acknowledged_offset=state.acknowledged_offset,
        block_bytes=state.block_bytes,
        expires_unix_ms=state.expires_unix_ms,
        deduplicated=state.deduplicated,
    )
    if state.blob is not None:
        reply.blob.CopyFrom(info_to_proto(state.blob))
    return reply


def header_to_proto(plan: DownloadPlan) -> blobs_pb2.DownloadHeader:
    rng = plan.range
    return blobs_pb2.DownloadHeader(
        info=info_to_proto(plan.info),
        offset=rng.offset,
        length=rng.length,
        aligned_offset=rng.aligned_offset,
        aligned_length=rng.aligned_length,
        block_bytes=plan.block_bytes,
        block_xxh3=plan.sums,
    )


def ticket_to_proto(ticket: Ticket, address: str) -> dataplane_pb2.Ticket:
    return dataplane_pb2.Ticket(
        ticket_id=ticket.ticket_id,
        address=address,
        ttl_ms=int(ticket.ttl_s * 1000),
        stream_bytes=ticket.stream_bytes,
    )


def filter_from_proto(msg: blobs_pb2.BlobFilter, config: BlobsConfig) -> Filter:
    if len(msg.key_prefix.encode()) > MAX_KEY_BYTES or "\x00" in msg.key_prefix:
        raise InvalidArgument(f"key_prefix must be at most {MAX_KEY_BYTES} bytes without NUL")
    return Filter(
        media_type=model.media_filter(msg.media_type),
        tags_all=model.tags(list(msg.tags_all), config, "tags_all"),
        tags_any=model.tags(list(msg.tags_any), config, "tags_any"),
        session=validate_session(msg.session),
        key_prefix=msg.key_prefix,
    )


class BlobServicer(blobs_pb2_grpc.BlobServiceServicer):
    def __init__(self, blobs: BlobService, chunk_bytes: int) -> None:
        self._blobs = blobs
        self._chunk = chunk_bytes

    # -- upload -------------------------------------------------------------------------
    def BeginUpload(
        self, request: blobs_pb2.BeginUploadRequest, context: grpc.ServicerContext
    ) -> blobs_pb2.UploadReply:
        spec = model.spec_from_proto(request)
        data = bytes(request.data) if request.has_data or request.data else None
        state = self._blobs.begin_upload(spec, acting_session(context), data)
        return state_to_proto(state)

    def Upload(
        self, request_iterator: Iterator[blobs_pb2.UploadChunk], context: grpc.ServicerContext
    ) -> blobs_pb2.UploadReply:
        caller = acting_session(context)
        first = next(request_iterator, None)
        if first is None or not first.upload_id:
            raise InvalidArgument("the first Upload message must name the upload (upload_id)")
        upload_id = first.upload_id
        finish: list[blobs_pb2.FinishUploadRequest] = []
        if first.HasField("finish"):
            finish.append(first.finish)

        def chunks() -> Iterator[bytes]:
            if first.data:
                yield first.data
            for msg in request_iterator:
                if msg.upload_id and msg.upload_id != upload_id:
                    raise InvalidArgument("one Upload stream carries one upload")
                if finish:
                    raise InvalidArgument("no bytes may follow the finish message")
                if msg.data:
                    yield msg.data
                if msg.HasField("finish"):
                    finish.append(msg.finish)

        state = self._blobs.upload_stream(upload_id, int(first.offset), chunks(), caller)
        if finish:
            if finish[0].upload_id and finish[0].upload_id != upload_id:
                raise InvalidArgument("the finish message names another upload")
            state = self._blobs.finish(upload_id, bytes(finish[0].sha256), caller)
        return state_to_proto(state)

    def GetUpload(
        self, request: blobs_pb2.GetUploadRequest, context: grpc.ServicerContext
    ) -> blobs_pb2.UploadReply:
        return state_to_proto(self._blobs.upload_status(request.upload_id, acting_session(context)))

    def BeginBulkUpload(
        self, request: blobs_pb2.BeginBulkUploadRequest, context: grpc.ServicerContext
    ) -> dataplane_pb2.Ticket:
        ticket = self._blobs.begin_bulk_upload(
            _owner(context), request.upload_id, int(request.offset), acting_session(context)
        )
        return ticket_to_proto(ticket, self._bulk_address())

    def ShmUpload(
        self, request_iterator: Iterator[blobs_pb2.ShmUploadRequest], context: grpc.ServicerContext
    ) -> Iterator[blobs_pb2.ShmUploadReply]:
        first = next(request_iterator, None)
        if first is None or not first.HasField("start") or not first.start.upload_id:
            raise InvalidArgument("the first ShmUpload message must be `start` naming the upload")

        def units() -> Iterator[tuple[int, int]]:
            for msg in request_iterator:
                if not msg.HasField("unit"):
                    raise InvalidArgument("only `unit` messages may follow `start` in ShmUpload")
                yield int(msg.unit.slot), int(msg.unit.length)

        start = first.start
        replies = self._blobs.shm_upload(
            _owner(context), start.upload_id, int(start.offset), units(), acting_session(context)
        )
        for item in replies:
            if isinstance(item, UploadRing):
                ring = blobs_pb2.ShmUploadReply.Ring(
                    lease=lease_to_proto(item.grant), slots=item.slots, slot_bytes=item.slot_bytes
                )
                yield blobs_pb2.ShmUploadReply(ring=ring)
            else:
                yield blobs_pb2.ShmUploadReply(freed_slot=item)

    def _bulk_address(self) -> str:
        plane = self._blobs.dataplane
        return plane.transfers.address if plane is not None else ""

    def FinishUpload(
        self, request: blobs_pb2.FinishUploadRequest, context: grpc.ServicerContext
    ) -> blobs_pb2.UploadReply:
        caller = acting_session(context)
        state = self._blobs.finish(request.upload_id, bytes(request.sha256), caller)
        return state_to_proto(state)

    def AbortUpload(
        self, request: blobs_pb2.AbortUploadRequest, context: grpc.ServicerContext
    ) -> blobs_pb2.AbortUploadResponse:
        aborted = self._blobs.abort_upload(request.upload_id, acting_session(context))
        return blobs_pb2.AbortUploadResponse(aborted=aborted)

    # -- download -----------------------------------------------------------------------
    def OpenDownload(
        self, request: blobs_pb2.OpenDownloadRequest, context: grpc.ServicerContext
    ) -> blobs_pb2.OpenDownloadResponse:
        paths = _paths(request.paths)
        plan = self._blobs.open_download(
            request.ref.namespace,
            request.ref.key,
            int(request.offset),
            int(request.length),
            acting_session(context),
            paths=paths,
            owner=_owner(context),
            lease_ttl_ms=int(request.lease_ttl_ms),
            streamed=bool(request.streamed),
        )
        reply = blobs_pb2.OpenDownloadResponse(header=header_to_proto(plan))
        grant = plan.grant
        if isinstance(grant, bytes):
            reply.inline = grant
        elif isinstance(grant, ShmGrant):
            reply.shm.CopyFrom(lease_to_proto(grant))
        elif isinstance(grant, Ticket):
            reply.bulk.CopyFrom(ticket_to_proto(grant, self._bulk_address()))
        elif isinstance(grant, StreamGrant):
            reply.stream = True
        return reply

    def Download(
        self, request: blobs_pb2.DownloadRequest, context: grpc.ServicerContext
    ) -> Iterator[blobs_pb2.DownloadChunk]:
        paths = _paths(request.paths)
        plan, views = self._blobs.download(
            request.ref.namespace,
            request.ref.key,
            int(request.offset),
            int(request.length),
            acting_session(context),
            paths=paths,
            owner=_owner(context) if paths else "",
            lease_ttl_ms=int(request.lease_ttl_ms),
        )
        chunk = self._chunk
        try:
            yield blobs_pb2.DownloadChunk(header=header_to_proto(plan))
            if isinstance(plan.grant, LocalFile):
                grant = plan.grant
                local = blobs_pb2.LocalFile(
                    path=grant.path,
                    device=grant.device,
                    inode=grant.inode,
                    size_bytes=grant.size_bytes,
                )
                yield blobs_pb2.DownloadChunk(file=local)
                return
            if isinstance(plan.grant, ShmGrant):
                yield blobs_pb2.DownloadChunk(lease=lease_to_proto(plan.grant))
                if plan.filled is None:  # the DRAM copy: all of it at once
                    yield blobs_pb2.DownloadChunk(verified_bytes=plan.range.aligned_length)
                for verified in plan.filled or ():
                    yield blobs_pb2.DownloadChunk(verified_bytes=verified)
                return
            for view in views:
                for start in range(0, len(view), chunk):
                    yield blobs_pb2.DownloadChunk(data=bytes(view[start : start + chunk]))
        finally:
            for it in (views, plan.filled):
                close = getattr(it, "close", None)
                if close is not None:
                    close()

    # -- stat, delete, list, search ------------------------------------------------------
    def StatBlob(
        self, request: blobs_pb2.StatBlobRequest, context: grpc.ServicerContext
    ) -> blobs_pb2.StatBlobResponse:
        info = self._blobs.stat(request.ref.namespace, request.ref.key, acting_session(context))
        return blobs_pb2.StatBlobResponse(info=info_to_proto(info))

    def DeleteBlob(
        self, request: blobs_pb2.DeleteBlobRequest, context: grpc.ServicerContext
    ) -> blobs_pb2.DeleteBlobResponse:
        deleted, freed = self._blobs.delete(
            request.ref.namespace, request.ref.key, acting_session(context)
        )
        return blobs_pb2.DeleteBlobResponse(deleted=deleted, content_freed=freed)

    def ListBlobs(
        self, request: blobs_pb2.ListBlobsRequest, context: grpc.ServicerContext
    ) -> blobs_pb2.ListBlobsResponse:
        infos, token = self._blobs.list_blobs(
            request.namespace,
            filter_from_proto(request.filter, self._blobs.config),
            int(request.page_size),
            request.page_token,
            acting_session(context),
        )
        return blobs_pb2.ListBlobsResponse(
            blobs=[info_to_proto(i) for i in infos], next_page_token=token
        )

    def SearchBlobs(
        self, request: blobs_pb2.SearchBlobsRequest, context: grpc.ServicerContext
    ) -> blobs_pb2.SearchBlobsResponse:
        which = request.WhichOneof("query")
        hits = self._blobs.search(
            request.namespace,
            vector_values=list(request.vector.values) if which == "vector" else None,
            space=request.vector.space if which == "vector" else "",
            text=request.text if which == "text" else None,
            k=int(request.k),
            flt=filter_from_proto(request.filter, self._blobs.config),
            metric=int(request.metric),
            caller=acting_session(context),
        )
        return blobs_pb2.SearchBlobsResponse(
            hits=[
                blobs_pb2.BlobHit(info=info_to_proto(h.info), distance=h.distance, space=h.space)
                for h in hits
            ]
        )

    def BlobStats(
        self, request: blobs_pb2.BlobStatsRequest, context: grpc.ServicerContext
    ) -> blobs_pb2.BlobStatsResponse:
        s = self._blobs.stats()
        return blobs_pb2.BlobStatsResponse(
            blobs=s.blobs,
            logical_bytes=s.logical_bytes,
            contents=s.contents,
            stored_bytes=s.stored_bytes,
            uploads_active=s.uploads_active,
            index_pending=s.index_pending,
            payload_store=s.payload_store,
            lance_uri=s.lance_uri,
            cached_bytes=s.cached_bytes,
            inline_upload_max_bytes=s.inline_upload_max_bytes,
            max_blob_bytes=s.max_blob_bytes,
            text_space=s.text_space,
            spaces=list(s.spaces),
            block_bytes=s.block_bytes,
        )
