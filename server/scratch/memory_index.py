"""The memory index: where flushed scratchpad records are found by meaning.

``MemoryIndex`` is the small interface the scratchpad and the ``vector.topk``
operator use. ``FaissMemoryIndex`` is an in-process faiss implementation (exact
inner-product search over normalised vectors, i.e. cosine); the collections
service can stand in for it later without touching its callers.

Filters are dicts with optional keys ``session`` (str), ``kinds`` (set of ints),
``tags`` (set of str: a payload matches if it carries any of them) and
``key_prefixes`` (sequence of str: a payload matches if its non-empty ``key``
starts with one of them; how a child's SCRATCH grants narrow a search, so
that the ``k`` results are ``k`` records the child may read).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

Payload = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Hit:
    id: int
    score: float
    payload: Payload


class MemoryIndex(Protocol):
    dim: int

    def add_batch(
        self,
        ids: npt.NDArray[np.int64],
        vectors: npt.NDArray[np.float32],
        payloads: Sequence[Payload],
    ) -> None:
        """Add (or replace) vectors with their payloads; one call per flushed batch."""
        ...

    def search(
        self, vector: npt.NDArray[np.float32], k: int, filter: Mapping[str, Any] | None = None
    ) -> list[Hit]:
        """The ``k`` best matches among entries passing ``filter``, best first."""
        ...

    def remove(self, ids: Sequence[int]) -> int:
        """Drop entries; returns how many existed."""
        ...

    def size_bytes(self) -> int:
        """Memory the index holds (vectors plus payloads, estimated)."""
        ...


def _matches(payload: Payload, flt: Mapping[str, Any]) -> bool:
    session = flt.get("session")
    if session is not None and payload.get("session") != session:
        return False
    kinds = flt.get("kinds")
    if kinds and payload.get("kind") not in kinds:
        return False
    tags = flt.get("tags")
    if tags and tags.isdisjoint(payload.get("tags", ())):
        return False
    prefixes = flt.get("key_prefixes")
    if prefixes is None:
        return True
    key = payload.get("key", "")
    return bool(key) and any(key.startswith(p) for p in prefixes)


class FaissMemoryIndex:
    """Exact search (``IndexIDMap2`` over ``IndexFlatIP``), thread-safe.

    Filtered searches restrict faiss to the matching ids with an
    ``IDSelectorBatch``; the candidates come from a per-session id set, so a
    query about one session never scans the others' payloads."""

    _PAYLOAD_OVERHEAD_BYTES = 240  # dict slot, small dict, ints: a rough measure

    def __init__(self, dim: int) -> None:
        import faiss

        self._faiss: Any = faiss
        self.dim = dim
        self._index: Any = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))
        self._payloads: dict[int, Payload] = {}
        self._by_session: dict[str, set[int]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._payloads)

    def add_batch(
        self,
        ids: npt.NDArray[np.int64],
        vectors: npt.NDArray[np.float32],
        payloads: Sequence[Payload],
    ) -> None:
        if len(ids) != len(vectors) or len(ids) != len(payloads):
            raise ValueError("ids, vectors and payloads must have the same length")
        if len(ids) == 0:
            return
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        with self._lock:
            present = [int(i) for i in ids if int(i) in self._payloads]
            if present:
                self._remove_locked(present)
            self._index.add_with_ids(vectors, ids)
            for i, payload in zip(ids.tolist(), payloads, strict=True):
                self._payloads[i] = payload
                session = payload.get("session")
                if isinstance(session, str):
                    self._by_session.setdefault(session, set()).add(i)

    def search(
        self, vector: npt.NDArray[np.float32], k: int, filter: Mapping[str, Any] | None = None
    ) -> list[Hit]:
        query = np.ascontiguousarray(vector, dtype=np.float32).reshape(1, self.dim)
        with self._lock:
            if not self._payloads or k <= 0:
                return []
            params = None
            if filter:
                session = filter.get("session")
                pool = (
                    self._by_session.get(session, set())
                    if isinstance(session, str)
                    else self._payloads.keys()
                )
                wanted = [i for i in pool if _matches(self._payloads[i], filter)]
                if not wanted:
                    return []
                selector = self._faiss.IDSelectorBatch(np.asarray(wanted, dtype=np.int64))
                params = self._faiss.SearchParameters(sel=selector)
                k = min(k, len(wanted))
            k = min(k, len(self._payloads))
            scores, ids = self._index.search(query, k, params=params)
            return [
                Hit(int(i), float(s), self._payloads[int(i)])
                for s, i in zip(scores[0], ids[0], strict=True)
                if i >= 0
            ]

    def remove(self, ids: Sequence[int]) -> int:
        with self._lock:
            return self._remove_locked([int(i) for i in ids if int(i) in self._payloads])

    def _remove_locked(self, ids: list[int]) -> int:
        if not ids:
            return 0
        self._index.remove_ids(self._faiss.IDSelectorBatch(np.asarray(ids, dtype=np.int64)))
        for i in ids:
            payload = self._payloads.pop(i)
            session = payload.get("session")
            if isinstance(session, str):
                members = self._by_session.get(session)
                if members is not None:
                    members.discard(i)
                    if not members:
                        del self._by_session[session]
        return len(ids)

    def size_bytes(self) -> int:
        n = len(self._payloads)
        return n * (self.dim * 4 + 8 + self._PAYLOAD_OVERHEAD_BYTES)
