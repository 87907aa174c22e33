"""Large copies into and out of the shared-memory arena, split across two threads.

One thread copying 32 MiB out of the arena measured 6.6 ms here against 4.4 ms
for two threads each copying half (``np.copyto`` releases the GIL), on the
2-core development VM. So a copy of at least ``SPLIT_MIN_BYTES`` hands its
second half to one helper thread shared by the process while the calling
thread copies the first. When the helper is busy with another caller's copy,
the calling thread copies everything itself, so concurrent callers never queue
behind each other. Copies run in ``chunk_bytes`` pieces so that a lease
deadline is checked between them.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from typing import Any

import numpy as np

#: Copies at least this long are split in two.
SPLIT_MIN_BYTES = 8 << 20

_helper_claim = threading.Lock()
_helper: concurrent.futures.ThreadPoolExecutor | None = None
_helper_created = threading.Lock()


def _pool() -> concurrent.futures.ThreadPoolExecutor:
    global _helper
    with _helper_created:
        if _helper is None:
            _helper = concurrent.futures.ThreadPoolExecutor(1, "tiermem-copy")
        return _helper


def _copy_range(
    dst: np.ndarray[Any, Any], src: np.ndarray[Any, Any], start: int, end: int, chunk: int,
    deadline: float | None,
) -> bool:  # fmt: skip
    for pos in range(start, end, chunk):
        if deadline is not None and time.monotonic() >= deadline:
            return False
        stop = min(pos + chunk, end)
        np.copyto(dst[pos:stop], src[pos:stop])
    return True


def copy_bytes(
    dst: np.ndarray[Any, Any], src: np.ndarray[Any, Any], chunk_bytes: int,
    deadline: float | None = None,
) -> bool:  # fmt: skip
    """Copy ``src`` into ``dst`` (uint8 arrays of one length); False if
    ``deadline`` (``time.monotonic``) passed before it was done."""
    n = len(src)
    if n < SPLIT_MIN_BYTES or not _helper_claim.acquire(blocking=False):
        return _copy_range(dst, src, 0, n, chunk_bytes, deadline)
    try:
        half = n // 2
        other = _pool().submit(_copy_range, dst, src, half, n, chunk_bytes, deadline)
        mine = _copy_range(dst, src, 0, half, chunk_bytes, deadline)
        return other.result() and mine
    finally:
        _helper_claim.release()
