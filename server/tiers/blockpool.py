"""Fixed-size slot allocator for KV blocks: O(1) allocate and free, no fragmentation.

KV chunks of one model all have the same size (the last chunk of a request
may be shorter), so a pool of equal slots serves them without the search and
coalescing an extent allocator needs. The pool covers the byte range
``[base, base + slots * slot_bytes)`` of its owner's memory; locations are byte
offsets in that memory, so they mix freely with extent locations.

Layout inside the HBM engine's one device tensor::

    0                      extent_bytes                              capacity
    | extents (any size)   | slot 0 | slot 1 | ... | slot n-1 |

Not thread-safe: the owning engine serialises calls.
"""

from __future__ import annotations

from tiermem.server.errors import InvariantViolation


class BlockPool:
    def __init__(self, base: int, slot_bytes: int, slots: int) -> None:
        if slot_bytes <= 0 or slots < 0 or base < 0:
            raise ValueError("BlockPool needs slot_bytes > 0, slots >= 0 and base >= 0")
        self.base = base
        self.slot_bytes = slot_bytes
        self.slots = slots
        self.capacity_bytes = slot_bytes * slots
        # Lowest slots first so a lightly used pool stays compact.
        self._free = list(range(slots - 1, -1, -1))
        self._live = bytearray(slots)

    @property
    def allocated_bytes(self) -> int:
        return (self.slots - len(self._free)) * self.slot_bytes

    @property
    def free_slots(self) -> int:
        return len(self._free)

    def owns(self, location: int) -> bool:
        return self.base <= location < self.base + self.capacity_bytes

    def allocate(self) -> int | None:
        """Offset of a free slot, or None when all are taken."""
        if not self._free:
            return None
        slot = self._free.pop()
        self._live[slot] = 1
        return self.base + slot * self.slot_bytes

    def free(self, location: int) -> None:
        slot, rem = divmod(location - self.base, self.slot_bytes)
        if rem or not 0 <= slot < self.slots or not self._live[slot]:
            raise InvariantViolation(f"free of a location that is no allocated slot: {location}")
        self._live[slot] = 0
        self._free.append(slot)
