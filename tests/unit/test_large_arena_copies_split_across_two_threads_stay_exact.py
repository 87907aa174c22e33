"""Copies into and out of the arena that are long enough are split across the
calling thread and one helper; the bytes are exact whether split or not, with
several callers at once, and a passed deadline is reported, not ignored."""

from __future__ import annotations

import threading
import time

import numpy as np

from tiermem.client.fastpath.copy import SPLIT_MIN_BYTES, copy_bytes

MiB = 1 << 20


def test_split_and_unsplit_copies_are_exact() -> None:
    rng = np.random.default_rng(7)
    for n in (1, SPLIT_MIN_BYTES - 1, SPLIT_MIN_BYTES, 3 * SPLIT_MIN_BYTES + 4097):
        src = rng.integers(0, 256, n, dtype=np.uint8)
        dst = np.zeros(n, dtype=np.uint8)
        assert copy_bytes(dst, src, chunk_bytes=MiB)
        assert np.array_equal(dst, src)


def test_concurrent_callers_each_get_their_own_bytes() -> None:
    n = 2 * SPLIT_MIN_BYTES + 11
    sources = [np.full(n, i, dtype=np.uint8) for i in range(6)]
    targets = [np.zeros(n, dtype=np.uint8) for _ in sources]
    results: list[bool] = []

    def copy(i: int) -> None:
        for _ in range(3):
            results.append(copy_bytes(targets[i], sources[i], chunk_bytes=2 * MiB))

    threads = [threading.Thread(target=copy, args=(i,)) for i in range(len(sources))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * 18
    for i, target in enumerate(targets):
        assert np.array_equal(target, sources[i])


def test_a_passed_deadline_is_reported() -> None:
    src = np.ones(2 * SPLIT_MIN_BYTES, dtype=np.uint8)
    dst = np.zeros_like(src)
    assert not copy_bytes(dst, src, chunk_bytes=MiB, deadline=time.monotonic() - 1)
    assert not copy_bytes(dst[:10], src[:10], chunk_bytes=MiB, deadline=time.monotonic() - 1)
