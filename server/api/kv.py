"""KvService servicer: converts messages and delegates to services.kv."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import grpc

from tiermem.server.api.convert import acting_session
from tiermem.server.errors import InvalidArgument
from tiermem.server.protoconv import profile_from_proto, tensor_from_proto, tensor_to_proto
from tiermem.server.services.kv import BlockPut, KvScope, KvService, PackedHashes
from tiermem.v1 import common_pb2, kv_pb2, kv_pb2_grpc


def scope_from_proto(msg: kv_pb2.KvScope) -> KvScope:
    return KvScope(
        namespace=msg.namespace,
        model=msg.model,
        world_size=int(msg.world_size),
        worker_id=int(msg.worker_id),
        dtype=msg.dtype,
        salt=msg.salt,
    )


def _block(msg: kv_pb2.BlockSpec) -> BlockPut:
    checksum = None
    if msg.HasField("checksum") and msg.checksum.algorithm:
        checksum = (int(msg.checksum.algorithm), int(msg.checksum.value))
    return BlockPut(
        chunk_hash=bytes(msg.chunk_hash),
        tensor=tensor_from_proto(msg.tensor if msg.HasField("tensor") else None),
        size_bytes=int(msg.size_bytes),
        checksum=checksum,
    )


def _chunks(requests: Iterator[kv_pb2.PutBlocksRequest]) -> Iterator[bytes]:
    for i, msg in enumerate(requests, start=2):
        if msg.WhichOneof("part") != "chunk":
            raise InvalidArgument(
                f"message #{i} of the PutBlocks stream is a "
                f"{msg.WhichOneof('part') or 'empty message'}; only the first may be the header"
            )
        yield msg.chunk


def lookup_prefix_reply(
    kv: KvService, acting: str, request: kv_pb2.LookupPrefixRequest
) -> kv_pb2.LookupPrefixResponse:
    """LookupPrefix, for the gRPC method and the bulk session's lookup op alike
    (``acting``: the session the caller acts as, "" = none)."""
    hashes: Sequence[bytes] = request.chunk_hashes
    if request.packed_hashes or request.hash_width:
        if request.chunk_hashes:
            raise InvalidArgument("set either chunk_hashes or packed_hashes, not both")
        hashes = PackedHashes(request.packed_hashes, request.hash_width)
    hit = kv.lookup_prefix(scope_from_proto(request.scope), hashes, acting)
    return kv_pb2.LookupPrefixResponse(stored_chunks=hit.stored_chunks, tiers=hit.tiers)


class KvServicer(kv_pb2_grpc.KvServiceServicer):
    def __init__(self, kv: KvService, chunk_bytes: int) -> None:
        self._kv = kv
        self._chunk_bytes = chunk_bytes

    def PutBlocks(
        self, request_iterator: Iterator[kv_pb2.PutBlocksRequest], context: grpc.ServicerContext
    ) -> kv_pb2.PutBlocksResponse:
        first = next(request_iterator, None)
        if first is None or first.WhichOneof("part") != "header":
            raise InvalidArgument("the first message of a PutBlocks stream must be its header")
        h = first.header
        stored = self._kv.put_blocks(
            scope_from_proto(h.scope),
            [_block(b) for b in h.blocks],
            _chunks(request_iterator),
            profile=profile_from_proto(h.profile),
            session=h.session,
            codec=h.codec,
            caller=acting_session(context),
        )
        return kv_pb2.PutBlocksResponse(
            blocks=[
                kv_pb2.BlockResult(
                    chunk_hash=b.chunk_hash,
                    key=b.key,
                    tier=int(b.tier),  # type: ignore[arg-type]
                    stored_bytes=b.stored_bytes,
                    codec=b.codec,
                    max_abs_error=b.max_abs_error,
                )
                for b in stored
            ]
        )

    def GetBlocks(
        self, request: kv_pb2.GetBlocksRequest, context: grpc.ServicerContext
    ) -> Iterator[kv_pb2.GetBlocksResponse]:
        reads = self._kv.get_blocks(
            scope_from_proto(request.scope), list(request.chunk_hashes), acting_session(context)
        )
        step = self._chunk_bytes
        sent = 0
        for block in reads:
            try:
                if block.view is None:
                    yield kv_pb2.GetBlocksResponse(
                        block=kv_pb2.BlockInfo(chunk_hash=block.chunk_hash, found=False)
                    )
                    continue
                view = block.view
                yield kv_pb2.GetBlocksResponse(
                    block=kv_pb2.BlockInfo(
                        chunk_hash=block.chunk_hash,
                        found=True,
                        tensor=tensor_to_proto(block.tensor),
                        size_bytes=len(view),
                        checksum=common_pb2.Checksum(
                            algorithm=common_pb2.XXH3_64, value=block.checksum
                        ),
                        codec=block.codec,
                        tier=int(block.tier or 0),  # type: ignore[arg-type]
                    )
                )
                for start in range(0, len(view), step):
                    yield kv_pb2.GetBlocksResponse(chunk=bytes(view[start : start + step]))
                sent += len(view)
            finally:
                block.release()
        self._kv.store.metrics.data_bytes.labels("grpc", "out").inc(sent)

    def LookupPrefix(
        self, request: kv_pb2.LookupPrefixRequest, context: grpc.ServicerContext
    ) -> kv_pb2.LookupPrefixResponse:
        return lookup_prefix_reply(self._kv, acting_session(context), request)

    def Prefetch(
        self, request: kv_pb2.PrefetchBlocksRequest, context: grpc.ServicerContext
    ) -> kv_pb2.PrefetchBlocksResponse:
        report = self._kv.prefetch(
            scope_from_proto(request.scope), list(request.chunk_hashes), acting_session(context)
        )
        return kv_pb2.PrefetchBlocksResponse(
            promoted=report.promoted, resident=report.resident, missing=report.missing
        )

    def DeleteBlocks(
        self, request: kv_pb2.DeleteBlocksRequest, context: grpc.ServicerContext
    ) -> kv_pb2.DeleteBlocksResponse:
        deleted, freed = self._kv.delete_blocks(
            request.namespace, request.model, request.session, acting_session(context)
        )
        return kv_pb2.DeleteBlocksResponse(deleted=deleted, freed_bytes=freed)
