"""Range reads that never return damaged bytes.

``VerifiedReader`` reads the aligned range of a read (``blocks.aligned_range``)
from a payload in units of ``read_unit_bytes`` (whole blocks, one ``readinto``
each), checks the xxh3-64 of every block against the content record, and
yields views of the verified bytes. A block that does not match raises
``Corrupted`` (DATA_LOSS) before any of its bytes is yielded, and calls
``on_damage`` so the content is marked damaged (the next upload of the same
bytes repairs it).

A yielded view stays valid until the caller asks for the next one. Long
ranges are read ahead by a thread (``READ_AHEAD_UNITS`` units), so the disk
keeps reading while the caller sends.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator

import numpy as np
import xxhash

from tiermem.server.blobs.blocks import AlignedRange, block_sum
from tiermem.server.blobs.payloads import PayloadReader
from tiermem.server.errors import Corrupted

#: Read units a long range is read ahead of the one being sent.
READ_AHEAD_UNITS = 2


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
        """Verified views of the aligned range, in order. Ranges of more than two
        read units are read ahead by a thread (the next units are read and
        checked while the caller sends the current one)."""
        rng = self._rng
        unit = min(self._unit, max(rng.aligned_length, 1))
        end = rng.aligned_offset + rng.aligned_length
        spans = [(pos, min(unit, end - pos)) for pos in range(rng.aligned_offset, end, unit)]
        will_need = getattr(self._payload, "will_need", None)
        if will_need is not None and len(spans) > 2:
            will_need(rng.aligned_offset, rng.aligned_length)
        if len(spans) <= 2:
            buffers = [np.empty(unit, dtype=np.uint8).data for _ in spans]
            for (pos, n), buf in zip(spans, buffers, strict=True):
                yield self._read(pos, buf[:n])
            return
        yield from self._read_ahead(spans, unit)

    def read_into(self, buffer: memoryview) -> None:
        """Read and verify the whole aligned range into ``buffer`` (its length),
        unit by unit; the kernel reads the rest of a long range ahead meanwhile."""
        rng = self._rng
        will_need = getattr(self._payload, "will_need", None)
        if will_need is not None:
            will_need(rng.aligned_offset, rng.aligned_length)
        for start in range(0, rng.aligned_length, self._unit):
            n = min(self._unit, rng.aligned_length - start)
            self._read(rng.aligned_offset + start, buffer[start : start + n])

    def _read(self, pos: int, view: memoryview) -> memoryview:
        self._payload.readinto(pos, view)
        block = self._block
        for start in range(0, len(view), block):
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
        return view

    def _read_ahead(self, spans: list[tuple[int, int]], unit: int) -> Iterator[memoryview]:
        free: queue.Queue[memoryview] = queue.Queue()
        for _ in range(READ_AHEAD_UNITS + 1):
            free.put(np.empty(unit, dtype=np.uint8).data)
        ready: queue.Queue[tuple[memoryview, memoryview] | BaseException | None] = queue.Queue()
        stop = threading.Event()

        def produce() -> None:
            try:
                for pos, n in spans:
                    buf = free.get()
                    if stop.is_set():
                        return
                    ready.put((self._read(pos, buf[:n]), buf))
                ready.put(None)
            except BaseException as exc:  # handed to the consumer
                ready.put(exc)

        thread = threading.Thread(target=produce, name="tiermem-blob-read", daemon=True)
        thread.start()
        try:
            while True:
                item = ready.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                view, buf = item
                yield view
                free.put(buf)
        finally:
            stop.set()
            free.put(memoryview(b""))  # wakes a producer waiting for a buffer
            thread.join()

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
