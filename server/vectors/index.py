"""faiss underneath: building, searching and sizing one index.

Labels are *slots*, numbers the collection hands out in order and never reuses
(``collection.State`` maps them to client ids). FLAT and HNSW indexes label
vectors by position, so slot == position there; IVF_PQ stores the slot as its
id (``add_with_ids``). FLAT and HNSW cannot remove vectors cheaply (HNSW not at
all), so deleted slots stay in them as tombstones that searches exclude with an
``IDSelectorBitmap`` until a rebuild drops them; IVF_PQ removes them at once.

This is the only module that imports faiss.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import Any

# faiss's OpenMP threads spin while they wait for work by default; on a host
# whose cores are shared (other daemons, RPC threads) that turns a 2 s k-means
# into 25 s. Passive waiting costs little here. Read when faiss loads its
# OpenMP runtime, so it must be set before the import; the environment wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import faiss as _faiss
import numpy as np
import numpy.typing as npt

from tiermem.server.errors import InvariantViolation
from tiermem.server.vectors.types import IndexKind, IndexParams, Metric

log = logging.getLogger(__name__)

#: faiss's bundled type stubs lag its API (SearchParametersHNSW, IDSelectorBitmap ...).
faiss: Any = _faiss

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]


def faiss_metric(metric: Metric) -> int:
    return int(faiss.METRIC_L2 if metric == Metric.L2 else faiss.METRIC_INNER_PRODUCT)


def normalize(vectors: F32) -> F32:
    """Unit rows (cosine collections store and query normalised vectors)."""
    out = np.array(vectors, dtype=np.float32, copy=True, order="C")
    faiss.normalize_L2(out)
    return out


def pq_m_for(dimension: int) -> int:
    """Default sub-quantisers: the largest divisor of d that is at most d/4 and 64."""
    for m in range(min(64, max(1, dimension // 4)), 0, -1):
        if dimension % m == 0:
            return m
    return 1


def nlist_for(count: int) -> int:
    """Default inverted lists for ``count`` vectors: ~4 sqrt(n), >= 39 points per list."""
    return int(max(1, min(65_536, 4 * math.sqrt(max(count, 1)), count // 39)))


def new_index(kind: IndexKind, dimension: int, metric: Metric, params: IndexParams) -> Any:
    """An empty FLAT or HNSW index (IVF_PQ is built by ``train_ivf_pq``)."""
    m = faiss_metric(metric)
    if kind == IndexKind.FLAT:
        return faiss.IndexFlat(dimension, m)
    if kind == IndexKind.HNSW:
        index = faiss.IndexHNSWFlat(dimension, params.hnsw_m, m)
        index.hnsw.efConstruction = params.hnsw_ef_construction
        index.hnsw.efSearch = params.hnsw_ef_search
        return index
    raise InvariantViolation(f"new_index cannot build {kind!r} without training data")


#: Training vectors per IVF list that faiss's k-means asks for at least.
MIN_POINTS_PER_LIST = 39


def train_ivf_pq(
    vectors: F32, dimension: int, metric: Metric, params: IndexParams, seed: int = 1234
) -> tuple[Any, IndexParams]:
    """Train an empty IVF_PQ index on ``vectors``; returns it with the parameters used.
    An ``ivf_nlist`` asked for is capped at one list per 39 training vectors
    (faiss's own minimum for k-means): more lists than that cannot be trained,
    and the collection retried and failed its training at every maintenance."""
    nlist = params.ivf_nlist or nlist_for(len(vectors))
    nlist = max(1, min(nlist, len(vectors) // MIN_POINTS_PER_LIST))
    pq_m = params.pq_m or pq_m_for(dimension)
    quantizer = faiss.IndexFlat(dimension, faiss_metric(metric))
    index = faiss.IndexIVFPQ(
        quantizer, dimension, nlist, pq_m, params.pq_nbits, faiss_metric(metric)
    )
    index.nprobe = params.ivf_nprobe
    sample_max = max(nlist * 64, (1 << params.pq_nbits) * 64)
    train = vectors
    if len(vectors) > sample_max:
        pick = np.random.default_rng(seed).choice(len(vectors), sample_max, replace=False)
        train = vectors[np.sort(pick)]
    index.train(np.ascontiguousarray(train, dtype=np.float32))
    used = IndexParams(
        params.hnsw_m,
        params.hnsw_ef_construction,
        params.hnsw_ef_search,
        nlist,
        params.ivf_nprobe,
        pq_m,
        params.pq_nbits,
    )
    return index, used


def add(index: Any, kind: IndexKind, vectors: F32, first_slot: int) -> None:
    """Add ``vectors`` as slots ``first_slot, first_slot+1, ...``."""
    if len(vectors) == 0:
        return
    if kind == IndexKind.IVF_PQ:
        slots = np.arange(first_slot, first_slot + len(vectors), dtype=np.int64)
        index.add_with_ids(vectors, slots)
        return
    if index.ntotal != first_slot:
        raise InvariantViolation(f"index holds {index.ntotal} vectors; next slot is {first_slot}")
    index.add(vectors)


def remove(index: Any, kind: IndexKind, slots: I64) -> None:
    """Remove slots from an IVF_PQ index (the others keep tombstones)."""
    if kind == IndexKind.IVF_PQ and len(slots):
        index.remove_ids(faiss.IDSelectorBatch(np.ascontiguousarray(slots, dtype=np.int64)))


def reconstruct(index: Any, kind: IndexKind, slots: I64) -> F32:
    """Exact stored vectors of FLAT/HNSW slots (for rebuilds)."""
    if kind == IndexKind.IVF_PQ:
        raise InvariantViolation("IVF_PQ holds lossy codes; its vectors cannot be rebuilt from it")
    if len(slots) == 0:
        return np.empty((0, index.d), dtype=np.float32)
    store = index if kind == IndexKind.FLAT else index.storage
    if len(slots) == index.ntotal and bool(np.all(slots == np.arange(len(slots)))):
        return np.asarray(store.reconstruct_n(0, index.ntotal), dtype=np.float32)
    return np.asarray(store.reconstruct_batch(np.ascontiguousarray(slots, dtype=np.int64)))


def search(
    index: Any,
    kind: IndexKind,
    queries: F32,
    k: int,
    allowed: npt.NDArray[np.uint8] | None,
    slot_count: int,
    ef_search: int,
    nprobe: int,
) -> tuple[F32, I64]:
    """Distances and slots (-1 = none) of the k nearest allowed vectors per query.

    ``allowed`` is a little-endian bitmap over ``[0, slot_count)``; None = all.
    The bitmap must stay alive for the call (it does: it is an argument)."""
    sel = None if allowed is None else faiss.IDSelectorBitmap(slot_count, faiss.swig_ptr(allowed))
    if kind == IndexKind.HNSW:
        params: Any = faiss.SearchParametersHNSW(efSearch=max(ef_search, k))
    elif kind == IndexKind.IVF_PQ:
        params = faiss.SearchParametersIVF(nprobe=nprobe)
    else:
        params = faiss.SearchParameters()
    if sel is not None:
        params.sel = sel
    distances, labels = index.search(queries, k, params=params)
    return distances, labels


#: How much wider each retry of a short IVF_PQ search probes (``widen_short``).
NPROBE_GROWTH = 4


def widen_short(
    index: Any,
    queries: F32,
    k: int,
    allowed: npt.NDArray[np.uint8] | None,
    slot_count: int,
    nprobe: int,
    want: int,
    found: tuple[F32, I64],
) -> tuple[F32, I64]:
    """Complete ``found``, an IVF_PQ ``search`` with ``nprobe`` lists, so that every
    query has min(k, ``want``) results (``want``: the vectors the search may
    return, all of them matching the filter). faiss looks only in the ``nprobe``
    lists nearest the query and applies the filter inside them, so a selective
    filter left rows short although k vectors matched. Short queries are
    searched again with ``NPROBE_GROWTH`` times the lists, up to every list (an
    exhaustive scan of the codes, which finds whatever matches)."""
    distances, labels = np.array(found[0], copy=True), np.array(found[1], copy=True)
    nlist = int(index.nlist)
    probe = max(1, min(nprobe, nlist))
    target = min(k, want)
    while probe < nlist:
        short = np.flatnonzero((labels >= 0).sum(axis=1) < target)
        if len(short) == 0:
            break
        probe = min(nlist, probe * NPROBE_GROWTH)
        more = search(index, IndexKind.IVF_PQ, queries[short], k, allowed, slot_count, 0, probe)
        distances[short], labels[short] = more
    return distances, labels


def search_among(index: Any, kind: IndexKind, queries: F32, k: int, slots: I64) -> tuple[F32, I64]:
    """``search`` restricted to ``slots``, exactly: their stored vectors compared
    with every query (FLAT/HNSW). For a selective filter on an HNSW graph: its
    walk stops after ``efSearch`` candidates, and when few vectors match, most
    candidates are filtered out and fewer than k results came back although k
    matched."""
    vectors = reconstruct(index, kind, slots)
    flat = faiss.IndexFlat(int(index.d), int(index.metric_type))
    flat.add(vectors)
    distances, rows = flat.search(queries, k)
    found = rows >= 0
    return distances, np.where(found, slots[np.where(found, rows, 0)], -1)


def memory_bytes(index: Any, kind: IndexKind) -> int:
    """Approximate resident bytes of the index's data structures."""
    if index is None:
        return 0
    n, d = int(index.ntotal), int(index.d)
    if kind == IndexKind.FLAT:
        return n * d * 4
    if kind == IndexKind.HNSW:
        hnsw = index.hnsw
        graph = hnsw.neighbors.size() * 4 + hnsw.levels.size() * 4 + hnsw.offsets.size() * 8
        return n * d * 4 + int(graph)
    pq = index.pq
    centroids = int(index.nlist) * d * 4
    codebooks = int(pq.M) * (1 << int(pq.nbits)) * int(pq.dsub) * 4
    return n * (int(index.code_size) + 8) + centroids + codebooks


def write(index: Any, path: Path) -> None:
    faiss.write_index(index, str(path))


def read(path: Path, kind: IndexKind, mmap: bool) -> Any:
    """Read an index file; FLAT and HNSW are memory-mapped when ``mmap`` (their
    arrays stay in the page cache until a write copies them). IVF_PQ is read
    whole: faiss maps it as read-only on-disk lists that cannot take adds."""
    flags = faiss.IO_FLAG_MMAP if mmap and kind in (IndexKind.FLAT, IndexKind.HNSW) else 0
    return faiss.read_index(str(path), flags)


# -- GPU (HBM tier with CUDA). Untested on CPU-only hosts: tests/gpu. -------------
def gpu_count() -> int:
    try:
        return int(faiss.get_num_gpus())
    except AttributeError:  # faiss-cpu builds without the GPU symbols
        return 0


class GpuMirror:
    """A GPU copy of a FLAT or IVF_PQ index for unfiltered searches. faiss has no
    GPU HNSW; GPU indexes take no ID selectors, so filtered searches and
    collections with tombstones search the CPU index."""

    def __init__(self, device: int = 0) -> None:
        self._res = faiss.StandardGpuResources()
        self._device = device

    def clone(self, index: Any) -> Any:
        return faiss.index_cpu_to_gpu(self._res, self._device, index)
