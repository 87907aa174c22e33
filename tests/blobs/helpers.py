"""Cheap test data for blob tests."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

MiB = 1 << 20


def pattern(size: int, seed: int = 0) -> bytes:
    """``size`` bytes, different per MiB block and per seed (cheap to make)."""
    base = hashlib.sha256(str(seed).encode()).digest() * (MiB // 32)
    out = bytearray(size)
    for i, start in enumerate(range(0, size, MiB)):
        n = min(MiB, size - start)
        out[start : start + n] = base[:n]
        out[start : start + 8] = (i + seed * 1_000_003).to_bytes(8, "little")[: min(8, n)]
    return bytes(out)


def write_big_file(path: Path, size: int) -> bytes:
    """A file of ``size`` bytes, every MiB distinct; returns its SHA-256."""
    block = bytearray(os.urandom(MiB))
    h = hashlib.sha256()
    with path.open("wb") as f:
        for i, start in enumerate(range(0, size, MiB)):
            block[:8] = i.to_bytes(8, "little")
            piece = memoryview(block)[: min(MiB, size - start)]
            f.write(piece)
            h.update(piece)
    return h.digest()


def sha256_file(path: Path) -> bytes:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(8 * MiB):
            h.update(chunk)
    return h.digest()
