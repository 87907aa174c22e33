"""The in-memory form of one loaded collection: a faiss index over slots, the
slot <-> id maps, tombstones and payload columns.

```
 client id ──id_to_slot──▶ slot ──▶ faiss label (FLAT/HNSW: position; IVF_PQ: id)
 slot ──slot_ids──▶ client id        live[slot]: False once deleted or replaced
```

An upsert of an existing id kills its old slot and takes a fresh one, so a
search can never see two versions of an id. Every mutation goes through
``upsert``/``delete``, which the service calls after the operation is in the
log and which log replay calls the same way: the in-memory state is a pure
function of (snapshot, log). Callers hold the collection's lock (writes
exclusive, searches shared); this class has no locking of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tiermem.server.errors import InvariantViolation
from tiermem.server.vectors import index as fx
from tiermem.server.vectors.payloads import PayloadColumns
from tiermem.server.vectors.types import CollectionSpec, Filter, IndexKind, IndexParams
from tiermem.v1 import vector_records_pb2 as records
from tiermem.v1 import vectors_pb2

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]

#: Estimated bytes per entry of the id -> slot dict (key, value, table slot).
DICT_ENTRY_BYTES = 100

#: A filter matching at most this many vectors of an HNSW collection is
#: answered by comparing the query with each of them (exact; at 4,096 vectors
#: of 768 dimensions a 12 MiB copy): the graph's walk, limited to efSearch
#: candidates, returned fewer than k results when few vectors matched.
EXACT_FILTER_MAX_ROWS = 4096


def _has_payload(p: vectors_pb2.VectorPayload) -> bool:
    return bool(p.fields) or p.HasField("ref") or bool(p.session)


@dataclass(slots=True)
class LiveExport:
    """Copies of a state's live vectors for a rebuild outside the lock."""

    ids: I64
    vectors: F32
    columns: PayloadColumns
    seq: int


class State:
    def __init__(
        self, spec: CollectionSpec, built: IndexKind, index: Any, params: IndexParams, seq: int
    ) -> None:
        self.spec = spec
        self.built = built
        self.index = index
        self.params = params
        self.seq = seq  # last operation applied
        self.next_slot = 0
        self.slot_ids: I64 = np.empty(0, dtype=np.int64)
        self.live: npt.NDArray[np.bool_] = np.empty(0, dtype=bool)
        self.id_to_slot: dict[int, int] = {}
        self.columns = PayloadColumns()
        self.tombstones = 0  # dead slots still inside a FLAT/HNSW index
        self.ops_since_snapshot = 0
        self._live_bits: npt.NDArray[np.uint8] | None = None
        self.gpu_index: Any = None

    @classmethod
    def empty(cls, spec: CollectionSpec, seq: int = 0) -> State:
        """A new collection: HNSW if asked for, else FLAT until it grows (AUTO) or
        has enough vectors to train on (IVF_PQ)."""
        built = IndexKind.HNSW if spec.index == IndexKind.HNSW else IndexKind.FLAT
        return cls(spec, built, fx.new_index(built, spec.dimension, spec.metric, spec.params),
                   spec.params, seq)  # fmt: skip

    @property
    def count(self) -> int:
        return len(self.id_to_slot)

    # -- mutations ---------------------------------------------------------------
    def _reserve(self, n: int) -> None:
        need = self.next_slot + n
        if need > len(self.slot_ids):
            cap = max(need, 2 * len(self.slot_ids), 1024)
            ids = np.full(cap, -1, dtype=np.int64)
            ids[: self.next_slot] = self.slot_ids[: self.next_slot]
            live = np.zeros(cap, dtype=bool)
            live[: self.next_slot] = self.live[: self.next_slot]
            self.slot_ids, self.live = ids, live

    def _kill(self, slots: list[int]) -> None:
        if not slots:
            return
        arr = np.asarray(slots, dtype=np.int64)
        self.live[arr] = False
        if self.built == IndexKind.IVF_PQ:
            fx.remove(self.index, self.built, arr)
        else:
            self.tombstones += len(slots)

    def upsert(
        self, ids: I64, vectors: F32, payloads: Sequence[vectors_pb2.VectorPayload] = ()
    ) -> None:
        """Insert or replace. ``ids`` are unique within the batch (validated)."""
        n = len(ids)
        old = [s for s in (self.id_to_slot.get(i) for i in ids.tolist()) if s is not None]
        self._kill(old)
        self._reserve(n)
        first = self.next_slot
        fx.add(self.index, self.built, vectors, first)
        self.slot_ids[first : first + n] = ids
        self.live[first : first + n] = True
        self.id_to_slot.update(zip(ids.tolist(), range(first, first + n), strict=True))
        self.next_slot = first + n
        if payloads:
            self.columns.grow(self.next_slot)
            for j, payload in enumerate(payloads):
                if _has_payload(payload):
                    self.columns.set(first + j, payload)
        self._changed(n)

    def delete(self, ids: I64) -> int:
        """Delete the ids that exist; returns how many did."""
        pop = self.id_to_slot.pop
        slots = [s for s in (pop(i, None) for i in ids.tolist()) if s is not None]
        self._kill(slots)
        self._changed(len(ids))
        return len(slots)

    def _changed(self, ops: int) -> None:
        self._live_bits = None
        self.gpu_index = None
        self.ops_since_snapshot += ops

    def apply(self, seq: int, entry: records.VectorLogEntry) -> None:
        """Replay one logged operation (recovery, load, catch-up after a rebuild)."""
        ids = np.frombuffer(entry.ids, dtype="<i8").astype(np.int64)
        if entry.op == records.VectorLogEntry.UPSERT:
            vectors = np.frombuffer(entry.vectors, dtype="<f4").reshape(len(ids), -1)
            self.upsert(ids, np.ascontiguousarray(vectors, dtype=np.float32), entry.payloads)
        elif entry.op == records.VectorLogEntry.DELETE:
            self.delete(ids)
        else:
            raise InvariantViolation(f"log entry {seq} of {self.spec.label} has op {entry.op}")
        self.seq = seq

    # -- reads -------------------------------------------------------------------
    def _live_bitmap(self) -> npt.NDArray[np.uint8]:
        bits = self._live_bits
        if bits is None:
            bits = self._live_bits = np.packbits(self.live[: self.next_slot], bitorder="little")
        return bits

    def search(
        self, queries: F32, k: int, flt: Filter, ef_search: int, nprobe: int
    ) -> tuple[F32, I64]:
        """(distances, ids) of shape (nq, k); id -1 where fewer than k matched.
        Deleted and replaced vectors are excluded inside faiss (bitmap selector)
        and checked again on the way out."""
        nq, n = len(queries), self.next_slot
        none = (np.full((nq, k), np.nan, dtype=np.float32), np.full((nq, k), -1, dtype=np.int64))
        if self.count == 0:
            return none
        allowed: npt.NDArray[np.uint8] | None = None
        matches = self.count
        if not flt.empty:
            mask = self.columns.mask(flt, n) & self.live[:n]
            matches = int(mask.sum())
            if not matches:
                return none
            if self.built == IndexKind.HNSW and matches <= EXACT_FILTER_MAX_ROWS:
                # few matches: compare them all (the graph walk would miss some)
                return self._finish(
                    *fx.search_among(self.index, self.built, queries, k, np.flatnonzero(mask))
                )
            allowed = np.packbits(mask, bitorder="little")
        elif self.tombstones:
            allowed = self._live_bitmap()
        index = self.index
        if allowed is None and self.gpu_index is not None:
            index = self.gpu_index
        distances, slots = fx.search(index, self.built, queries, k, allowed, n, ef_search, nprobe)
        if self.built == IndexKind.IVF_PQ:
            # the nprobe lists searched may hold fewer than k of the matches:
            # probe more lists of the CPU index (a GPU copy takes no filter)
            # until each query has k or every list was searched
            found = (distances, slots)
            distances, slots = fx.widen_short(self.index, queries, k, allowed, n, nprobe,
                                              matches, found)  # fmt: skip
        return self._finish(distances, slots)

    def _finish(self, distances: F32, slots: I64) -> tuple[F32, I64]:
        """Slots to ids (-1 for none, and for a slot no longer live)."""
        valid = slots >= 0
        safe = np.where(valid, slots, 0)
        valid &= self.live[safe]
        ids = np.where(valid, self.slot_ids[safe], -1)
        # a missing result's distance is NaN, as when nothing matched at all
        # (faiss fills its own gaps with the largest float)
        return np.where(valid, np.asarray(distances, dtype=np.float32), np.float32(np.nan)), ids

    def live_slots(self) -> I64:
        return np.flatnonzero(self.live[: self.next_slot]).astype(np.int64)

    @property
    def memory_bytes(self) -> int:
        own = self.slot_ids.nbytes + self.live.nbytes + self.columns.nbytes
        return fx.memory_bytes(self.index, self.built) + own + DICT_ENTRY_BYTES * self.count

    @property
    def dead_ratio(self) -> float:
        return self.tombstones / self.next_slot if self.next_slot else 0.0

    # -- rebuilds ----------------------------------------------------------------
    def export_live(self) -> LiveExport:
        """Copies of the live vectors, ids and payload columns (FLAT/HNSW only)."""
        slots = self.live_slots()
        vectors = fx.reconstruct(self.index, self.built, slots)
        columns = PayloadColumns.from_arrays(*self.columns.to_arrays(), self.columns.size)
        columns.grow(self.next_slot)
        columns.take(slots)
        return LiveExport(self.slot_ids[slots].copy(), vectors, columns, self.seq)

    @classmethod
    def rebuilt(cls, spec: CollectionSpec, target: IndexKind, live: LiveExport) -> State:
        """A fresh state of kind ``target`` holding exactly ``live`` (slow: builds
        the index; call without the collection's lock)."""
        if target == IndexKind.IVF_PQ:
            index, params = fx.train_ivf_pq(live.vectors, spec.dimension, spec.metric, spec.params)
        else:
            index, params = (
                fx.new_index(target, spec.dimension, spec.metric, spec.params),
                spec.params,
            )
        state = cls(spec, target, index, params, live.seq)
        n = len(live.ids)
        state._reserve(n)
        fx.add(index, target, live.vectors, 0)
        state.slot_ids[:n] = live.ids
        state.live[:n] = True
        state.next_slot = n
        state.id_to_slot = dict(zip(live.ids.tolist(), range(n), strict=True))
        state.columns = live.columns
        return state
