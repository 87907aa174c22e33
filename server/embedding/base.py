"""The embedder interface and the factory that picks one."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

log = logging.getLogger(__name__)

Vectors = npt.NDArray[np.float32]


class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors of ``dim`` columns."""

    name: str
    dim: int

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One row per text, in order. Thread-safe; may batch internally."""
        ...


def make_embedder(choice: Literal["auto", "hash", "minilm"] = "auto", **kw: Any) -> Embedder:
    """``minilm`` needs the ``embed`` extra (raises ImportError without it);
    ``auto`` uses it when installed and the hashed embedder otherwise."""
    from tiermem.server.embedding.hashing import HashingEmbedder

    if choice == "hash":
        return HashingEmbedder()
    from tiermem.server.embedding.minilm import MiniLmEmbedder, minilm_available

    if choice == "minilm" or minilm_available():
        return MiniLmEmbedder(**kw)
    log.info("all-MiniLM-L6-v2 is not installed (extra 'embed'); using hashed n-gram embeddings")
    return HashingEmbedder()
