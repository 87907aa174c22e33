"""Least-recently-used victim selection over index columns (vectorised)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt


def lru_victims(
    candidates: npt.NDArray[np.int64],
    atime: npt.NDArray[Any],
    sizes: npt.NDArray[Any],
    bytes_needed: int,
) -> npt.NDArray[np.int64]:
    """Oldest-accessed rows among ``candidates`` whose sizes add up to at least
    ``bytes_needed`` (all candidates if they do not add up to that much)."""
    if bytes_needed <= 0 or len(candidates) == 0:
        return np.empty(0, dtype=np.int64)
    order = candidates[np.argsort(atime[candidates], kind="stable")]
    cumulative = np.cumsum(sizes[order])
    count = int(np.searchsorted(cumulative, bytes_needed, side="left")) + 1
    return order[: min(count, len(order))]
