"""Append-only, self-describing segment files for large SSD-resident values.

Layout: ``<data_dir>/segments/seg-<id>.dat``, a sequence of entries each starting
on a 4 KiB boundary::

    +--------+---------+----------+----------+-----------+-----------------+
    | "TMS1" | key_len | data_len | checksum | key bytes | data bytes ...  |
    | 4 B    | u32     | u64      | u64 xxh3 | key_len   | data_len        |
    +--------+---------+----------+----------+-----------+-----------------+

The catalog holds (segment, data offset, size, checksum) for each value; the
entry header repeats key and checksum so compaction and ``fsck`` can walk a
segment without the catalog. A segment is *active* while appended to and
*sealed* once it reaches the target size; a value larger than the target gets a
segment of its own.

Space is reclaimed by compaction: when a sealed segment's live bytes drop below
a fraction of its size, the caller copies its live values elsewhere, switches
their catalog entries and retires the segment. Readers hold a reference on a
segment for the duration of a read; a retired segment's file is unlinked at once
(open descriptors keep reading) and its descriptor closed when the last reader
leaves, so a read never races a compaction.
"""

from __future__ import annotations

import os
import re
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from tiermem.server.errors import CapacityExceeded, InvariantViolation
from tiermem.server.faults import NO_FAULTS, Faults
from tiermem.server.storage.group_sync import GroupSync

ALIGN = 4096
MAGIC = b"TMS1"
HEADER = struct.Struct("<4sIQQ")
_NAME = re.compile(r"^seg-(\d{10})\.dat$")
#: Longest key an entry header may claim (namespace + NUL + kind + key); a longer
#: one means the header is damaged.
MAX_ENTRY_KEY_BYTES = 2048


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def entry_bytes(key_len: int, size: int) -> int:
    """Aligned bytes one entry occupies."""
    return _align(HEADER.size + key_len + size)


@dataclass(slots=True)
class Segment:
    id: int
    path: Path
    fd: int
    size: int = 0  # aligned end of the last entry
    live: int = 0  # aligned bytes of entries the catalog still references
    refs: int = 0
    retired: bool = False
    #: whether the directory entry naming the file is on stable storage (a new
    #: segment's directory is synced after the store's lock is let go; two
    #: threads may both sync it, which is harmless)
    named: bool = False
    #: durable writers syncing this file at once share one fdatasync
    group_sync: GroupSync = field(default_factory=GroupSync)


@dataclass(frozen=True, slots=True)
class EntryInfo:
    """One entry found by walking a segment."""

    data_offset: int
    size: int
    checksum: int
    key: bytes


class SegmentStore:
    def __init__(self, directory: Path, segment_bytes: int) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._segments: dict[int, Segment] = {}
        self._active: Segment | None = None
        for path in sorted(directory.iterdir()):
            m = _NAME.match(path.name)
            if m:
                fd = os.open(path, os.O_RDWR)
                seg_id = int(m.group(1))
                self._segments[seg_id] = Segment(
                    seg_id, path, fd, size=_align(os.fstat(fd).st_size), named=True
                )  # found in the directory: its name is already durable
        self._next_id = max(self._segments, default=0) + 1
        self.faults: Faults = NO_FAULTS

    def reserve_ids_through(self, seg_id: int) -> None:
        """New segments get ids above ``seg_id`` (the highest any record names):
        a record naming a missing file must never come to name a new one."""
        with self._lock:
            self._next_id = max(self._next_id, seg_id + 1)

    # -- accounting -----------------------------------------------------------
    @property
    def used_bytes(self) -> int:
        # under the lock: a generator over the dict yields the GIL between items,
        # and a segment created or retired meanwhile raised RuntimeError (a put's
        # admission answered INTERNAL; found by the soak)
        with self._lock:
            return sum(s.size for s in self._segments.values())

    def file_bytes(self, seg_id: int) -> int | None:
        """Current length of the segment file; None if there is no such segment."""
        try:
            seg = self._ref(seg_id)
        except FileNotFoundError:
            return None
        try:
            return os.fstat(seg.fd).st_size
        finally:
            self._unref(seg)

    def add_live_bytes(self, seg_id: int, nbytes: int) -> bool:
        """Count aligned entry bytes as referenced (start-up recovery). False if
        the segment is gone."""
        seg = self._segments.get(seg_id)
        if seg is None:
            return False
        seg.live += nbytes
        return True

    def release(self, seg_id: int, key_len: int, size: int) -> None:
        """An entry is no longer referenced (deleted, moved or overwritten)."""
        with self._lock:
            seg = self._segments.get(seg_id)
            if seg is not None:
                seg.live -= entry_bytes(key_len, size)

    def drop_unreferenced(self) -> list[int]:
        """After recovery: delete segments nothing references. Returns their ids."""
        with self._lock:
            dropped = [
                self._segments.pop(s.id) for s in list(self._segments.values()) if s.live <= 0
            ]
            closes = [self._mark_retired(seg) for seg in dropped]
        for seg, close in zip(dropped, closes, strict=True):
            _remove(seg, close)
        return [seg.id for seg in dropped]

    def compaction_candidates(self, live_ratio: float) -> list[int]:
        with self._lock:
            return [
                s.id
                for s in self._segments.values()
                if s is not self._active
                and not s.retired
                and s.size
                and s.live < s.size * live_ratio
            ]

    def stats(self) -> dict[int, tuple[int, int]]:
        """segment id -> (size, live bytes)."""
        with self._lock:
            return {s.id: (s.size, s.live) for s in self._segments.values()}

    # -- writing --------------------------------------------------------------
    def _new_segment(self, seg_id: int) -> Segment:
        """Create segment ``seg_id``'s file. Called without the lock: creating a
        file and syncing its directory can wait tens of milliseconds behind other
        I/O, and every commit that releases SSD space takes the lock."""
        path = self.directory / f"seg-{seg_id:010d}.dat"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        return Segment(seg_id, path, fd)

    def _name_durably(self, seg: Segment) -> None:
        """Sync the directory so that a new segment's name survives power loss
        (or a synced entry in it would be lost with its directory entry).
        Idempotent: whoever needs it first syncs."""
        if seg.named:
            return
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        seg.named = True

    def _claim(self, seg: Segment, nbytes: int) -> int:
        """Room for ``nbytes`` at the end of ``seg`` (with the lock)."""
        offset = seg.size
        seg.size = offset + _align(nbytes)
        seg.live += _align(nbytes)
        seg.refs += 1
        return offset

    def _reserve(self, nbytes: int) -> tuple[Segment, int, bool]:
        """(segment, offset, whether this call created the segment)."""
        own = nbytes >= self.segment_bytes  # a large value gets its own segment
        with self._lock:
            active = self._active
            if not own and active is not None and active.size + nbytes <= self.segment_bytes:
                return active, self._claim(active, nbytes), False
            seg_id = self._next_id
            self._next_id += 1
        seg = self._new_segment(seg_id)
        with self._lock:
            self._segments[seg_id] = seg
            if not own and (self._active is None or self._active.id < seg_id):
                # (two writers may roll at once: the newer segment is appended to
                # next, the other keeps just its one entry until compaction)
                self._active = seg
            return seg, self._claim(seg, nbytes), True

    def append(self, key: bytes, data: memoryview, checksum: int, *, sync: bool) -> tuple[int, int]:
        """Write an entry for ``key``; returns (segment id, offset of the data).

        With ``sync`` the bytes are on stable storage when this returns.
        """
        size = len(data)
        header = HEADER.pack(MAGIC, len(key), size, checksum) + key
        seg, offset, created = self._reserve(len(header) + size)
        try:
            if created:
                self._name_durably(seg)
            _pwrite_all(seg.fd, memoryview(header), offset)
            self.faults.point("segment.mid_write")
            _pwrite_all(seg.fd, data, offset + len(header))
            if sync:
                self._sync_file(seg)
                self._name_durably(seg)  # a writer that rolled it may not have yet
        except OSError as exc:
            self.release(seg.id, len(key), size)
            self._unref(seg)
            raise CapacityExceeded(f"SSD write failed: {exc}") from exc
        self._unref(seg)
        return seg.id, offset + len(header)

    def sync(self, seg_ids: set[int] | None = None) -> None:
        """fdatasync the given segments (all when None; those still open), names
        included."""
        with self._lock:
            segs = [
                s
                for i, s in self._segments.items()
                if (seg_ids is None or i in seg_ids) and not s.retired
            ]
        for seg in segs:
            self._sync_file(seg)
            self._name_durably(seg)

    @staticmethod
    def _sync_file(seg: Segment) -> None:
        """fdatasync ``seg`` through its group commit, so that every sync of the
        file (and any failure of one) is seen by all who wait on it."""
        seg.group_sync.sync(partial(os.fdatasync, seg.fd))

    def sync_all(self) -> None:
        self.sync(None)

    # -- reading --------------------------------------------------------------
    def _ref(self, seg_id: int) -> Segment:
        with self._lock:
            seg = self._segments.get(seg_id)
            if seg is None:
                raise FileNotFoundError(f"segment {seg_id} does not exist")
            seg.refs += 1
            return seg

    def read_into(self, seg_id: int, offset: int, buffer: memoryview) -> None:
        """Fill ``buffer`` from the segment at ``offset``. Raises FileNotFoundError
        if the segment is gone, EOFError if it is shorter than the read."""
        seg = self._ref(seg_id)
        try:
            _pread_all(seg.fd, buffer, offset, seg_id)
        finally:
            self._unref(seg)

    def walk(self, seg_id: int) -> Iterator[EntryInfo]:
        """Entries of a segment in order.

        A crash can leave a hole: a later append finished and was committed
        while an earlier one had not written its header yet. Past an unreadable
        header the walk resumes at the next 4 KiB boundary that holds one, so
        entries after a hole are still found (a spurious match inside a hole
        names no live record, and callers check every entry against the catalog)."""
        seg = self._ref(seg_id)
        try:
            offset, end = 0, os.fstat(seg.fd).st_size
            while offset + HEADER.size <= end:
                raw = os.pread(seg.fd, HEADER.size, offset)
                magic, key_len, size, checksum = HEADER.unpack(raw)
                if magic != MAGIC or not 0 < key_len <= MAX_ENTRY_KEY_BYTES:
                    offset = _align(offset + 1)
                    continue
                key = os.pread(seg.fd, key_len, offset + HEADER.size)
                data_offset = offset + HEADER.size + key_len
                yield EntryInfo(data_offset, size, checksum, key)
                offset = _align(data_offset + size)
        finally:
            self._unref(seg)

    def live_bytes(self, seg_id: int) -> int:
        """Aligned bytes of the segment's entries the catalog still references."""
        with self._lock:
            seg = self._segments.get(seg_id)
            return 0 if seg is None else seg.live

    def _unref(self, seg: Segment) -> None:
        with self._lock:
            seg.refs -= 1
            close = seg.retired and seg.refs == 0
        if close:
            os.close(seg.fd)

    # -- compaction -----------------------------------------------------------
    def retire(self, seg_id: int) -> None:
        """Forget a segment whose live entries were all moved away. The file is
        unlinked after the lock is let go (unlinking a large file waits on the
        file system)."""
        with self._lock:
            seg = self._segments.get(seg_id)
            if seg is None:
                return
            if seg is self._active:
                raise InvariantViolation("cannot retire the active segment")
            del self._segments[seg_id]
            close = self._mark_retired(seg)
        _remove(seg, close)

    @staticmethod
    def _mark_retired(seg: Segment) -> bool:
        """With the lock: mark ``seg`` retired; True if no reader holds it (the
        caller closes it), else the last reader's ``_unref`` does."""
        seg.retired = True
        return seg.refs == 0

    def close(self) -> None:
        with self._lock:
            for seg in self._segments.values():
                if not seg.retired:
                    os.close(seg.fd)
            self._segments.clear()
            self._active = None


def _remove(seg: Segment, close: bool) -> None:
    """Unlink a retired segment's file (open descriptors keep reading) and close
    its descriptor if ``close``. Without the lock: an unlink waits on the file
    system."""
    seg.path.unlink(missing_ok=True)
    if close:
        os.close(seg.fd)


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    written, size = 0, len(data)
    while written < size:
        n = os.pwrite(fd, data[written:], offset + written)
        if n <= 0:
            raise OSError("short write to segment")
        written += n


def _pread_all(fd: int, buffer: memoryview, offset: int, seg_id: int) -> None:
    done, size = 0, len(buffer)
    while done < size:
        n = os.preadv(fd, [buffer[done:]], offset + done)
        if n <= 0:
            raise EOFError(f"segment {seg_id} ends before offset {offset + size}")
        done += n
