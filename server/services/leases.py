"""Read leases on in-memory copies: nothing leased is freed under a reader.

Readers ``acquire`` the (tier, location) they read from; ``free`` of a leased
location is deferred until the last ``release``. Used by gRPC reads (for the
duration of a streamed response), by migrations (for the duration of a copy)
and by the shared-memory data plane.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from tiermem.server.errors import InvariantViolation
from tiermem.server.model import Tier

Freer = Callable[[Tier, int, int], None]


class Leases:
    def __init__(self, freer: Freer) -> None:
        self._free = freer
        self._lock = threading.Lock()
        self._refs: dict[tuple[Tier, int], int] = {}
        self._deferred: dict[tuple[Tier, int], int] = {}

    def acquire(self, tier: Tier, location: int) -> None:
        with self._lock:
            key = (tier, location)
            if key in self._deferred:
                raise InvariantViolation(f"lease on a freed location {key}")
            self._refs[key] = self._refs.get(key, 0) + 1

    def release(self, tier: Tier, location: int) -> None:
        key = (tier, location)
        with self._lock:
            n = self._refs.get(key, 0)
            if n <= 0:
                raise InvariantViolation(f"release of an unleased location {key}")
            if n > 1:
                self._refs[key] = n - 1
                return
            del self._refs[key]
            size = self._deferred.pop(key, None)
        if size is not None:
            self._free(tier, location, size)

    def is_leased(self, tier: Tier, location: int) -> bool:
        return (tier, location) in self._refs

    def free(self, tier: Tier, location: int, size: int) -> None:
        """Free now, or when the last lease on the location is released."""
        key = (tier, location)
        with self._lock:
            if key in self._refs:
                self._deferred[key] = size
                return
        self._free(tier, location, size)

    @property
    def active(self) -> int:
        with self._lock:
            return len(self._refs)
