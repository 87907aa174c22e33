"""What ``vector.topk`` searches: the scratchpad's memory index and every vector
collection of the collections service, behind the ``MemoryIndex`` search shape.

Names: ``scratch`` is the scratchpad memory index; ``NAME`` is the collection
NAME in namespace "default"; ``NAMESPACE/NAME`` names any other namespace.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from tiermem.server.errors import NotFound
from tiermem.server.scratch.memory_index import Hit, MemoryIndex
from tiermem.server.services.vectors import VectorService
from tiermem.server.vectors.types import Filter, Metric


class CollectionIndex:
    """One vector collection seen through the memory-index search interface.
    Scores are higher-is-better: similarity for cosine/inner product, negative
    distance for L2. The ``session`` filter maps to the collection's owner field;
    ``kinds``/``tags`` filters (scratch-only fields) are ignored."""

    def __init__(self, vectors: VectorService, namespace: str, name: str) -> None:
        self._vectors = vectors
        self._namespace = namespace
        self._name = name
        info = vectors.describe(namespace, name)
        self.dim = int(info.spec.dimension)
        self._l2 = info.spec.metric == Metric.L2

    def search(
        self, vector: npt.NDArray[np.float32], k: int, filter: Mapping[str, Any] | None = None
    ) -> list[Hit]:
        session = str((filter or {}).get("session", ""))
        result = self._vectors.search(
            self._namespace, self._name, vector.reshape(1, -1), k, Filter(session=session)
        )
        hits = []
        for vid, dist in zip(result.ids[0].tolist(), result.distances[0].tolist(), strict=True):
            if vid < 0:
                continue
            score = -float(dist) if self._l2 else float(dist)
            hits.append(Hit(int(vid), score, {"session": session or None}))
        return hits


class CollectionIndexes:
    """``indexes`` service of the operators: name -> searchable index."""

    def __init__(self, scratch: MemoryIndex, vectors: VectorService | None) -> None:
        self._scratch = scratch
        self._vectors = vectors

    def get(self, name: str) -> MemoryIndex | CollectionIndex | None:
        if name == "scratch":
            return self._scratch
        if self._vectors is None:
            return None
        namespace, _, collection = name.rpartition("/")
        try:
            return CollectionIndex(self._vectors, namespace or "default", collection)
        except NotFound:
            return None

    def __iter__(self) -> Iterator[str]:
        yield "scratch"
        if self._vectors is not None:
            for row in self._vectors.memory_report():
                yield row.name if row.namespace == "default" else f"{row.namespace}/{row.name}"
