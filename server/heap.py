"""Handing freed heap back to the operating system.

Whole-catalog passes (recovery, each rebalancing plan) allocate arrays the size
of the catalog and free them again; glibc keeps such freed memory mapped, so the
daemon's resident size would sit at the peak of the last pass rather than at
what it holds. ``malloc_trim`` returns it (a no-op where libc is not glibc).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    with contextlib.suppress(OSError, AttributeError, TypeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn: Callable[[int], int] = libc.malloc_trim
        return fn
    return None


def return_free_heap() -> bool:
    """Release free heap pages to the OS; False where the C library cannot."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
