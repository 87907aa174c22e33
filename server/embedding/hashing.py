"""The light default embedder: signed hashed character n-grams.

Each text is lower-cased, framed by spaces and cut into character 3-grams and
5-grams; every n-gram adds ±1 to one of ``dim`` buckets chosen by a 32-bit
multiplicative hash (the sign comes from another bit of the same hash), and the
row is L2-normalised. Texts sharing words and spellings get a high cosine
similarity; meaning beyond that is not captured (use all-MiniLM-L6-v2 for it).
A whole batch is hashed with a few numpy passes: about a microsecond per short
record, no model, no download.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tiermem.server.embedding.base import Vectors

_P = (np.uint32(0x9E3779B1), np.uint32(0x85EBCA77), np.uint32(0xC2B2AE3D), np.uint32(0x27D4EB2F))
_MAX_CHARS = 2048


class HashingEmbedder:
    name = "hash-ngram"

    def __init__(self, dim: int = 256, ngrams: tuple[int, ...] = (3, 5)) -> None:
        if dim <= 0 or dim & (dim - 1):
            raise ValueError("dim must be a power of two")
        self.dim = dim
        self.ngrams = ngrams

    def embed(self, texts: Sequence[str]) -> Vectors:
        n = len(texts)
        out = np.zeros((n, self.dim), dtype=np.float32)
        if n == 0:
            return out
        parts = [b" " + t.lower().encode("utf-8", "replace")[:_MAX_CHARS] + b" " for t in texts]
        lens = np.fromiter((len(p) for p in parts), dtype=np.int64, count=n)
        buf = np.frombuffer(b"".join(parts), dtype=np.uint8).astype(np.uint32)
        seg = np.repeat(np.arange(n, dtype=np.int64), lens)
        flat = np.zeros(n * self.dim, dtype=np.float64)
        with np.errstate(over="ignore"):
            for g in self.ngrams:
                if len(buf) < g:
                    continue
                m = len(buf) - g + 1
                h = np.zeros(m, dtype=np.uint32)
                for j in range(g):
                    h = (h * _P[j % 4]) ^ buf[j : j + m]
                h ^= h >> np.uint32(15)
                h *= _P[3]
                h ^= h >> np.uint32(13)
                same = seg[:m] == seg[g - 1 :]
                rows = seg[:m][same]
                hv = h[same]
                bucket = (hv & np.uint32(self.dim - 1)).astype(np.int64)
                sign = np.where(hv >> np.uint32(31), -1.0, 1.0)
                flat += np.bincount(rows * self.dim + bucket, weights=sign, minlength=n * self.dim)
        out[:] = flat.reshape(n, self.dim)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        np.divide(out, norms, out=out, where=norms > 0)
        return out
