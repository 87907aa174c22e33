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

``fill`` (a whole range into one buffer: a shared-memory extent the client
copies from, or the hot cache's DRAM copy; ``read_into`` waits for all of
it) reads straight into the destination, no staging copy, with ``threads``
threads at once when the payload allows parallel reads: each reads a unit
and checks its blocks, so the device has several reads in flight and the
checks (xxh3 releases the GIL) overlap the reads instead of following them;
it reports the verified prefix of the buffer as it grows, so a consumer can
start on the first units while the last are still being read::

    thread 1  [read u0][check u0][read u4][check u4] ...
    thread 2   [read u1 ][check u1][read u5 ] ...
    thread 3    [read u2][check u2] ...          (units of read_unit_bytes)

Only a verified prefix is ever reported; a damaged unit stops the others and
raises Corrupted, and ``fill`` ends (exhausted, closed or raising) only after
every thread has stopped writing into the buffer.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator

import numpy as np
import xxhash

from tiermem.server.blobs.blocks import AlignedRange, block_sum
from tiermem.server.blobs.payloads import PayloadReader
from tiermem.server.errors import Corrupted, InvariantViolation

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
        threads: int = 1,
    ) -> None:
        """``threads``: how many threads ``fill`` reads with at once (when the
        payload allows parallel reads)."""
        self._payload = payload
        self._rng = rng
        self._block = block_bytes
        self._sums = sums
        self._unit = max(block_bytes, read_unit_bytes // block_bytes * block_bytes)
        self._what = what
        self._on_damage = on_damage
        self._threads = threads

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
        """Read and verify the whole aligned range into ``buffer`` (its length)."""
        for _ in self.fill(buffer):
            pass

    def fill(self, buffer: memoryview) -> Iterator[int]:
        """Read and verify the aligned range into ``buffer`` (its length), yielding
        how many bytes from its start are verified each time that prefix grows
        (a unit at a time): with several threads at once when the payload allows
        it, else unit by unit with the kernel reading the rest of a long range
        ahead. Closing the iterator early stops the reads; once it is exhausted,
        closed or has raised, no thread writes into ``buffer`` any more."""
        rng = self._rng
        if len(buffer) != rng.aligned_length:
            raise InvariantViolation(
                f"a read of {rng.aligned_length} bytes got a buffer of {len(buffer)}"
            )
        spans = [(start, min(self._unit, rng.aligned_length - start))
                 for start in range(0, rng.aligned_length, self._unit)]  # fmt: skip
        parallel = getattr(self._payload, "parallel_reads", False)
        threads = min(self._threads, len(spans)) if parallel else 1
        if threads > 1:
            yield from self._fill_parallel(buffer, spans, threads)
            return
        will_need = getattr(self._payload, "will_need", None)
        if will_need is not None and len(spans) > 1:
            will_need(rng.aligned_offset, rng.aligned_length)
        for start, n in spans:
            self._read(rng.aligned_offset + start, buffer[start : start + n])
            yield start + n

    def _fill_parallel(
        self, buffer: memoryview, spans: list[tuple[int, int]], threads: int
    ) -> Iterator[int]:
        """``threads`` threads each take the next unit, read and check it; the
        verified prefix is yielded in order as it grows. The first failure stops
        them all and is raised (a damaged block before any other error)."""
        base = self._rng.aligned_offset
        todo = iter(enumerate(spans))
        done = [False] * len(spans)
        failures: list[BaseException] = []
        stopped = threading.Event()
        changed = threading.Condition()

        def work() -> None:
            while True:
                with changed:
                    if failures or stopped.is_set():
                        return
                    item = next(todo, None)
                if item is None:
                    return
                index, (start, n) = item
                try:
                    self._read(base + start, buffer[start : start + n])
                except BaseException as exc:  # raised by the consuming thread
                    with changed:
                        failures.append(exc)
                        changed.notify_all()
                    return
                with changed:
                    done[index] = True
                    changed.notify_all()

        workers = [threading.Thread(target=work, name="tiermem-blob-read", daemon=True)
                   for _ in range(threads)]  # fmt: skip
        for worker in workers:
            worker.start()
        try:
            for index, (start, n) in enumerate(spans):
                with changed:
                    while not done[index] and not failures:
                        changed.wait()
                    if failures:
                        damaged = [exc for exc in failures if isinstance(exc, Corrupted)]
                        raise (damaged or failures)[0]
                yield start + n
        finally:
            stopped.set()
            for worker in workers:  # none writes into the buffer after this
                worker.join()

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
