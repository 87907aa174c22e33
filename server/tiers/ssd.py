"""SSD tier: small values inline in RocksDB, large ones in append-only segments.

Every read is checked against the object's xxh3-64 checksum; a mismatch raises
``Corrupted`` (DATA_LOSS) and is counted, never returned as data. Reads go into
preallocated buffers with ``preadv`` (measured here: plain files 1.57 GB/s read,
0.48 GB/s write+fsync, against 0.36 GB/s for RocksDB blob files, which is why
large values do not live in RocksDB).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xxhash

from tiermem.server.catalog.index import SEG_INLINE
from tiermem.server.errors import CapacityExceeded, Corrupted
from tiermem.server.model import Tier
from tiermem.server.storage.rocks import Batch, RocksStore
from tiermem.server.tiers.segments import SegmentStore


@dataclass(slots=True)
class SsdCopy:
    """Where a value was written; ``inline`` values are put into the catalog batch."""

    segment: int
    offset: int
    size: int
    inline: bytes | None = None


class SsdEngine:
    tier = Tier.SSD

    def __init__(
        self,
        rocks: RocksStore,
        directory: Path,
        capacity_bytes: int,
        inline_max_bytes: int,
        segment_bytes: int,
        fsync: bool,
    ) -> None:
        self._rocks = rocks
        self.capacity_bytes = capacity_bytes
        self.inline_max_bytes = inline_max_bytes
        self.fsync = fsync
        self.segments = SegmentStore(directory, segment_bytes)
        self._inline_bytes = 0
        self._lock = threading.Lock()

    @property
    def device(self) -> str:
        return str(self.segments.directory)

    @property
    def used_bytes(self) -> int:
        return self.segments.used_bytes + self._inline_bytes

    def fits(self, size: int) -> bool:
        return self.used_bytes + size <= self.capacity_bytes

    def count_inline(self, size: int) -> None:
        """Account an inline value found at recovery."""
        with self._lock:
            self._inline_bytes += size

    def write(
        self, encoded_key: bytes, data: memoryview, checksum: int, *, durable: bool
    ) -> SsdCopy:
        """Store ``data``; inline values still have to be put into the catalog batch
        (``stage``). Raises CapacityExceeded when the tier's budget cannot fit it.
        """
        size = len(data)
        if not self.fits(size):
            raise CapacityExceeded(
                f"SSD tier is full: {self.used_bytes} of {self.capacity_bytes} bytes used, "
                f"{size} more requested"
            )
        if size <= self.inline_max_bytes:
            with self._lock:
                self._inline_bytes += size
            return SsdCopy(SEG_INLINE, 0, size, bytes(data))
        seg, off = self.segments.append(encoded_key, data, checksum, sync=durable and self.fsync)
        return SsdCopy(seg, off, size)

    def stage(self, copy: SsdCopy, encoded_key: bytes, batch: Batch) -> None:
        if copy.inline is not None:
            batch.put("values", encoded_key, copy.inline)

    def release(self, encoded_key: bytes, segment: int, size: int, batch: Batch | None) -> None:
        """Drop a value's SSD copy. Inline deletes go into ``batch`` (None: the key's
        value is being replaced in the same batch, so there is nothing to delete).
        Counts the space free now: a caller whose batch may still fail uses
        ``stage_release`` and, once the batch is committed, ``count_release``."""
        self.stage_release(encoded_key, segment, batch)
        self.count_release(encoded_key, segment, size)

    def stage_release(self, encoded_key: bytes, segment: int, batch: Batch | None) -> None:
        """The catalog side of ``release``: an inline value's delete, into ``batch``."""
        if segment == SEG_INLINE and batch is not None:
            batch.delete("values", encoded_key)

    def count_release(self, encoded_key: bytes, segment: int, size: int) -> None:
        """The space side of ``release``, after the batch that dropped the copy was
        committed: a failed commit leaves the copy in place and counted (its
        segment's live bytes keep compaction from deleting the segment)."""
        if segment == SEG_INLINE:
            with self._lock:
                self._inline_bytes -= size
        else:
            self.segments.release(segment, len(encoded_key), size)

    def discard(self, encoded_key: bytes, copy: SsdCopy) -> None:
        """Undo a ``write`` whose catalog commit did not happen."""
        if copy.inline is not None:
            with self._lock:
                self._inline_bytes -= copy.size
        else:
            self.segments.release(copy.segment, len(encoded_key), copy.size)

    def read(
        self, encoded_key: bytes, segment: int, offset: int, size: int, checksum: int, what: str
    ) -> memoryview:
        """The value's bytes, verified against ``checksum``; raises Corrupted.

        The caller decides whether a failure is real damage or a race with a
        move (see ``Store.read``) and reports it."""
        if segment == SEG_INLINE:
            raw = self._rocks.get("values", encoded_key)
            if raw is None:
                self._corrupt(f"{what}: inline value is missing from RocksDB")
            data = memoryview(raw)  # type: ignore[arg-type]
        else:
            buf = np.empty(size, dtype=np.uint8)
            data = buf.data
            try:
                self.segments.read_into(segment, offset, data)
            except (FileNotFoundError, EOFError) as exc:
                self._corrupt(f"{what}: {exc}")
        if len(data) != size:
            self._corrupt(f"{what}: stored value is {len(data)} bytes, catalog says {size}")
        actual = xxhash.xxh3_64_intdigest(data)
        if actual != checksum:
            self._corrupt(
                f"{what}: checksum mismatch on SSD read "
                f"(stored {checksum:016x}, read {actual:016x})"
            )
        return data.toreadonly()

    def _corrupt(self, message: str) -> None:
        raise Corrupted(message)

    def close(self) -> None:
        self.segments.close()
