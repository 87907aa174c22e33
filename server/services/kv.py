"""The KV service: KV-cache chunks as objects of kind KV_BLOCK.

A chunk is named like LMCache's ``CacheEngineKey`` (model, world size, worker
id, dtype, chunk hash) plus a tenant salt; its object key is derived from them
deterministically (``tiermem/kv_keys.py``, shared with the client, which moves
block bytes over the shared-memory and bulk paths by key). Keys of one model
share the prefix ``{model}@``: delete-by-model is a prefix scan, and a chain
lookup is string concatenation plus index probes.

Puts are batched and all-or-nothing for everything the client controls: every
block header is checked before any byte is read, every block is staged
(reserved, received, verified, encoded) before any is committed, and a short,
long or damaged stream aborts them all. Blocks are stored through the object
service, so placement, moves, leases and sessions work for them unchanged.

A caller acting as a session (``caller``, the "x-tiermem-session" metadata)
is held to the object service's rules for it (``ObjectGuard``): it reads,
finds, prefetches and deletes only the blocks an object Get or Delete made as
it could reach (its own, those of no session, an ancestor's its grants
name; a sibling's do not exist for it), and what it puts it owns, never
over another session's block. A caller acting as no session (an inference
worker, a trusted tool) is checked for nothing here, at no cost: the checks
read a block's record only for blocks another session owns, and a delete
reads none (the index's session column names each block's owner).
"""

from __future__ import annotations

import dataclasses
import math
from binascii import hexlify
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

import numpy as np
import numpy.typing as npt
import xxhash

from tiermem import kv_keys
from tiermem.server.codecs import lossy
from tiermem.server.config import KvConfig, RemoteTierConfig
from tiermem.server.errors import (
    CapacityExceeded,
    InvalidArgument,
    InvariantViolation,
    NotFound,
    PermissionDenied,
    TiermemError,
    Unavailable,
)
from tiermem.server.model import (
    Kind,
    ObjectKey,
    Precision,
    Profile,
    TensorInfo,
    Tier,
    key_prefix,
    validate_namespace,
    validate_session,
)
from tiermem.server.services.mover import Mover
from tiermem.server.services.objects import FilledPut, ObjectService, PutSpec, StagedPut
from tiermem.server.services.placement import PlacementService
from tiermem.server.services.remote import RemoteService
from tiermem.server.services.store import Store
from tiermem.server.tiers.remote import RemoteValue

#: Blocks fetched from the remote tier in the first window of a get (their size is
#: not known before; later windows hold about tiers.remote.batch_max_bytes).
_FIRST_REMOTE_WINDOW = 8
#: Marks a block that is held locally (not pulled from the remote tier).
_LOCAL: Any = object()

MAX_HASH_BYTES = 64
#: Keys are removed in batches of this many under one lock hold.
_DELETE_PAGE = 512


@dataclass(frozen=True, slots=True)
class KvScope:
    """What every chunk key of one request shares (see module docstring)."""

    namespace: str
    model: str
    world_size: int = 1
    worker_id: int = 0
    dtype: str = ""
    salt: str = ""

    def checked(self) -> KvScope:
        validate_namespace(self.namespace)
        problem = kv_keys.scope_problem(self.model, self.world_size, self.worker_id, self.dtype)
        if problem is not None:
            raise InvalidArgument(problem)
        return self

    def key_prefix(self) -> str:
        return kv_keys.key_prefix(
            self.model, self.world_size, self.worker_id, self.dtype, self.salt
        )

    def object_key(self, chunk_hash: bytes) -> ObjectKey:
        return ObjectKey(self.namespace, Kind.KV_BLOCK, self.key_prefix() + chunk_hash.hex())

    def encoded_keys(self, chunk_hashes: Sequence[bytes]) -> ChunkKeys:
        """Catalog keys of the chunks (``ObjectKey.encode`` without the objects)."""
        base = ObjectKey(self.namespace, Kind.KV_BLOCK, self.key_prefix()).encode()
        return ChunkKeys(base, chunk_hashes)


class ChunkKeys(Sequence[bytes]):
    """The catalog keys of a chain's chunks, built when read: a lookup of a
    chain of 64-bit hashes probes the index from ``chunks()`` alone
    (``ObjectIndex.find_kv_chain``) and never needs most of the keys."""

    def __init__(self, base: bytes, chunk_hashes: Sequence[bytes]) -> None:
        self.base = base
        self._hashes = chunk_hashes

    def __len__(self) -> int:
        return len(self._hashes)

    @overload
    def __getitem__(self, i: int) -> bytes: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[bytes]: ...
    def __getitem__(self, i: int | slice) -> bytes | Sequence[bytes]:
        if isinstance(i, slice):
            return [self.base + hexlify(h) for h in self._hashes[i]]
        return self.base + hexlify(self._hashes[i])

    def __iter__(self) -> Iterator[bytes]:
        base = self.base
        return iter([base + hexlify(h) for h in self._hashes])

    def chunks(self) -> npt.NDArray[np.uint64] | None:
        """The chunk hashes as big-endian 64-bit integers when every one is 8
        bytes (the canonical KV key form, see ``index.kv_chunk_split``), else None."""
        hashes = self._hashes
        if isinstance(hashes, PackedHashes):
            if hashes.width != 8:
                return None
            return np.frombuffer(hashes.packed, dtype=">u8").astype(np.uint64)
        if set(map(len, hashes)) != {8}:
            return None
        return np.frombuffer(b"".join(hashes), dtype=">u8").astype(np.uint64)


class PackedHashes(Sequence[bytes]):
    """A chain of equal-width hashes kept as one buffer (LookupPrefix's packed
    form); indexing yields the individual hashes."""

    def __init__(self, packed: bytes, width: int) -> None:
        if not 0 < width <= MAX_HASH_BYTES:
            raise InvalidArgument(f"hash_width must be 1..{MAX_HASH_BYTES}, not {width}")
        if len(packed) % width:
            raise InvalidArgument(
                f"packed_hashes is {len(packed)} bytes, not a multiple of hash_width {width}"
            )
        self.packed = packed
        self.width = width

    def __len__(self) -> int:
        return len(self.packed) // self.width

    @overload
    def __getitem__(self, i: int) -> bytes: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[bytes]: ...
    def __getitem__(self, i: int | slice) -> bytes | Sequence[bytes]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        i %= len(self)
        return self.packed[i * self.width : (i + 1) * self.width]


def check_hashes(chunk_hashes: Sequence[bytes], limit: int, what: str) -> None:
    if len(chunk_hashes) > limit:
        raise InvalidArgument(
            f"{len(chunk_hashes)} chunk hashes in one {what}; the limit is {limit}"
        )
    if isinstance(chunk_hashes, PackedHashes):
        return  # one width, checked on construction
    lengths = set(map(len, chunk_hashes))
    if not lengths or (min(lengths) > 0 and max(lengths) <= MAX_HASH_BYTES):
        return
    for i, h in enumerate(chunk_hashes):
        if not 0 < len(h) <= MAX_HASH_BYTES:
            raise InvalidArgument(
                f"chunk hash #{i} is {len(h)} bytes; it must be 1..{MAX_HASH_BYTES} bytes"
            )


@dataclass(frozen=True, slots=True)
class BlockPut:
    """One block announced in a put: the bytes sent are ``size_bytes`` of ``tensor``."""

    chunk_hash: bytes
    tensor: TensorInfo | None
    size_bytes: int
    checksum: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class BlockStored:
    chunk_hash: bytes
    key: str
    tier: Tier
    stored_bytes: int
    codec: str
    max_abs_error: float


@dataclass(slots=True)
class BlockRead:
    """One block of a get. ``view`` holds the original-dtype bytes (None if the
    block is not stored); call ``release`` once the view is no longer used."""

    chunk_hash: bytes
    tensor: TensorInfo | None = None
    view: memoryview | None = None
    checksum: int = 0
    codec: str = ""
    tier: Tier | None = None
    release: Callable[[], None] = field(default=lambda: None)


@dataclass(frozen=True, slots=True)
class PrefixHit:
    stored_chunks: int
    tiers: bytes
    """``Tier`` value of each stored leading chunk, one byte each (chains are long)."""


@dataclass(frozen=True, slots=True)
class PrefetchReport:
    promoted: int
    resident: int
    missing: int


class _Splitter:
    """Cuts one stream of byte chunks into consecutive pieces of given sizes."""

    def __init__(self, chunks: Iterable[bytes | memoryview]) -> None:
        self._it = iter(chunks)
        self._left = memoryview(b"")

    def take(self, size: int) -> Iterator[memoryview]:
        """Up to ``size`` bytes as views (fewer if the stream ends early)."""
        while size > 0:
            if not self._left:
                nxt = next(self._it, None)
                if nxt is None:
                    return
                self._left = memoryview(nxt).cast("B")
                continue
            piece = self._left[:size]
            self._left = self._left[size:]
            size -= len(piece)
            yield piece

    def extra_bytes(self) -> int:
        """Bytes left after the last ``take`` (the rest of the stream is drained)."""
        n = len(self._left)
        for chunk in self._it:
            n += len(chunk)
        return n


class KvService:
    def __init__(
        self,
        store: Store,
        objects: ObjectService,
        mover: Mover,
        config: KvConfig,
        placement: PlacementService | None = None,
    ) -> None:
        self.store = store
        self.objects = objects
        self.mover = mover
        self.config = config
        self.placement = placement
        #: the remote service when a remote tier shares KV blocks (set by the daemon)
        self.remote: RemoteService | None = None

    # -- put ----------------------------------------------------------------------
    def validate_put(
        self,
        scope: KvScope,
        blocks: Sequence[BlockPut],
        profile: Profile,
        session: str,
        codec: str,
        caller: str = "",
    ) -> str:
        """Check everything a put announces; returns the normalised codec name."""
        scope.checked()
        validate_session(session)
        validate_session(caller)
        cfg = self.config
        if not blocks:
            raise InvalidArgument("PutBlocks announces no blocks")
        check_hashes([b.chunk_hash for b in blocks], cfg.max_batch_blocks, "PutBlocks")
        if len({b.chunk_hash for b in blocks}) != len(blocks):
            raise InvalidArgument("PutBlocks names the same chunk hash twice")
        total = 0
        for i, b in enumerate(blocks):
            if b.tensor is None:
                raise InvalidArgument(f"block #{i} has no tensor metadata (dtype and shape)")
            if b.size_bytes > cfg.max_block_bytes:
                raise CapacityExceeded(
                    f"block #{i} is {b.size_bytes} bytes; the limit is {cfg.max_block_bytes} "
                    "(kv.max_block_bytes)"
                )
            try:
                b.tensor.checked(b.size_bytes)
            except InvalidArgument as exc:
                raise InvalidArgument(f"block #{i}: {exc.message}") from None
            total += b.size_bytes
        if total > cfg.max_batch_bytes:
            raise CapacityExceeded(
                f"PutBlocks carries {total} bytes; the limit is {cfg.max_batch_bytes} "
                "(kv.max_batch_bytes): split the batch"
            )
        codec = lossy.check_codec_name(codec)
        precision = profile.resolved(Kind.KV_BLOCK).precision
        if codec and precision != Precision.LOSSY_OK:
            raise InvalidArgument(
                f"codec {codec} needs profile precision LOSSY_OK; this put is {precision.name}"
            )
        return codec

    def put_blocks(
        self,
        scope: KvScope,
        blocks: Sequence[BlockPut],
        chunks: Iterable[bytes | memoryview],
        *,
        profile: Profile | None = None,
        session: str = "",
        codec: str = "",
        caller: str = "",
    ) -> list[BlockStored]:
        """Store a batch of blocks whose bytes arrive, concatenated, in ``chunks``.

        Committed as one unit (``ObjectService.commit_filled_many``): a refusal
        of any block (a quota, a ``caller``'s put over another session's block)
        stores none. A ``caller`` acting as a session puts as an object put
        made as it does: the blocks are owned by ``session``, which defaults
        to ``caller`` and may not name another session."""
        profile = profile or Profile()
        codec = self.validate_put(scope, blocks, profile, session, codec, caller)
        splitter = _Splitter(chunks)
        staged: list[tuple[StagedPut, BlockStored]] = []
        try:
            for i, block in enumerate(blocks):
                try:
                    staged.append(
                        self._stage(scope, block, splitter, profile, session, codec, caller)
                    )
                except TiermemError as exc:
                    where = f"block #{i} ({block.chunk_hash.hex()}): "
                    raise type(exc)(where + exc.message) from exc
            extra = splitter.extra_bytes()
            if extra:
                raise InvalidArgument(
                    f"PutBlocks stream carries {extra} bytes more than its blocks announce"
                )
        except BaseException:
            for st, _ in staged:
                self.objects.abort_staged(st)
            raise
        filled: list[FilledPut] = []
        for st, _ in staged:
            if st.checksum is None:
                for rest, _ in staged:
                    self.objects.abort_staged(rest)
                raise InvariantViolation(f"commit of {st.spec.key} before its bytes arrived")
            filled.append(FilledPut(st.spec, st.profile, st.reservation, st.checksum))
        # (syncs once when a block is DURABLE or replaces a DURABLE one)
        metas = self.objects.commit_filled_many(filled, "grpc")
        out = [
            dataclasses.replace(result, tier=meta.tier)
            for (_, result), meta in zip(staged, metas, strict=True)
        ]
        sent = sum(b.size_bytes for b in blocks)
        self.store.metrics.data_bytes.labels("grpc", "in").inc(sent)
        self.store.metrics.kv_blocks.labels("put", "stored").inc(len(out))
        return out

    def _stage(
        self,
        scope: KvScope,
        block: BlockPut,
        splitter: _Splitter,
        profile: Profile,
        session: str,
        codec: str,
        caller: str,
    ) -> tuple[StagedPut, BlockStored]:
        key = scope.object_key(block.chunk_hash)
        spec = PutSpec(
            key=key,
            size_bytes=block.size_bytes,
            profile=profile,
            tensor=block.tensor,
            session=session,
            checksum=block.checksum,
            caller=caller,
        )
        tensor = block.tensor
        if not codec or tensor is None or not lossy.applicable(codec, tensor):
            st = self.objects.stage(spec)
            try:
                self.objects.receive(st, splitter.take(block.size_bytes))
            except BaseException:
                self.objects.abort_staged(st)
                raise
            return st, BlockStored(
                block.chunk_hash, key.key, st.reservation.tier, spec.size_bytes, "", 0.0
            )
        raw = np.empty(block.size_bytes, dtype=np.uint8)
        self.objects.validate(spec)
        self.objects.receive_into(spec, splitter.take(block.size_bytes), raw.data)
        encoded = lossy.encode(codec, raw.data, tensor)
        bound = profile.lossy_max_error
        if (
            encoded is None
            or not math.isfinite(encoded.max_abs_error)
            or (bound > 0 and encoded.max_abs_error > bound)
            or len(encoded.data) >= block.size_bytes
        ):
            # Not representable, the bound would be broken, or the encoding is
            # no smaller (a 1-D or tiny block: a scale per channel): keep it raw.
            payload, used, err = raw.data, "", 0.0
            spec.checksum = None
        else:
            payload, used, err = memoryview(encoded.data), codec, encoded.max_abs_error
            spec.size_bytes, spec.codec, spec.checksum = len(encoded.data), codec, None
            self.store.metrics.kv_codec_bytes.labels(codec, "raw").inc(block.size_bytes)
            self.store.metrics.kv_codec_bytes.labels(codec, "encoded").inc(len(encoded.data))
        st = self.objects.stage(spec)
        try:
            self.objects.receive(st, [payload])
        except BaseException:
            self.objects.abort_staged(st)
            raise
        return st, BlockStored(
            block.chunk_hash, key.key, st.reservation.tier, len(payload), used, err
        )

    # -- get ----------------------------------------------------------------------
    def get_blocks(
        self, scope: KvScope, chunk_hashes: Sequence[bytes], caller: str = ""
    ) -> Iterator[BlockRead]:
        """Each requested block in order, found or not. Decoded to the original
        dtype when stored with a codec. The caller releases every BlockRead.
        A ``caller`` acting as a session reads each block as an object Get made
        as it would: blocks that do not exist for it are not found. Each call
        made as a session renews its lease, also when no block is found."""
        scope.checked()
        check_hashes(chunk_hashes, self.config.max_batch_blocks, "GetBlocks")
        validate_session(caller)
        self._renew(caller)
        with self.store.lock:
            self.store.catalog.namespace_id(scope.namespace)
        return self._reads(scope, chunk_hashes, caller)

    def _reads(
        self, scope: KvScope, chunk_hashes: Sequence[bytes], caller: str
    ) -> Iterator[BlockRead]:
        remote = self.remote
        if remote is None or not remote.shares_kv:
            for h in chunk_hashes:
                yield self._read_local(scope, h, caller)
            return
        # Blocks not held here are fetched from the remote tier a window at a time
        # (one batch each); the window is sized from the blocks seen so far so one
        # window holds about tiers.remote.batch_max_bytes.
        keys = scope.encoded_keys(chunk_hashes)
        cfg = remote.config
        window = min(cfg.batch_max_objects, _FIRST_REMOTE_WINDOW)
        start = 0
        while start < len(keys):
            part = range(start, min(len(keys), start + window))
            # blocks another session owns here are read locally, where the guard
            # checks them: served from the remote store, nothing would
            owned = self._owned_by_others([keys[i] for i in part], caller)
            pulled = remote.pull([keys[i] for i in part if keys[i] not in owned])
            try:
                for i in part:
                    value = pulled.pop(keys[i], _LOCAL)
                    if value is _LOCAL:
                        read = self._read_local(scope, chunk_hashes[i], caller)
                    else:
                        read = self._read_remote(chunk_hashes[i], value)
                    if read.view is not None:
                        window = max(1, min(cfg.batch_max_objects, _window(cfg, len(read.view))))
                    yield read
            finally:
                for rest in pulled.values():
                    if rest is not None:
                        rest.release()
            start = part.stop

    def _read_local(self, scope: KvScope, h: bytes, caller: str) -> BlockRead:
        metrics = self.store.metrics
        try:
            # NotFound also when the block does not exist for ``caller``
            reader = self.objects.read(scope.object_key(h), caller=caller)
        except (NotFound, Unavailable):  # Unavailable: only copy in a remote store that is down
            metrics.kv_blocks.labels("get", "missing").inc()
            return BlockRead(h)
        meta = reader.meta
        metrics.kv_blocks.labels("get", "found").inc()
        if meta.codec and meta.tensor is not None:
            try:
                data = lossy.decode(reader.view, meta.tensor)
            finally:
                reader.release()
            return BlockRead(
                h, meta.tensor, memoryview(data), xxhash.xxh3_64_intdigest(data), meta.codec,
                meta.tier,
            )  # fmt: skip
        return BlockRead(h, meta.tensor, reader.view, meta.checksum, "", meta.tier, reader.release)

    def _read_remote(self, h: bytes, value: RemoteValue | None) -> BlockRead:
        """A block served from bytes just fetched from the remote tier (verified)."""
        metrics = self.store.metrics
        if value is None:
            metrics.kv_blocks.labels("get", "missing").inc()
            return BlockRead(h)
        metrics.kv_blocks.labels("get", "found").inc()
        meta = value.meta
        if meta.codec and meta.tensor is not None:
            try:
                data = lossy.decode(value.payload, meta.tensor)
            finally:
                value.release()
            return BlockRead(
                h, meta.tensor, memoryview(data), xxhash.xxh3_64_intdigest(data), meta.codec,
                Tier.REMOTE,
            )  # fmt: skip
        return BlockRead(
            h, meta.tensor, value.payload, meta.checksum, "", Tier.REMOTE, value.release
        )

    # -- lookup / prefetch ------------------------------------------------------------
    def _probe(
        self, scope: KvScope, chunk_hashes: Sequence[bytes], limit: int, what: str, caller: str
    ) -> tuple[ChunkKeys, npt.NDArray[np.int64], npt.NDArray[np.uint8], list[int]]:
        """Validate, then the chunks' catalog keys, index rows (-1 = absent),
        serving tiers and, for a ``caller`` acting as a session, the positions
        of the chunks found here that another session owns (in order; the
        guard decides which of those exist for the caller: ``_hidden``), read
        under one lock hold with one vectorised index probe. Renews the
        caller's lease whatever is found (``_renew``)."""
        scope.checked()
        check_hashes(chunk_hashes, limit, what)
        validate_session(caller)
        self._renew(caller)
        keys = scope.encoded_keys(chunk_hashes)
        catalog = self.store.catalog
        chunks = keys.chunks()
        with self.store.lock:
            catalog.namespace_id(scope.namespace)
            if chunks is not None:
                rows = catalog.index.find_kv_chain(keys.base, chunks, keys)
            else:
                rows = catalog.index.find_many(keys)
            tiers = catalog.index.cols["tier"][np.maximum(rows, 0)]
            foreign = self._owned_by_others_locked(rows, caller)
        return keys, rows, tiers, foreign

    def _owned_by_others_locked(self, rows: npt.NDArray[np.int64], caller: str) -> list[int]:
        """Positions of the ``rows`` found (>= 0) whose object is owned by a
        session other than ``caller``, from the index's session column (no
        record read); none without a caller. Call with the store lock held."""
        if not caller:
            return []
        catalog = self.store.catalog
        at = np.flatnonzero(rows >= 0)
        sessions = catalog.index.cols["sess"][rows[at]]
        owned = sessions != 0
        if not owned.any():
            return []
        others = [s for s in np.unique(sessions[owned]) if catalog.sessions.name(int(s)) != caller]
        return [int(i) for i in at[np.isin(sessions, others)]]

    def _owned_by_others(self, encoded_keys: Sequence[bytes], caller: str) -> set[bytes]:
        """The keys among ``encoded_keys`` held here by a session other than
        ``caller`` (none without a caller)."""
        if not caller:
            return set()
        index = self.store.catalog.index
        with self.store.lock:
            foreign = self._owned_by_others_locked(index.find_many(encoded_keys), caller)
        return {encoded_keys[i] for i in foreign}

    def _hidden(
        self, keys: Sequence[bytes], candidates: Sequence[int], caller: str, first: bool
    ) -> list[int]:
        """Those of ``candidates`` (positions in ``keys`` of blocks another
        session owns) that do not exist for ``caller``: an object Stat made as
        it would be refused (``ObjectGuard.check_access``). ``first``: stop at
        the first. Reads the record of each block checked."""
        if not candidates:
            return []
        catalog, guard = self.store.catalog, self.objects.guard
        with self.store.lock:
            entries = catalog.find_all([keys[i] for i in candidates])
        hidden: list[int] = []
        for i, entry in zip(candidates, entries, strict=True):
            try:
                if entry is not None:
                    guard.check_access(catalog.meta(keys[i], entry), caller, write=False)
                    continue
            except (NotFound, PermissionDenied):
                pass
            hidden.append(i)  # refused, or gone since the probe
            if first:
                break
        return hidden

    def lookup_prefix(
        self, scope: KvScope, chunk_hashes: Sequence[bytes], caller: str = ""
    ) -> PrefixHit:
        """How many leading chunks of the chain are stored, and their tiers.
        Answered from the in-memory index (no RocksDB read); with a shared remote
        tier, chunks not held here (or served from it) are looked up there in
        batches: found ones count, with tier REMOTE. For a ``caller`` acting
        as a session the prefix ends at the first chunk that does not exist
        for it (``_hidden``: a record read per chunk another session owns);
        each call made as a session renews its lease."""
        keys, rows, tiers, foreign = self._probe(
            scope, chunk_hashes, self.config.max_chain_chunks, "LookupPrefix", caller
        )
        missing = np.flatnonzero(rows < 0)
        n = int(missing[0]) if len(missing) else len(rows)
        remote = self.remote
        shares = remote is not None and remote.shares_kv
        chain: Sequence[bytes] = keys
        # (without a shared remote tier the prefix ends at the first hole anyway)
        hidden = self._hidden(keys, [i for i in foreign if shares or i < n], caller, first=True)
        if hidden:  # held here, so not looked for in the remote tier either
            cut = hidden[0]
            chain, rows, tiers, n = keys[:cut], rows[:cut], tiers[:cut], min(n, cut)
        if (
            remote is not None
            and shares
            and (n < len(rows) or bool((tiers[:n] == int(Tier.REMOTE)).any()))
        ):
            n, found_tiers = remote.extend_prefix(chain, rows, tiers)
        else:
            found_tiers = tiers[:n].tobytes()
        self.store.metrics.kv_blocks.labels("lookup", "found").inc(n)
        return PrefixHit(n, found_tiers)

    def prefetch(
        self, scope: KvScope, chunk_hashes: Sequence[bytes], caller: str = ""
    ) -> PrefetchReport:
        """Keep the chunks in memory: refresh resident ones, promote the others.
        With a remote tier sharing KV, chunks not held here are fetched from it now
        (adopted into a local tier: counted as promoted). For a ``caller``
        acting as a session, chunks that do not exist for it (``_hidden``)
        count as missing and are neither touched nor moved; each call made as
        a session renews its lease."""
        keys, rows, tiers, foreign = self._probe(
            scope, chunk_hashes, self.config.max_batch_blocks, "Prefetch", caller
        )
        absent = rows < 0
        held = ~absent
        held[self._hidden(keys, foreign, caller, first=False)] = False
        found = [bytes(keys[int(i)]) for i in np.flatnonzero(held)]
        missing = len(rows) - len(found)
        fetched = 0
        if absent.any() and self.remote is not None and self.remote.shares_kv:
            fetched = self.remote.fetch([bytes(keys[int(i)]) for i in np.flatnonzero(absent)])
            missing -= fetched
        if self.placement is not None:
            # The planner decides where each block goes (and refreshes the resident
            # ones' deadlines); promotions run on the migrator.
            result = self.placement.prefetch([ObjectKey.decode(k) for k in found], 0)
            return PrefetchReport(result.queued + fetched, result.resident, missing)
        memory = [int(t) for t in self.store.memory]
        resident = held & np.isin(tiers, memory)
        with self.store.lock:
            for i in np.flatnonzero(resident):
                # re-find: the row may have been freed since the probe
                entry = self.store.catalog.find(keys[int(i)])
                if entry is not None:
                    self.store.catalog.touch(entry.row, bytes(keys[int(i)]))
        promoted = sum(
            1 for i in np.flatnonzero(held & ~resident) if self.promote(bytes(keys[int(i)]))
        )
        return PrefetchReport(promoted + fetched, int(resident.sum()), missing)

    def promote(self, encoded_key: bytes) -> bool:
        """Without a planner: bring one block into the fastest memory tier."""
        if not self.store.memory:
            return False
        target = next(iter(self.store.memory))
        return self.mover.move(encoded_key, target)

    # -- delete -------------------------------------------------------------------------
    def delete_blocks(
        self, namespace: str, model: str = "", session: str = "", caller: str = ""
    ) -> tuple[int, int]:
        """Delete the namespace's KV blocks (only ``model``'s / ``session``'s if
        given). Returns (blocks deleted, bytes freed).

        A ``caller`` acting as a session deletes by the rules of an object delete
        made as it (``ObjectGuard.check_access`` with ``write``): only blocks it
        owns or no session owns. Another session's (a sibling's, which does not
        exist for it, or an ancestor's shared with it read-only) are left and not
        counted, where a delete of one of them alone would be refused. The owner
        comes from the index's session column, so no record is read to decide.
        The session's lease is renewed once, up front; nothing later depends on
        its state, so a close of it that starts meanwhile cannot stop the call
        half-way (each of its blocks is then deleted by the call or by the
        close). No caller: a trusted tool, every block."""
        validate_namespace(namespace)
        validate_session(session)
        validate_session(caller)
        if model:
            KvScope(namespace, model, dtype="x").checked()
        catalog = self.store.catalog
        with self.store.lock:
            catalog.namespace_id(namespace)
        self._renew(caller)
        scope = key_prefix(namespace, Kind.KV_BLOCK, f"{model}@" if model else "")
        if session:
            keys: Iterator[bytes] = (
                k for k in catalog.session_keys(session) if k.startswith(scope)
            )
        else:
            keys = (k for k, _ in catalog.rocks.scan("objects", scope))
        deleted = freed = 0
        durable = False
        page: list[bytes] = []
        for encoded in keys:
            page.append(encoded)
            if len(page) >= _DELETE_PAGE:
                d, f, dur = self._remove(page, caller)
                deleted, freed, durable = deleted + d, freed + f, durable or dur
                page = []
        d, f, dur = self._remove(page, caller)
        deleted, freed, durable = deleted + d, freed + f, durable or dur
        if durable:
            self.objects.sync()
        self.store.metrics.kv_blocks.labels("delete", "deleted").inc(deleted)
        return deleted, freed

    def _remove(self, encoded_keys: list[bytes], caller: str = "") -> tuple[int, int, bool]:
        """Remove a page of objects in one catalog batch under one lock hold:
        (count, bytes, any durable). Objects another session than ``caller``
        owns are left (none without a caller)."""
        if not encoded_keys:
            return 0, 0, False
        catalog = self.store.catalog
        with self.store.lock:
            rows = catalog.index.find_many(encoded_keys)
            held = rows >= 0
            held[self._owned_by_others_locked(rows, caller)] = False
            victims = [(encoded_keys[i], catalog.entry(int(rows[i]))) for i in np.flatnonzero(held)]
            if not victims:
                return 0, 0, False
            freed = self.store.remove_many_locked(victims)
        return len(victims), freed, any(entry.durable for _, entry in victims)

    def _renew(self, caller: str) -> None:
        """Renew the lease of the session ``caller`` acts as (none without a
        caller), as every call made as a session does, whatever it finds
        (``ObjectGuard.renew``)."""
        if caller:
            self.objects.guard.renew(caller)


def _window(config: RemoteTierConfig, block_bytes: int) -> int:
    """Blocks per remote fetch so one fetch holds about ``batch_max_bytes``."""
    return int(config.batch_max_bytes) // max(block_bytes, 1)
