"""The vector service: collections of faiss indexes with durable upserts and
hot (DRAM, or GPU) / cold (SSD snapshot) placement.

Contracts:

* **Durable when acknowledged.** An upsert or delete is validated whole, then
  written to the operation log (RocksDB, WAL synced when ``vectors.fsync``),
  then applied to the in-memory index, then acknowledged. A rejected request
  logs nothing and changes nothing. Recovery = latest snapshot + log replay.
* **Hot and cold.** A collection is LOADED (index in memory) or UNLOADED (its
  snapshot on SSD plus the log tail). Any use loads it (FLAT/HNSW snapshots
  are memory-mapped); the maintenance pass unloads idle collections and, beyond
  ``vectors.dram_budget_bytes``, the least recently used ones. The placement
  planner can drive the same through ``memory_report`` / ``load`` / ``unload``.
* **Never a deleted id.** Deleted and replaced vectors are tombstoned (FLAT,
  HNSW) or removed (IVF_PQ); tombstones are excluded inside faiss and the
  index is rebuilt once ``compact_dead_ratio`` of it is dead.
* **Damage is reported, never served.** A snapshot is the only copy of the
  vectors it covers (the log is trimmed up to it and older snapshots are
  pruned). One that fails its digests on load is registered as damage
  (``namespace/VECTOR/name``: logged, counted, listed by fsck) and every use of
  the collection answers DATA_LOSS until it is dropped. A damaged snapshot of a
  collection still loaded is rewritten from memory by the next maintenance
  pass (or unload), which clears the report.

Locking: ``_lock`` guards the registry (name -> Collection). Each collection
has an RW lock (searches shared; writes, loads and index swaps exclusive) and a
maintenance mutex that serialises snapshot / rebuild / unload for it. Order:
maintenance mutex before RW lock; nothing holding an RW lock takes the other.
``_lock`` is taken before the damage register's lock (a drop clears the
collection's damage under it); nothing run under the register's lock takes
ours (fsck's record re-read reads RocksDB).
"""

from __future__ import annotations

import logging
import math
import shutil
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from tiermem.server.config import VectorsConfig
from tiermem.server.errors import (
    AlreadyExists,
    CapacityExceeded,
    Corrupted,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
)
from tiermem.server.model import (
    Kind,
    Tier,
    validate_namespace,
    validate_session,
)
from tiermem.server.services.store import Store
from tiermem.server.vectors import index as fx
from tiermem.server.vectors import snapshot, validate
from tiermem.server.vectors.oplog import VectorStore
from tiermem.server.vectors.rwlock import RWLock
from tiermem.server.vectors.state import State
from tiermem.server.vectors.types import (
    CollectionSpec,
    Filter,
    IndexKind,
    IndexParams,
    Metric,
    SearchResult,
    damage_name,
    validate_collection_name,
)
from tiermem.v1 import vector_records_pb2 as records
from tiermem.v1 import vectors_pb2

log = logging.getLogger(__name__)

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]

RATE_HALF_LIFE_S = 60.0


class RateMeter:
    """Exponentially decayed events per second (half-life ``RATE_HALF_LIFE_S``)."""

    def __init__(self) -> None:
        self._value = 0.0
        self._at = time.monotonic()

    def _decay(self, now: float) -> None:
        self._value *= 0.5 ** ((now - self._at) / RATE_HALF_LIFE_S)
        self._at = now

    def add(self, n: int) -> None:
        self._decay(time.monotonic())
        self._value += n

    def per_s(self) -> float:
        self._decay(time.monotonic())
        return self._value * math.log(2) / RATE_HALF_LIFE_S


@dataclass(frozen=True, slots=True)
class CollectionInfo:
    spec: CollectionSpec
    built: IndexKind
    params: IndexParams
    loaded: bool
    tier: Tier
    count: int
    memory_bytes: int
    snapshot_bytes: int
    log_seq: int
    snapshot_seq: int
    created_unix_ms: int
    accessed_unix_ms: int


@dataclass(frozen=True, slots=True)
class CollectionMemory:
    """One row of ``memory_report`` (what the placement planner reads)."""

    namespace: str
    name: str
    loaded: bool
    tier: Tier
    memory_bytes: int
    snapshot_bytes: int
    accessed_unix_ms: int
    idle_s: float
    query_rate_per_s: float


class Collection:
    """A registered collection: spec, durable record, locks and loaded state."""

    def __init__(self, spec: CollectionSpec, record: records.CollectionRecord, root: Path) -> None:
        self.spec = spec
        self.record = record
        self.root = root
        self.lock = RWLock()
        self.maint = threading.Lock()
        self.state: State | None = None
        self.dropped = False
        self.last_access = time.monotonic()
        self.accessed_unix_ms = int(time.time() * 1000)
        self.queries = RateMeter()
        self.last_snapshot = time.monotonic()
        #: (snapshot folder, message) once that snapshot failed to load: every
        #: use answers DATA_LOSS with the message without reading it again
        self.unusable: tuple[str, str] | None = None

    def touch(self) -> None:
        self.last_access = time.monotonic()
        self.accessed_unix_ms = int(time.time() * 1000)


def _spec_from_record(rec: records.CollectionRecord) -> CollectionSpec:
    p = rec.params
    params = IndexParams(
        p.hnsw_m, p.hnsw_ef_construction, p.hnsw_ef_search,
        p.ivf_nlist, p.ivf_nprobe, p.pq_m, p.pq_nbits,
    )  # fmt: skip
    return CollectionSpec(
        rec.namespace,
        rec.name,
        rec.dimension,
        Metric(rec.metric),
        IndexKind(rec.index_type),
        params,
        rec.session,
    )


class VectorService:
    def __init__(self, config: VectorsConfig, store: Store, root: Path, max_result_bytes: int):
        self.config = config
        self.store = store
        self.root = root
        self.max_result_bytes = max_result_bytes
        self.log = VectorStore(store.catalog.rocks, config.fsync)
        self.metrics = store.metrics
        self._lock = threading.Lock()
        self._collections: dict[tuple[str, str], Collection] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        use_gpu = config.use_gpu and store.config.tiers.hbm.enabled and fx.gpu_count() > 0
        self._gpu = fx.GpuMirror() if use_gpu else None

    # -- lifecycle ---------------------------------------------------------------
    def open(self) -> None:
        """Register every stored collection (unloaded) and remove stray snapshot
        folders; loading happens on first use."""
        self.root.mkdir(parents=True, exist_ok=True)
        known: set[str] = set()
        for rec in self.log.collection_records():
            spec = _spec_from_record(rec)
            col = Collection(spec, rec, self.root / str(rec.id))
            snapshot.prune(col.root, rec.snapshot_dir)
            self._collections[spec.namespace, spec.name] = col
            known.add(str(rec.id))
        for child in self.root.iterdir():
            if child.name not in known:
                shutil.rmtree(child, ignore_errors=True)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="tiermem-vectors", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop maintenance and snapshot collections with unsnapshotted operations
        (so the next start replays little) or a damaged snapshot."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        for col in self._all():
            try:  # a damaged snapshot is replaced from memory while it can be
                self._snapshot(col, force=self._snapshot_damaged(col))
            except Exception:
                log.exception("snapshot of %s at shutdown failed", col.spec.label)

    def _run(self) -> None:
        while not self._stop.wait(self.config.maintain_interval_s):
            try:
                self.maintain()
            except Exception:
                log.exception("vector maintenance pass failed")

    # -- registry ----------------------------------------------------------------
    def _all(self) -> list[Collection]:
        with self._lock:
            return list(self._collections.values())

    def _get(self, namespace: str, name: str) -> Collection:
        validate_namespace(namespace)
        validate_collection_name(name)
        with self._lock:
            col = self._collections.get((namespace, name))
        if col is None:
            raise NotFound(f"collection {namespace}/{name} not found")
        return col

    def _check_namespace(self, namespace: str) -> None:
        validate_namespace(namespace)
        with self.store.lock:
            self.store.catalog.namespace_id(namespace)

    @contextmanager
    def _loaded(self, col: Collection, *, write: bool) -> Iterator[State]:
        """The collection's state under its lock (shared for reads), loading it
        from SSD first if needed."""
        for _ in range(8):
            lock = col.lock.write() if write else col.lock.read()
            with lock:
                if col.dropped:
                    raise NotFound(f"collection {col.spec.label} not found (dropped)")
                state = col.state
                if state is not None:
                    col.touch()
                    yield state
                    return
            self._load(col)
        raise FailedPrecondition(f"collection {col.spec.label} was unloaded repeatedly; retry")

    # -- collections -------------------------------------------------------------
    def create(
        self,
        namespace: str,
        name: str,
        dimension: int,
        metric: Metric,
        index: IndexKind,
        params: IndexParams,
        session: str = "",
        if_absent: bool = False,
    ) -> tuple[CollectionInfo, bool]:
        """Create an empty collection. ``params`` fields of 0 take config defaults."""
        cfg = self.config
        validate_collection_name(name)
        validate_session(session)
        if not 1 <= dimension <= cfg.max_dimension:
            raise InvalidArgument(
                f"dimension {dimension} is out of range: use 1..{cfg.max_dimension}"
            )
        params = validate.resolve_params(self.config, params, dimension)
        self._check_namespace(namespace)
        spec = CollectionSpec(namespace, name, dimension, metric, index, params, session)
        with self._lock:
            existing = self._collections.get((namespace, name))
            if existing is not None:
                old = existing.spec
                same = (old.dimension, old.metric, old.index) == (dimension, metric, index)
                if if_absent and same:  # (``describe`` would take ``_lock`` again)
                    return self._info(existing), False
                raise AlreadyExists(
                    f"collection {namespace}/{name} exists (dimension {old.dimension}, "
                    f"{old.metric.name}, {old.index.name})"
                )
            if len(self._collections) >= cfg.max_collections:
                raise CapacityExceeded(
                    f"the daemon holds {len(self._collections)} collections; "
                    f"the limit is vectors.max_collections = {cfg.max_collections}"
                )
            rec = records.CollectionRecord(
                id=self.log.allocate_id(),
                namespace=namespace,
                name=name,
                dimension=dimension,
                metric=int(metric),  # type: ignore[arg-type]
                index_type=int(index),  # type: ignore[arg-type]
                params=vectors_pb2.IndexParams(
                    **{k: getattr(params, k) for k in IndexParams.__slots__}
                ),
                session=session,
                created_unix_ms=int(time.time() * 1000),
            )
            self.log.put_record(rec)
            col = Collection(spec, rec, self.root / str(rec.id))
            col.state = State.empty(spec)
            self._collections[namespace, name] = col
        self.metrics.vector_ops.labels("create").inc()
        return self._info(col), True

    def describe(self, namespace: str, name: str) -> CollectionInfo:
        return self._info(self._get(namespace, name))

    def list_collections(self, namespace: str, session: str = "") -> list[CollectionInfo]:
        self._check_namespace(namespace)
        cols = [
            c
            for c in self._all()
            if c.spec.namespace == namespace and (not session or c.spec.session == session)
        ]
        return [self._info(c) for c in sorted(cols, key=lambda c: c.spec.name)]

    def _info(self, col: Collection) -> CollectionInfo:
        state = col.state
        rec = col.record
        if state is None:
            built = IndexKind(rec.snapshot_built) if rec.snapshot_built else IndexKind.FLAT
            if not rec.snapshot_built and col.spec.index == IndexKind.HNSW:
                built = IndexKind.HNSW
            return CollectionInfo(
                col.spec, built, col.spec.params, False, Tier.SSD, rec.snapshot_count, 0,
                rec.snapshot_bytes, rec.snapshot_seq, rec.snapshot_seq,
                rec.created_unix_ms, col.accessed_unix_ms,
            )  # fmt: skip
        tier = Tier.HBM if state.gpu_index is not None else Tier.DRAM
        return CollectionInfo(
            col.spec, state.built, state.params, True, tier, state.count, state.memory_bytes,
            rec.snapshot_bytes, state.seq, rec.snapshot_seq,
            rec.created_unix_ms, col.accessed_unix_ms,
        )  # fmt: skip

    def drop(self, namespace: str, name: str) -> bool:
        validate_namespace(namespace)
        validate_collection_name(name)
        with self._lock:
            col = self._collections.get((namespace, name))
        return col is not None and self._drop(col)

    def _drop(self, col: Collection) -> bool:
        """Drop ``col`` durably; False if another drop did first. It leaves the
        registry only once its record and log are gone: a drop that raised
        changed nothing, and the next drop (or ``drop_session``) finds it again.

        Its damage is cleared by name in the same step, under ``_lock``: a new
        collection of the same name can be created only after that, so the
        clearing never hits the new one's damage (nor is the new one listed
        for this one's). Nothing registers this one's damage after it: online
        fsck re-reads the record under the register's lock, and a load holds
        the collection's RW lock and finds it dropped."""
        spec = col.spec
        with col.lock.write():
            with self._lock:
                if self._collections.get((spec.namespace, spec.name)) is not col:
                    return False
                self.log.drop(col.record)
                del self._collections[spec.namespace, spec.name]
                self.store.damage.discard_named(damage_name(spec.namespace, spec.name))
            col.dropped = True
            col.state = None
        shutil.rmtree(col.root, ignore_errors=True)
        self.metrics.vector_ops.labels("drop").inc()
        return True

    def session_usage(self, session: str) -> dict[Tier, tuple[int, int]]:
        """(bytes, collections) per tier that ``session``'s collections hold: a
        loaded one its memory (DRAM, or HBM with a GPU mirror), an unloaded one
        its snapshot on SSD. Counts toward the session's quotas."""
        usage: dict[Tier, tuple[int, int]] = {}
        for col in self._all():
            if col.spec.session != session:
                continue
            info = self._info(col)
            nbytes = info.memory_bytes if info.loaded else info.snapshot_bytes
            held, count = usage.get(info.tier, (0, 0))
            usage[info.tier] = (held + nbytes, count + 1)
        return usage

    def drop_session_sized(self, session: str) -> tuple[dict[Tier, int], int]:
        """``drop_session``, returning what it freed: bytes per tier (as
        ``session_usage`` counts them) and how many collections."""
        usage = self.session_usage(session)
        dropped = self.drop_session(session)
        return {tier: nbytes for tier, (nbytes, _n) in usage.items()}, dropped

    def drop_session(self, session: str, namespace: str | None = None) -> int:
        """Drop every collection owned by ``session`` (in ``namespace``, or in all);
        returns how many. For the sessions service: closing a session calls it."""
        if not session:
            raise InvalidArgument("drop_session needs a session id")
        with self._lock:
            owned = [
                c
                for key, c in self._collections.items()
                if c.spec.session == session and (namespace is None or key[0] == namespace)
            ]
        # each leaves the registry as its drop succeeds: if one raises, a retried
        # close (see ``SessionCleanup.drop_session``) finds the rest again
        return sum(self._drop(col) for col in owned)

    # -- vectors -----------------------------------------------------------------
    def upsert(
        self,
        namespace: str,
        name: str,
        ids: I64,
        vectors: F32,
        payloads: Sequence[vectors_pb2.VectorPayload] = (),
    ) -> tuple[int, int]:
        """Insert or replace vectors; returns (count, log seq). Durable on return."""
        col = self._get(namespace, name)
        ids = validate.check_ids(self.config, ids)
        vectors = validate.check_vectors(self.config, vectors, col.spec, len(ids), "vectors")
        if col.spec.metric == Metric.COSINE:
            norms = np.linalg.norm(vectors, axis=1)
            if not np.all(norms > 0):
                row = int(np.flatnonzero(~(norms > 0))[0])
                raise InvalidArgument(f"vector {row} (id {ids[row]}) is zero: cosine needs a norm")
            vectors = fx.normalize(vectors)
        stored = validate.check_payloads(self.config, payloads, len(ids))
        entry = records.VectorLogEntry(
            op=records.VectorLogEntry.UPSERT,
            ids=ids.astype("<i8").tobytes(),
            vectors=vectors.astype("<f4").tobytes(),
            payloads=payloads,
        )
        puts: list[tuple[int, bytes | None]] = list(zip(ids.tolist(), stored, strict=True))
        with self._loaded(col, write=True) as state:
            seq = state.seq + 1
            self.log.append(col.record.id, seq, entry, puts)
            state.upsert(ids, vectors, payloads)
            state.seq = seq
        self.metrics.vector_ops.labels("upsert").inc()
        self.metrics.vector_items.labels("upsert").inc(len(ids))
        return len(ids), seq

    def delete(self, namespace: str, name: str, ids: I64) -> tuple[int, int]:
        """Delete vectors by id; returns (how many existed, log seq). Durable on return."""
        col = self._get(namespace, name)
        ids = validate.check_ids(self.config, ids)
        entry = records.VectorLogEntry(
            op=records.VectorLogEntry.DELETE, ids=ids.astype("<i8").tobytes()
        )
        with self._loaded(col, write=True) as state:
            seq = state.seq + 1
            self.log.append(col.record.id, seq, entry, [(i, None) for i in ids.tolist()])
            deleted = state.delete(ids)
            state.seq = seq
        self.metrics.vector_ops.labels("delete").inc()
        self.metrics.vector_items.labels("delete").inc(len(ids))
        return deleted, seq

    def search(
        self,
        namespace: str,
        name: str,
        queries: F32,
        k: int,
        flt: Filter = Filter(),  # noqa: B008 - frozen dataclass, immutable default
        include_payloads: bool = False,
        ef_search: int = 0,
        nprobe: int = 0,
    ) -> SearchResult:
        col = self._get(namespace, name)
        cfg = self.config
        if k <= 0:
            raise InvalidArgument(f"k must be at least 1, got {k}")
        if k > cfg.max_k:
            raise InvalidArgument(f"k {k} is too large: the limit is vectors.max_k = {cfg.max_k}")
        if ef_search > validate.MAX_EF_SEARCH:
            raise InvalidArgument(f"hnsw_ef_search {ef_search} exceeds {validate.MAX_EF_SEARCH}")
        queries = validate.check_vectors(self.config, queries, col.spec, None, "queries")
        nq = len(queries)
        if nq * k * 12 > self.max_result_bytes:
            raise InvalidArgument(
                f"{nq} queries x k={k} would return {nq * k * 12} bytes; the message limit is "
                f"{self.max_result_bytes}: split the batch"
            )
        validate.check_filter(self.config, flt)
        if col.spec.metric == Metric.COSINE:
            queries = fx.normalize(queries)
        with self._loaded(col, write=False) as state:
            distances, ids = state.search(
                queries,
                k,
                flt,
                ef_search or state.params.hnsw_ef_search,
                nprobe or state.params.ivf_nprobe,
            )
            payloads: list[bytes] = []
            if include_payloads:
                flat = ids.ravel().tolist()
                found = self.log.payloads(col.record.id, [i for i in flat if i >= 0])
                it = iter(found)
                payloads = [(next(it) or b"") if i >= 0 else b"" for i in flat]
                size = sum(map(len, payloads)) + nq * k * 12
                if size > self.max_result_bytes:
                    raise InvalidArgument(
                        f"results with payloads are {size} bytes; the message limit is "
                        f"{self.max_result_bytes}: lower k or the batch, or leave payloads out"
                    )
        col.queries.add(nq)
        self.metrics.vector_ops.labels("search").inc()
        self.metrics.vector_items.labels("search").inc(nq)
        return SearchResult(ids, distances, payloads)

    def count(self, namespace: str, name: str) -> int:
        col = self._get(namespace, name)
        with self._loaded(col, write=False) as state:
            return state.count

    # -- tiering -----------------------------------------------------------------
    def load(self, namespace: str, name: str) -> tuple[CollectionInfo, float]:
        """Bring a collection into memory; returns its info and the seconds it took
        (0 if it was loaded already)."""
        col = self._get(namespace, name)
        seconds = self._load(col)
        return self._info(col), seconds

    def _load(self, col: Collection) -> float:
        started = time.perf_counter()
        with col.lock.write():
            if col.dropped:
                raise NotFound(f"collection {col.spec.label} not found (dropped)")
            if col.state is not None:
                return 0.0
            rec = col.record
            if rec.snapshot_dir:
                state = self._read_snapshot(col, rec.snapshot_dir)
            else:
                state = State.empty(col.spec)
            replayed = 0
            for seq, entry in self.log.entries(rec.id, state.seq):
                state.apply(seq, entry)
                replayed += 1
            state.ops_since_snapshot = replayed
            self._maybe_gpu(state)
            col.state = state
            col.touch()
        seconds = time.perf_counter() - started
        self.metrics.vector_loads.inc()
        self.metrics.vector_load_seconds.observe(seconds)
        log.info(
            "loaded collection %s: %d vectors, %d log entries replayed, %.3f s",
            col.spec.label, state.count, replayed, seconds,
        )  # fmt: skip
        self._enforce_budget(keep=col)
        return seconds

    def _read_snapshot(self, col: Collection, dir_name: str) -> State:
        """The collection's snapshot, or Corrupted (registered as damage): it
        holds the only copy of the vectors it covers, so nothing can stand in."""
        if col.unusable is not None and col.unusable[0] == dir_name:
            raise Corrupted(col.unusable[1])
        try:
            return snapshot.read(col.root, dir_name, col.spec, self.config.mmap_load)
        except Corrupted as exc:
            spec = col.spec
            message = (
                f"collection {spec.label} is damaged: {exc.message}; its snapshot holds the "
                f"only copy of its vectors, so it is not served: drop the collection and "
                f"upsert its vectors again"
            )
            self.store.damage.add_named(damage_name(spec.namespace, spec.name), "vectors", message)
            col.unusable = (dir_name, message)
            raise Corrupted(message) from exc

    def _snapshot_damaged(self, col: Collection) -> bool:
        """Whether the collection's current snapshot is registered as damaged."""
        return self.store.damage.has_named(damage_name(col.spec.namespace, col.spec.name))

    def _maybe_gpu(self, state: State) -> None:
        """Mirror FLAT/IVF_PQ indexes onto the GPU (HBM tier with CUDA only)."""
        if self._gpu is not None and state.built in (IndexKind.FLAT, IndexKind.IVF_PQ):
            state.gpu_index = self._gpu.clone(state.index)

    def unload(self, namespace: str, name: str) -> bool:
        """Snapshot (if needed) and free a collection's memory; False if not loaded."""
        return self._unload(self._get(namespace, name))

    def _unload(self, col: Collection, wait: bool = True) -> bool:
        """``wait=False``: skip (False) a collection busy with maintenance."""
        if not col.maint.acquire(blocking=wait):
            return False
        try:
            return self._unload_locked(col)
        finally:
            col.maint.release()

    def _unload_locked(self, col: Collection) -> bool:
        if col.state is None:
            return False
        # the slow part, searches still served; a damaged snapshot is replaced
        self._snapshot_locked(col, force=self._snapshot_damaged(col))
        with col.lock.write():
            state = col.state
            if state is None or col.dropped:
                return False
            if state.ops_since_snapshot:  # written between that snapshot and now
                self._write_snapshot(col, state)
            col.state = None
        self.metrics.vector_unloads.inc()
        log.info("unloaded collection %s to SSD", col.spec.label)
        return True

    def memory_report(self) -> list[CollectionMemory]:
        """Per collection: memory, snapshot size, last access and query rate."""
        now = time.monotonic()
        out = []
        for col in self._all():
            info = self._info(col)
            out.append(
                CollectionMemory(
                    col.spec.namespace,
                    col.spec.name,
                    info.loaded,
                    info.tier,
                    info.memory_bytes,
                    info.snapshot_bytes,
                    col.accessed_unix_ms,
                    now - col.last_access,
                    col.queries.per_s(),
                )
            )
        return out

    def usage(self) -> list[tuple[Tier, Kind, int, int]]:
        """(tier, collections, bytes) for Stats: loaded memory on DRAM/HBM, snapshots on SSD."""
        totals: dict[Tier, list[int]] = {}
        for row in self.memory_report():
            if row.loaded:
                t = totals.setdefault(row.tier, [0, 0])
                t[0] += 1
                t[1] += row.memory_bytes
            if row.snapshot_bytes:
                t = totals.setdefault(Tier.SSD, [0, 0])
                t[0] += 1
                t[1] += row.snapshot_bytes
        return [(tier, Kind.VECTOR, c, b) for tier, (c, b) in sorted(totals.items())]

    def _enforce_budget(self, keep: Collection | None = None) -> None:
        """Unload least recently used collections while loaded memory exceeds the budget."""
        budget = int(self.config.dram_budget_bytes)
        # each state read once: an unload may clear ``col.state`` meanwhile
        loaded = [(c, s.memory_bytes) for c in self._all() if (s := c.state) is not None]
        total = sum(b for _, b in loaded)
        for col, nbytes in sorted(loaded, key=lambda cb: cb[0].last_access):
            if total <= budget:
                break
            if col is keep:
                continue
            if self._unload(col, wait=False):
                total -= nbytes

    # -- maintenance -------------------------------------------------------------
    def maintain(self) -> None:
        """One pass: index upgrades and compaction, snapshots, idle unloads, budget."""
        cfg = self.config
        now = time.monotonic()
        for col in self._all():
            state = col.state
            if state is None or col.dropped:
                continue
            target = self._rebuild_target(col.spec, state)
            if target is not None:
                self._rebuild(col, target)
            elif self._snapshot_damaged(col):  # rewrite it from the good copy in memory
                self._snapshot(col, force=True)
            elif state.ops_since_snapshot >= cfg.snapshot_ops or (
                state.ops_since_snapshot and now - col.last_snapshot >= cfg.snapshot_interval_s
            ):
                self._snapshot(col, force=False)
            if cfg.idle_unload_s and now - col.last_access >= cfg.idle_unload_s:
                self._unload(col)
            elif self._gpu is not None and state.gpu_index is None:
                with col.lock.read():
                    if col.state is state:
                        self._maybe_gpu(state)
        self._enforce_budget()
        self.metrics.vector_memory_bytes.set(
            sum(s.memory_bytes for c in self._all() if (s := c.state) is not None)
        )

    def _rebuild_target(self, spec: CollectionSpec, state: State) -> IndexKind | None:
        cfg = self.config
        n = state.count
        if spec.index == IndexKind.AUTO:
            if state.built == IndexKind.FLAT and n >= cfg.auto_hnsw_min_vectors:
                return IndexKind.HNSW
            if state.built == IndexKind.HNSW and n >= cfg.auto_ivf_pq_min_vectors:
                return IndexKind.IVF_PQ
        ivf_due = n >= cfg.ivf_train_min_vectors
        if spec.index == IndexKind.IVF_PQ and state.built == IndexKind.FLAT and ivf_due:
            return IndexKind.IVF_PQ
        if state.built != IndexKind.IVF_PQ and state.dead_ratio >= cfg.compact_dead_ratio:
            return state.built
        return None

    def compact(self, namespace: str, name: str) -> bool:
        """Rebuild now if an upgrade or compaction is due (tests and operators)."""
        col = self._get(namespace, name)
        with self._loaded(col, write=False) as state:
            target = self._rebuild_target(col.spec, state)
        if target is None:
            return False
        return self._rebuild(col, target)

    def _rebuild(self, col: Collection, target: IndexKind) -> bool:
        """Build a new index from the live vectors without blocking searches or
        writes, then swap it in after replaying the operations logged meanwhile."""
        with col.maint:
            with col.lock.read():
                old = col.state
                if old is None or col.dropped:
                    return False
                live = old.export_live()
            started = time.perf_counter()
            fresh = State.rebuilt(col.spec, target, live)
            with col.lock.write():
                if col.state is not old or col.dropped:
                    return False
                for seq, entry in self.log.entries(col.record.id, live.seq):
                    fresh.apply(seq, entry)
                fresh.ops_since_snapshot = old.ops_since_snapshot
                self._maybe_gpu(fresh)
                col.state = fresh
            self.metrics.vector_rebuilds.labels(target.name).inc()
            log.info(
                "rebuilt %s as %s (%d vectors) in %.2f s",
                col.spec.label, target.name, fresh.count, time.perf_counter() - started,
            )  # fmt: skip
            self._snapshot_locked(col, force=True)
        return True

    def snapshot(self, namespace: str, name: str) -> bool:
        """Write a snapshot now if operations are not covered by one."""
        return self._snapshot(self._get(namespace, name), force=False)

    def _snapshot(self, col: Collection, force: bool) -> bool:
        with col.maint:
            return self._snapshot_locked(col, force)

    def _snapshot_locked(self, col: Collection, force: bool) -> bool:
        """Call with ``col.maint`` held."""
        with col.lock.read():
            state = col.state
            if state is None or col.dropped or not (force or state.ops_since_snapshot):
                return False
            self._write_snapshot(col, state)
        return True

    def _write_snapshot(self, col: Collection, state: State) -> None:
        """Write, switch the record (trimming the log) and prune; the caller holds
        the collection's lock (shared or exclusive) so ``state`` cannot change."""
        started = time.perf_counter()
        info = snapshot.write(col.root, state, self.config.fsync)
        rec = records.CollectionRecord()
        rec.CopyFrom(col.record)
        rec.snapshot_dir = info.dir_name
        rec.snapshot_seq = info.seq
        rec.snapshot_bytes = info.size_bytes
        rec.snapshot_count = info.count
        rec.snapshot_built = int(state.built)  # type: ignore[assignment]
        with self._lock:
            if self._collections.get((col.spec.namespace, col.spec.name)) is not col:
                # dropped meanwhile: its record's key may already name a new
                # collection of the same name; ``_drop`` removed this one's files
                return
            self.log.put_record(rec, trim_log_to=info.seq)
        col.record = rec
        self.store.damage.discard_named(damage_name(col.spec.namespace, col.spec.name))
        snapshot.prune(col.root, info.dir_name)
        state.ops_since_snapshot = 0
        col.last_snapshot = time.monotonic()
        self.metrics.vector_snapshots.inc()
        log.debug(
            "snapshot of %s at seq %d: %d bytes, %.3f s",
            col.spec.label, info.seq, info.size_bytes, time.perf_counter() - started,
        )  # fmt: skip
