"""Limits of the data plane: the byte budget for what it holds on clients'
behalf (uncommitted reservations, staging copies, bytes pinned by tickets)
and the size of one request's batch."""

from __future__ import annotations

import threading

from tiermem.server.errors import CapacityExceeded, InvalidArgument, InvariantViolation


def check_batch(n: int, limit: int, what: str) -> None:
    """Raise InvalidArgument unless a request names 1..``limit`` objects."""
    if n == 0:
        raise InvalidArgument(f"{what} names no objects")
    if n > limit:
        raise InvalidArgument(
            f"{what} names {n} objects; the limit is {limit} (dataplane.max_batch_objects)"
        )


class ByteBudget:
    def __init__(self, limit_bytes: int, name: str) -> None:
        self.limit_bytes = limit_bytes
        self._name = name
        self._used = 0
        self._lock = threading.Lock()

    @property
    def used_bytes(self) -> int:
        return self._used

    def take(self, nbytes: int) -> None:
        """Hold ``nbytes`` more, or raise CapacityExceeded (RESOURCE_EXHAUSTED)."""
        with self._lock:
            if self._used + nbytes > self.limit_bytes:
                raise CapacityExceeded(
                    f"{self._used} bytes are held by pending data-plane transfers and "
                    f"{nbytes} more would exceed {self._name}={self.limit_bytes}; "
                    "finish or release pending transfers and retry"
                )
            self._used += nbytes

    def give(self, nbytes: int) -> None:
        with self._lock:
            if nbytes > self._used:
                raise InvariantViolation(f"{self._name}: gave back more than was held")
            self._used -= nbytes
