"""Range reads that never return damaged bytes.

``VerifiedReader`` reads the aligned range of a read (``blocks.aligned_range``)
from a payload in units of ``read_unit_bytes`` (whole blocks, one ``readinto``
each), checks the xxh3-64 of every block against the content record, and
yields views of the verified bytes. A block that does not match raises
``Corrupted`` (DATA_LOSS) before any of its bytes is yielded, and calls
``on_damage`` so the content is marked damaged (the next upload of the same
bytes repairs it).

Two buffers are used in turn, so a yielded view stays valid until the
iteration after next (a consumer sending one view while the next is read).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import xxhash

from tiermem.server.blobs.blocks import AlignedRange, block_sum
from tiermem.server.blobs.payloads import PayloadReader
from tiermem.server.errors import Corrupted


class VerifiedReader:
    def __init__(
        self,
        payload: PayloadReader,
        rng: AlignedRange,
        block_bytes: int,
        sums: bytes,
        read_unit_bytes: int,
        what: str,
        on_damage: Callable[[int], None],
    ) -> None:
        self._payload = payload
        self._rng = rng
        self._block = block_bytes
        self._sums = sums
        self._unit = max(block_bytes, read_unit_bytes // block_bytes * block_bytes)
        self._what = what
        self._on_damage = on_damage

    def views(self) -> Iterator[memoryview]:
        """Verified views of the aligned range, in order."""
        rng, block = self._rng, self._block
        unit = min(self._unit, max(rng.aligned_length, 1))
        buffers = [np.empty(unit, dtype=np.uint8).data, None]
        pos, end = rng.aligned_offset, rng.aligned_offset + rng.aligned_length
        turn = 0
        while pos < end:
            n = min(unit, end - pos)
            buf = buffers[turn]
            if buf is None:
                buf = buffers[turn] = np.empty(unit, dtype=np.uint8).data
            view = buf[:n]
            self._payload.readinto(pos, view)
            for start in range(0, n, block):
                index = (pos + start) // block
                piece = view[start : start + block]
                if xxhash.xxh3_64_intdigest(piece) != block_sum(self._sums, index):
                    self._on_damage(index)
                    lo = pos + start
                    raise Corrupted(
                        f"{self._what}: block {index} (bytes {lo}..{lo + len(piece)}) failed "
                        "its checksum; the stored copy is damaged and is not served. "
                        "Upload the same bytes again to repair it"
                    )
            yield view
            pos += n
            turn ^= 1

    def close(self) -> None:
        self._payload.close()


class MemoryPayload:
    """A payload already in memory (an inline content)."""

    def __init__(self, data: bytes | memoryview) -> None:
        self._data = memoryview(data)

    def readinto(self, offset: int, buffer: memoryview) -> None:
        n = len(buffer)
        if offset + n > len(self._data):
            raise Corrupted(f"inline content ends at {len(self._data)} bytes, not {offset + n}")
        buffer[:] = self._data[offset : offset + n]

    def close(self) -> None:
        return None
