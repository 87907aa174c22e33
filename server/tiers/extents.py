"""Best-fit extent allocator over a fixed byte range, with coalescing frees.

Used for the DRAM arena and the HBM pool. Sizes are rounded up to ``granule``
bytes, so every extent starts on a granule boundary. Free extents are kept in a
sorted list by (size, start) for best fit, plus start/end maps for merging
neighbours on free. All operations are O(log n) in the number of free extents.
Not thread-safe: the owning engine serialises calls.
"""

from __future__ import annotations

from sortedcontainers import SortedList

from tiermem.server.errors import InvariantViolation


class ExtentAllocator:
    def __init__(self, capacity_bytes: int, granule: int = 4096) -> None:
        if granule <= 0 or granule & (granule - 1):
            raise ValueError("granule must be a power of two")
        self.granule = granule
        self.capacity_bytes = (capacity_bytes // granule) * granule
        self.allocated_bytes = 0
        self._by_size: SortedList = SortedList()
        self._by_start: dict[int, int] = {}
        self._by_end: dict[int, int] = {}
        self._live: dict[int, int] = {}
        if self.capacity_bytes:
            self._add_free(0, self.capacity_bytes)

    def rounded(self, nbytes: int) -> int:
        g = self.granule
        return max(g, (nbytes + g - 1) // g * g)

    @property
    def free_bytes(self) -> int:
        return self.capacity_bytes - self.allocated_bytes

    def largest_free(self) -> int:
        return self._by_size[-1][0] if self._by_size else 0

    def _add_free(self, start: int, size: int) -> None:
        self._by_size.add((size, start))
        self._by_start[start] = size
        self._by_end[start + size] = start

    def _remove_free(self, start: int, size: int) -> None:
        self._by_size.remove((size, start))
        del self._by_start[start]
        del self._by_end[start + size]

    def allocate(self, nbytes: int) -> int | None:
        """Offset of a new extent of at least ``nbytes``, or None if none fits."""
        size = self.rounded(nbytes)
        i = self._by_size.bisect_left((size, -1))
        if i == len(self._by_size):
            return None
        free_size, start = (int(v) for v in self._by_size[i])
        self._remove_free(start, free_size)
        if free_size > size:
            self._add_free(start + size, free_size - size)
        self._live[start] = size
        self.allocated_bytes += size
        return start

    def free(self, offset: int) -> int:
        """Release the extent at ``offset``; returns its rounded size."""
        size = self._live.pop(offset, None)
        if size is None:
            raise InvariantViolation(f"free of unallocated extent at {offset}")
        self.allocated_bytes -= size
        start, end = offset, offset + size
        prev_start = self._by_end.get(start)
        if prev_start is not None:
            prev_size = self._by_start[prev_start]
            self._remove_free(prev_start, prev_size)
            start = prev_start
        next_size = self._by_start.get(end)
        if next_size is not None:
            self._remove_free(end, next_size)
            end += next_size
        self._add_free(start, end - start)
        return size

    def trim_front(self, offset: int, nbytes: int) -> int:
        """Release the first ``nbytes`` (a multiple of the granule, less than the
        extent) of the live extent at ``offset``; returns where the rest starts,
        which is what ``free`` takes from then on."""
        size = self._live.get(offset)
        if size is None:
            raise InvariantViolation(f"trim of unallocated extent at {offset}")
        if nbytes <= 0 or nbytes % self.granule or nbytes >= size:
            raise InvariantViolation(f"cannot trim {nbytes} bytes off a {size}-byte extent")
        rest = offset + nbytes
        self._live[rest] = size - nbytes
        # the front is freed like an extent of its own (merging with free neighbours)
        self._live[offset] = nbytes
        self.free(offset)  # takes the front's bytes off ``allocated_bytes``
        return rest

    def size_of(self, offset: int) -> int:
        return self._live[offset]
