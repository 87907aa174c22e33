"""KV-cache client: batched put/get of KV chunks, prefix lookup, prefetch, deletes.

Reached as ``Client.kv``. A chunk is named by a :class:`KvScope` (model, world
size, worker id, KV dtype, tenant salt; the fields of LMCache's
``CacheEngineKey``) and its chunk hash (``int`` or ``bytes``). Blocks keep their
dtype, shape and memory format and come back bit-exact (or, when stored with a
lossy codec, decoded to their original dtype).

Data paths: blocks of at least the data plane's threshold (64 KiB) without a
lossy codec go by the client's fastest path (shared memory on the daemon's
host, else the bulk TCP channel; ``Client.path_stats()`` says which): the
client derives the blocks' object keys itself (``tiermem/kv_keys.py``, the
daemon's own scheme) and moves them as KV_BLOCK objects with one negotiation
per batch. Everything else (small blocks, lossy codecs, lookups, daemons
without fast paths) uses the KvService gRPC streams.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tiermem import kv_keys
from tiermem.client import _wire
from tiermem.client._transport import Transport
from tiermem.client.errors import (
    ChecksumError,
    InvalidArgumentError,
    NotFoundError,
    UnavailableError,
)
from tiermem.client.fastpath.plane import DataPlane, ObjectRef, PutItem
from tiermem.client.types import AccessHint, Kind, ObjectInfo, Profile, Tier
from tiermem.v1 import common_pb2, kv_pb2, kv_pb2_grpc

ChunkHash = int | bytes

#: Client-side batch bounds (the daemon's defaults are larger): big requests
#: are split so no single call holds more than this in flight.
MAX_BATCH_BLOCKS = 1024
MAX_BATCH_BYTES = 256 << 20


_U64 = 1 << 64
_TIER_BY_VALUE: dict[int, Tier] = {int(t): t for t in Tier}


def _tiers_of(values: Iterable[int]) -> list[Tier]:
    """Tier of each chunk from the reply's values; a chain on one tier (the
    usual case) costs one scan of the bytes instead of a lookup per chunk."""
    raw = bytes(values)
    if raw and raw.count(raw[0]) == len(raw):
        return [_TIER_BY_VALUE[raw[0]]] * len(raw)
    return [_TIER_BY_VALUE[v] for v in raw]


def hash_bytes(chunk_hash: ChunkHash) -> bytes:
    """Wire form of a chunk hash. Bytes go as they are; ints (LMCache's hashes)
    in [0, 2^64) as 8 bytes big-endian, any other int as big-endian two's
    complement of at least 9 bytes: one-to-one, and fixed-width for the usual
    64-bit hashes so chains can be packed."""
    if isinstance(chunk_hash, bytes | bytearray):
        return bytes(chunk_hash)
    if not isinstance(chunk_hash, int):
        raise TypeError(f"chunk hash must be int or bytes, not {type(chunk_hash).__name__}")
    if 0 <= chunk_hash < _U64:
        return chunk_hash.to_bytes(8, "big")
    length = max(9, (chunk_hash.bit_length() + 8) // 8)
    return chunk_hash.to_bytes(length, "big", signed=True)


def _hashes(chunk_hashes: Sequence[ChunkHash]) -> list[bytes]:
    """``hash_bytes`` of many."""
    return [hash_bytes(h) for h in chunk_hashes]


def _packed(chunk_hashes: Sequence[ChunkHash]) -> bytes | None:
    """The chain as concatenated 8-byte big-endian hashes (one C call), or None
    when some hash is not an int in [0, 2^64)."""
    try:
        return struct.pack(f">{len(chunk_hashes)}Q", *chunk_hashes)
    except struct.error:
        return None


@dataclass(frozen=True, slots=True)
class KvScope:
    """What the chunk keys of a request share. ``salt`` isolates tenants: equal
    hashes under different salts are different blocks. ``namespace`` None = the
    client's default namespace."""

    model: str
    world_size: int = 1
    worker_id: int = 0
    dtype: str = "bfloat16"
    salt: str = ""
    namespace: str | None = None


@dataclass(frozen=True, slots=True)
class KvBlock:
    """A block to store: a torch tensor, a numpy array, or bytes-like data with
    ``dtype`` and ``shape`` given."""

    chunk_hash: ChunkHash
    data: Any
    dtype: str = ""
    shape: tuple[int, ...] = ()
    memory_format: str = ""


@dataclass(frozen=True, slots=True)
class StoredBlock:
    chunk_hash: bytes
    key: str
    tier: Tier
    stored_bytes: int
    codec: str
    max_abs_error: float


@dataclass(frozen=True, slots=True)
class FetchedBlock:
    """A block read back. ``data`` is the caller's ``out`` buffer when one was
    given, else a new bytearray; None when the block is not stored."""

    chunk_hash: bytes
    found: bool
    dtype: str = ""
    shape: tuple[int, ...] = ()
    memory_format: str = ""
    codec: str = ""
    tier: Tier | None = None
    data: Any = None
    size_bytes: int = 0
    checksum: int = 0

    def tensor(self) -> Any:
        """The block as a torch tensor of its dtype and shape (shares ``data``)."""
        if not self.found:
            raise KeyError(f"chunk {self.chunk_hash.hex()} is not stored")
        if hasattr(self.data, "untyped_storage"):  # received into the caller's tensor
            return self.data
        return _wire.tensor_from(_info_of(self), self.data)

    def array(self) -> np.ndarray[Any, Any]:
        if not self.found:
            raise KeyError(f"chunk {self.chunk_hash.hex()} is not stored")
        return _wire.array_from(_info_of(self), self.data)


#: ``allocate(header, index)``: a writable buffer of ``header.size_bytes`` for the
#: block at ``index`` of the request, or None for a new bytearray.
Allocator = Callable[[FetchedBlock, int], Any]


@dataclass(frozen=True, slots=True)
class PrefixHit:
    stored_chunks: int
    tiers: list[Tier]


@dataclass(frozen=True, slots=True)
class PrefetchResult:
    promoted: int
    resident: int
    missing: int


def _info_of(block: FetchedBlock) -> Any:
    from tiermem.client.types import Kind, ObjectInfo

    return ObjectInfo(
        namespace="",
        kind=Kind.KV_BLOCK,
        key=block.chunk_hash.hex(),
        size_bytes=len(memoryview(block.data)),
        checksum=0,
        tier=block.tier or Tier.DRAM,
        persisted=False,
        version=0,
        dtype=block.dtype,
        shape=block.shape,
        memory_format=block.memory_format,
    )


def _payload(block: KvBlock) -> tuple[memoryview, str, tuple[int, ...]]:
    data = block.data
    if hasattr(data, "detach") and hasattr(data, "dtype"):  # a torch tensor
        return _wire.tensor_view(data)
    if isinstance(data, np.ndarray):
        dtype = _wire.NUMPY_DTYPES.get(data.dtype.name)
        if dtype is None:
            raise ValueError(f"numpy dtype {data.dtype} is not supported")
        return _wire.as_view(data), dtype, tuple(data.shape)
    if not block.dtype:
        raise ValueError("bytes-like KV blocks need dtype and shape")
    return _wire.as_view(data), block.dtype, block.shape


class KvClient:
    """KV operations over a client's transport. Thread-safe like the client."""

    def __init__(
        self,
        transport: Transport,
        *,
        namespace: str = "default",
        chunk_bytes: int = _wire.DEFAULT_CHUNK_BYTES,
        verify: bool = True,
        dataplane: DataPlane | None = None,
    ) -> None:
        """``dataplane``: the client's fast paths (None = KvService streams only)."""
        self.transport = transport
        self.namespace = namespace
        self.chunk_bytes = chunk_bytes
        self.verify = verify
        self.dataplane = dataplane
        self._stub = kv_pb2_grpc.KvServiceStub(transport.channel)
        self._metadata = transport.metadata

    def _scope(self, scope: KvScope) -> kv_pb2.KvScope:
        return kv_pb2.KvScope(
            namespace=scope.namespace or self.namespace,
            model=scope.model,
            world_size=scope.world_size,
            worker_id=scope.worker_id,
            dtype=scope.dtype,
            salt=scope.salt,
        )

    def _fast(self, codec: str, path: str | None, deadline: float | None) -> DataPlane | None:
        """The data plane to move large blocks with, or None for the KvService
        streams (``path`` "grpc", a lossy codec, or no faster path offered).
        ``deadline``: the call's (``DataPlane.deadline_for``), which negotiating
        the offer (a client's first call) counts against."""
        plane = self.dataplane
        if plane is None or deadline is None or codec or path == "grpc":
            return None
        if path is not None:
            return plane
        return plane if plane.paths(plane.time_left(deadline))[0] != "grpc" else None

    def _deadline(self, timeout_s: float | None) -> float | None:
        """A call's deadline (None without a data plane: then its one KvService
        call per batch gets ``timeout_s``)."""
        plane = self.dataplane
        return None if plane is None else plane.deadline_for(timeout_s)

    @staticmethod
    def _left(deadline: float | None, timeout_s: float | None) -> float | None:
        """What the call's next step gets: what is left of it (DeadlineError
        when nothing is), or ``timeout_s`` when the call keeps no deadline."""
        return timeout_s if deadline is None else DataPlane.time_left(deadline)

    def _block_keys(self, scope: KvScope, hashes: Sequence[bytes]) -> list[str]:
        problem = kv_keys.scope_problem(scope.model, scope.world_size, scope.worker_id, scope.dtype)
        if problem is not None:  # the daemon's words for it, without the round trip
            raise InvalidArgumentError("INVALID_ARGUMENT", problem)
        prefix = kv_keys.key_prefix(
            scope.model, scope.world_size, scope.worker_id, scope.dtype, scope.salt
        )
        return [prefix + h.hex() for h in hashes]

    # -- put ----------------------------------------------------------------------
    def put_blocks(
        self,
        scope: KvScope,
        blocks: Sequence[KvBlock],
        *,
        profile: Profile | None = None,
        session: str = "",
        codec: str = "",
        path: str | None = None,
        timeout_s: float | None = None,
    ) -> list[StoredBlock]:
        """Store blocks (split into batches of bounded size; each batch is
        all-or-nothing). ``codec`` ("fp8_e4m3", "int8") needs a profile with
        precision LOSSY_OK; the result says per block what was applied.
        ``path``: None picks the fastest; "grpc", "bulk" or "shm" forces one."""
        payloads = [_payload(block) for block in blocks]
        deadline = self._deadline(timeout_s)  # the offer's, each step's
        plane = self._fast(codec, path, deadline)
        if plane is None:
            return self._put_streamed(
                scope, blocks, payloads, profile, session, codec, self._left(deadline, timeout_s)
            )
        # refused as PutBlocks refuses it, before the batch is split between
        # paths (a small and a large block of one hash went different ways and
        # the later one silently replaced the other)
        every = [hash_bytes(b.chunk_hash) for b in blocks]
        if len(set(every)) != len(every):
            raise InvalidArgumentError(
                "INVALID_ARGUMENT", "PutBlocks names the same chunk hash twice"
            )
        large = [
            i for i, (view, _, _) in enumerate(payloads)
            if path is not None or len(view) >= plane.threshold_bytes
        ]  # fmt: skip
        taken = set(large)
        small = [i for i in range(len(blocks)) if i not in taken]
        out: list[StoredBlock | None] = [None] * len(blocks)
        hashes = [hash_bytes(blocks[i].chunk_hash) for i in large]
        keys = self._block_keys(scope, hashes)
        items = [
            PutItem(
                kind=Kind.KV_BLOCK,
                key=key,
                data=payloads[i][0],
                namespace=scope.namespace or self.namespace,
                profile=profile,
                session=session,
                dtype=payloads[i][1],
                shape=payloads[i][2],
                memory_format=blocks[i].memory_format,
            )
            for i, key in zip(large, keys, strict=True)
        ]
        infos = (
            plane.put_many(items, path=path, timeout_s=self._left(deadline, timeout_s))
            if items
            else []
        )
        for i, h, info in zip(large, hashes, infos, strict=True):
            out[i] = StoredBlock(h, info.key, info.tier, info.size_bytes, "", 0.0)
        rest = (
            self._put_streamed(
                scope,
                [blocks[i] for i in small],
                [payloads[i] for i in small],
                profile,
                session,
                codec,
                self._left(deadline, timeout_s),
            )
            if small
            else []
        )
        for i, stored in zip(small, rest, strict=True):
            out[i] = stored
        return [b for b in out if b is not None]

    def _put_streamed(
        self,
        scope: KvScope,
        blocks: Sequence[KvBlock],
        payloads: Sequence[tuple[memoryview, str, tuple[int, ...]]],
        profile: Profile | None,
        session: str,
        codec: str,
        timeout_s: float | None,
    ) -> list[StoredBlock]:
        """Blocks through KvService.PutBlocks, in batches of bounded size."""
        out: list[StoredBlock] = []
        batch: list[tuple[kv_pb2.BlockSpec, memoryview]] = []
        batch_bytes = 0
        for block, (view, dtype, shape) in zip(blocks, payloads, strict=True):
            spec = kv_pb2.BlockSpec(
                chunk_hash=hash_bytes(block.chunk_hash),
                tensor=common_pb2.TensorInfo(
                    dtype=dtype, shape=list(shape), memory_format=block.memory_format
                ),
                size_bytes=len(view),
            )
            if self.verify:
                spec.checksum.CopyFrom(_wire.checksum_of(view))
            if batch and (
                len(batch) >= MAX_BATCH_BLOCKS or batch_bytes + len(view) > MAX_BATCH_BYTES
            ):
                out += self._put_batch(scope, batch, profile, session, codec, timeout_s)
                batch, batch_bytes = [], 0
            batch.append((spec, view))
            batch_bytes += len(view)
        if batch:
            out += self._put_batch(scope, batch, profile, session, codec, timeout_s)
        return out

    def put_new_chunks(
        self,
        scope: KvScope,
        blocks: Sequence[KvBlock],
        *,
        prefix_hit_chunks: int,
        session: str = "",
        profile: Profile | None = None,
        **kw: Any,
    ) -> list[StoredBlock]:
        """Store the chunks a request computed after its prefix lookup: ``blocks``
        are the chunks from the hit point on, ``prefix_hit_chunks`` what
        ``lookup_prefix`` found. A one-shot request (no ``session``) that found a
        prefix marks them COLD: they are its own tail, unlikely to be reused, and
        the daemon drops rather than writes to SSD the ones memory has no room
        for (a later read of one is a miss, never wrong bytes). Chunks of a
        session (later turns reread them) and of a request with no hit (its
        shared prefix cannot be told from its tail) keep ``profile``'s hint."""
        if prefix_hit_chunks > 0 and not session:
            base = profile or Profile()
            profile = dataclasses.replace(base, hint=AccessHint.COLD)
        return self.put_blocks(scope, blocks, profile=profile, session=session, **kw)

    def put(self, scope: KvScope, chunk_hash: ChunkHash, data: Any, **kw: Any) -> StoredBlock:
        """Store one block (a tensor or array)."""
        return self.put_blocks(scope, [KvBlock(chunk_hash, data)], **kw)[0]

    def _put_batch(
        self,
        scope: KvScope,
        batch: list[tuple[kv_pb2.BlockSpec, memoryview]],
        profile: Profile | None,
        session: str,
        codec: str,
        timeout_s: float | None,
    ) -> list[StoredBlock]:
        header = kv_pb2.PutBlocksHeader(
            scope=self._scope(scope),
            blocks=[spec for spec, _ in batch],
            session=session,
            codec=codec,
        )
        prof = _wire.profile_msg(profile)
        if prof is not None:
            header.profile.CopyFrom(prof)
        reply = self._put_payloads(header, [view for _, view in batch], timeout_s)
        return [
            StoredBlock(
                chunk_hash=b.chunk_hash,
                key=b.key,
                tier=Tier(b.tier) if b.tier else Tier.SSD,
                stored_bytes=b.stored_bytes,
                codec=b.codec,
                max_abs_error=b.max_abs_error,
            )
            for b in reply.blocks
        ]

    def _put_payloads(
        self, header: kv_pb2.PutBlocksHeader, views: list[memoryview], timeout_s: float | None
    ) -> kv_pb2.PutBlocksResponse:
        """The data path of puts: send the header, then every view's bytes in order."""
        step = self.chunk_bytes

        def requests() -> Iterator[kv_pb2.PutBlocksRequest]:
            yield kv_pb2.PutBlocksRequest(header=header)
            for view in views:
                for start in range(0, len(view), step):
                    yield kv_pb2.PutBlocksRequest(chunk=bytes(view[start : start + step]))

        return self.transport.call(
            lambda t: self._stub.PutBlocks(requests(), timeout=t, metadata=self._metadata),
            timeout_s,
        )

    # -- get ----------------------------------------------------------------------
    def get_blocks(
        self,
        scope: KvScope,
        chunk_hashes: Sequence[ChunkHash],
        *,
        out: Sequence[Any] | None = None,
        allocate: Allocator | None = None,
        path: str | None = None,
        timeout_s: float | None = None,
    ) -> list[FetchedBlock]:
        """Read blocks in order; missing ones come back with ``found=False``.

        Where the bytes land: ``out`` (one per hash) gives writable buffers of
        exactly the block's size (e.g. a pinned tensor); or ``allocate`` is
        called with each found block's header (``data`` None) and returns such a
        buffer (or None for a new bytearray); by default a new bytearray.
        Each block's buffer is asked for once, whichever path carries it.
        ``path``: None picks the fastest; "grpc", "bulk" or "shm" forces one."""
        if out is not None and len(out) != len(chunk_hashes):
            raise ValueError(f"out has {len(out)} buffers for {len(chunk_hashes)} chunk hashes")
        if out is not None:
            given = out

            def allocate(block: FetchedBlock, index: int = -1) -> Any:
                return given[index]

        buffers: dict[int, Any] = {}
        user_allocate = allocate

        def once(block: FetchedBlock, index: int) -> Any:
            """The caller's buffer for a block, asked for at most once."""
            if index not in buffers:
                buf = None if user_allocate is None else user_allocate(block, index)
                buffers[index] = bytearray(block.size_bytes) if buf is None else buf
            return buffers[index]

        # without the caller's buffers, the data plane makes each block's new
        # bytearray from the bytes themselves (one pass; no zeroed buffer first)
        own = None if allocate is None else once
        hashes = _hashes(chunk_hashes)
        deadline = self._deadline(timeout_s)  # the offer's, each batch's
        plane = self._fast("", path, deadline)
        results: list[FetchedBlock] = []
        for start in range(0, len(hashes), MAX_BATCH_BLOCKS):
            part = hashes[start : start + MAX_BATCH_BLOCKS]
            got = None
            if plane is not None:
                got = self._get_fast(
                    plane, scope, part, own, start, path, self._left(deadline, timeout_s)
                )
            if got is None:
                request = kv_pb2.GetBlocksRequest(scope=self._scope(scope), chunk_hashes=part)
                got = self._get_payloads(request, once, start, self._left(deadline, timeout_s))
            results += got
        return results

    def _get_fast(
        self,
        plane: DataPlane,
        scope: KvScope,
        hashes: list[bytes],
        once: Allocator | None,
        first_index: int,
        path: str | None,
        timeout_s: float | None,
    ) -> list[FetchedBlock] | None:
        """A batch through the data plane, or None when the KvService stream must
        serve it: some block is missing (the stream reports each as not found),
        was stored with a lossy codec (the daemon decodes those) or is held only
        by a remote tier that is unavailable (the stream reports it missing)."""
        namespace = scope.namespace or self.namespace
        refs = [ObjectRef(Kind.KV_BLOCK, k, namespace) for k in self._block_keys(scope, hashes)]
        lossy: list[int] = []

        def header(info: ObjectInfo, h: bytes) -> FetchedBlock:
            return FetchedBlock(
                chunk_hash=h,
                found=True,
                dtype=info.dtype,
                shape=info.shape,
                memory_format=info.memory_format,
                tier=info.tier,
                size_bytes=info.size_bytes,
                checksum=info.checksum,
            )

        def into(info: ObjectInfo, i: int) -> memoryview | None:
            if info.codec:  # encoded bytes: land them in scratch, the stream redoes it
                lossy.append(i)
                return memoryview(bytearray(info.size_bytes))
            if once is None:
                return None  # a new bytearray, made by the data plane
            index = first_index + i
            return _writable(once(header(info, hashes[i]), index), info.size_bytes, index)

        try:
            fetched = plane.get_many(
                refs, allocate=into, path=path, timeout_s=timeout_s, fresh=bytearray
            )
        except (NotFoundError, UnavailableError):
            # UNAVAILABLE: a block whose only copy is in a remote tier that is down;
            # the stream answers it as missing (or fails the same if the daemon is)
            return None
        if lossy:
            return None
        blocks = [header(f.info, h) for f, h in zip(fetched, hashes, strict=True)]
        if once is None:
            return [
                dataclasses.replace(b, data=_bytearray_of(f.data))
                for b, f in zip(blocks, fetched, strict=True)
            ]
        # every buffer was handed out (and memoized) by ``into`` already
        return [dataclasses.replace(b, data=once(b, first_index + i)) for i, b in enumerate(blocks)]

    def get_tensors(
        self, scope: KvScope, chunk_hashes: Sequence[ChunkHash], **kw: Any
    ) -> list[Any]:
        """Blocks as torch tensors (None where not stored)."""
        return [b.tensor() if b.found else None for b in self.get_blocks(scope, chunk_hashes, **kw)]

    def _get_payloads(
        self,
        request: kv_pb2.GetBlocksRequest,
        allocate: Allocator | None,
        first_index: int,
        timeout_s: float | None,
    ) -> list[FetchedBlock]:
        """The data path of gets: one FetchedBlock per requested hash, the bytes
        copied straight into the buffer ``allocate`` gives. Checks checksums."""

        def call(timeout: float) -> list[FetchedBlock]:
            got: list[FetchedBlock] = []
            target: memoryview | None = None
            pos = 0
            stream = self._stub.GetBlocks(request, timeout=timeout, metadata=self._metadata)
            for msg in stream:
                if msg.WhichOneof("part") == "block":
                    self._check_complete(got, pos)
                    block = _fetched(msg.block)
                    target, pos = None, 0
                    if block.found:
                        index = first_index + len(got)
                        buf = None if allocate is None else allocate(block, index)
                        if buf is None:
                            buf = bytearray(block.size_bytes)
                        target = _writable(buf, block.size_bytes, index)
                        block = dataclasses.replace(block, data=buf)
                    got.append(block)
                    continue
                if target is None:
                    raise ChecksumError("DATA_LOSS", "GetBlocks sent bytes outside a found block")
                n = len(msg.chunk)
                target[pos : pos + n] = msg.chunk
                pos += n
            self._check_complete(got, pos)
            return got

        got = self.transport.call(call, timeout_s)
        if len(got) != len(request.chunk_hashes):
            raise ChecksumError(
                "DATA_LOSS", f"GetBlocks answered {len(got)} of {len(request.chunk_hashes)} blocks"
            )
        return got

    def _check_complete(self, got: list[FetchedBlock], pos: int) -> None:
        if not got or not got[-1].found:
            return
        block = got[-1]
        if pos != block.size_bytes:
            raise ChecksumError(
                "DATA_LOSS", f"block {block.chunk_hash.hex()} arrived with {pos} of "
                f"{block.size_bytes} bytes",
            )  # fmt: skip
        if self.verify and _wire.HAVE_XXHASH:
            import xxhash

            actual = xxhash.xxh3_64_intdigest(_writable(block.data, block.size_bytes, -1))
            if actual != block.checksum:
                raise ChecksumError(
                    "DATA_LOSS", f"block {block.chunk_hash.hex()} arrived damaged "
                    f"(checksum {actual:x}, expected {block.checksum:x})",
                )  # fmt: skip

    # -- lookup / prefetch / delete -------------------------------------------------------
    def lookup_prefix(
        self, scope: KvScope, chunk_hashes: Sequence[ChunkHash], *, timeout_s: float | None = None
    ) -> PrefixHit:
        """How many leading chunks of the chain are stored, and on which tiers."""
        packed = _packed(chunk_hashes)
        if packed is not None:
            request = kv_pb2.LookupPrefixRequest(
                scope=self._scope(scope), packed_hashes=packed, hash_width=8
            )
        else:
            request = kv_pb2.LookupPrefixRequest(
                scope=self._scope(scope), chunk_hashes=_hashes(chunk_hashes)
            )
        plane = self.dataplane
        reply = None
        if plane is not None:
            # a bulk session carries it without a gRPC call (~0.15 ms against ~0.6 ms
            # here); negotiating the offer (a first call) counts against the timeout
            deadline = plane.deadline_for(timeout_s)
            reply = plane.lookup_prefix(request, plane.time_left(deadline))
            if reply is None:
                timeout_s = plane.time_left(deadline)
        if reply is None:
            reply = self.transport.call(
                lambda t: self._stub.LookupPrefix(request, timeout=t, metadata=self._metadata),
                timeout_s,
            )
        return PrefixHit(reply.stored_chunks, _tiers_of(reply.tiers))

    def prefetch(
        self, scope: KvScope, chunk_hashes: Sequence[ChunkHash], *, timeout_s: float | None = None
    ) -> PrefetchResult:
        """Hint that these chunks will be read soon: the daemon keeps them in memory.
        Long chains go in requests of ``MAX_BATCH_BLOCKS`` (the daemon's limit per
        call is larger); the counts are summed."""
        scope_msg = self._scope(scope)
        hashes = _hashes(chunk_hashes)
        promoted = resident = missing = 0
        for start in range(0, len(hashes), MAX_BATCH_BLOCKS) if hashes else [0]:
            request = kv_pb2.PrefetchBlocksRequest(
                scope=scope_msg, chunk_hashes=hashes[start : start + MAX_BATCH_BLOCKS]
            )
            reply = self.transport.call(
                lambda t, r=request: self._stub.Prefetch(r, timeout=t, metadata=self._metadata),  # type: ignore[misc]
                timeout_s,
            )
            promoted += reply.promoted
            resident += reply.resident
            missing += reply.missing
        return PrefetchResult(promoted, resident, missing)

    def delete(
        self,
        *,
        model: str = "",
        session: str = "",
        namespace: str | None = None,
        timeout_s: float | None = None,
    ) -> tuple[int, int]:
        """Delete the namespace's KV blocks, or only one model's or session's.
        Returns (blocks deleted, bytes freed)."""
        request = kv_pb2.DeleteBlocksRequest(
            namespace=namespace or self.namespace, model=model, session=session
        )
        reply = self.transport.call(
            lambda t: self._stub.DeleteBlocks(request, timeout=t, metadata=self._metadata),
            timeout_s,
        )
        return int(reply.deleted), int(reply.freed_bytes)


def _fetched(info: kv_pb2.BlockInfo) -> FetchedBlock:
    return FetchedBlock(
        chunk_hash=info.chunk_hash,
        found=info.found,
        dtype=info.tensor.dtype,
        shape=tuple(info.tensor.shape),
        memory_format=info.tensor.memory_format,
        codec=info.codec,
        tier=_TIER_BY_VALUE.get(info.tier),
        size_bytes=info.size_bytes,
        checksum=info.checksum.value,
    )


def _bytearray_of(view: memoryview) -> bytearray:
    """The bytearray a fetched value's view shows (a copy only if it is not
    the whole of one, e.g. a value the gRPC fallback carried)."""
    obj = view.obj
    if isinstance(obj, bytearray) and len(obj) == view.nbytes:
        return obj
    return bytearray(view)


def _writable(buf: Any, size: int, index: int) -> memoryview:
    """A flat writable byte view of a buffer, numpy array or CPU torch tensor."""
    if hasattr(buf, "untyped_storage"):  # a torch tensor (any dtype, bfloat16 too)
        import torch

        if buf.device.type != "cpu" or not buf.is_contiguous():
            raise ValueError(f"out[{index}] must be a contiguous CPU tensor")
        buf = buf.reshape(-1).view(torch.uint8).numpy()
    view = memoryview(buf)
    if view.readonly:
        raise ValueError(f"out[{index}] is read-only")
    view = view.cast("B") if view.format != "B" or view.ndim != 1 else view
    if len(view) != size:
        raise ValueError(f"out[{index}] is {len(view)} bytes; the block is {size} bytes")
    return view
