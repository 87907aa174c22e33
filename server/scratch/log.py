"""The scratchpad's group-commit log: append-only files of framed records.

Layout: ``<dir>/log-<seq>.wal``, each a sequence of frames
``u32 length | u32 crc32 | StoredBatch bytes`` (little-endian): the records
of one append call, or the BUFFERED records the log thread writes at once. A frame is
written with one ``write`` before a LOGGED append is acknowledged, so it is in
the OS page cache and survives ``kill -9``; ``sync`` fsyncs in groups (one
fsync covers every frame written before it), which SYNC appends wait for.

A flush rotates to a new file; the old files are unlinked once the flushed
batch is committed to RocksDB. Replay stops at the first torn or damaged frame
of a file (a crash mid-write); the records before it are intact.
"""

from __future__ import annotations

import os
import re
import struct
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tiermem.v1 import agent_records_pb2 as agent_pb2

_FRAME = struct.Struct("<II")
_NAME = re.compile(r"^log-(\d{12})\.wal$")
MAX_FRAME_BYTES = 64 << 20


def frame(records: list[agent_pb2.StoredRecord]) -> bytes:
    raw = agent_pb2.StoredBatch(records=records).SerializeToString()
    return _FRAME.pack(len(raw), zlib.crc32(raw)) + raw


@dataclass(slots=True)
class _File:
    seq: int
    path: Path
    fd: int
    pos: int = 0


class GroupCommitLog:
    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self._lock = threading.Lock()
        self._synced = threading.Condition()
        self._synced_at = (0, 0)  # (seq, pos): everything before it is fsynced
        self._pending: list[_File] = []  # rotated-out files not fsynced yet
        self._dirty = False
        seqs = [seq for seq, _ in self.existing()]
        self._current = self._open(max(seqs, default=0) + 1)

    def existing(self) -> list[tuple[int, Path]]:
        out = []
        for path in self.directory.iterdir():
            m = _NAME.match(path.name)
            if m:
                out.append((int(m.group(1)), path))
        return sorted(out)

    def _open(self, seq: int) -> _File:
        path = self.directory / f"log-{seq:012d}.wal"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        return _File(seq, path, fd, os.fstat(fd).st_size)

    @property
    def current_seq(self) -> int:
        return self._current.seq

    def write(self, data: bytes) -> tuple[int, int]:
        """Append ``data`` (whole frames); returns (file seq, end position)."""
        with self._lock:
            f = self._current
            view = memoryview(data)
            while view:
                n = os.write(f.fd, view)
                view = view[n:]
            f.pos += len(data)
            self._dirty = True
            return f.seq, f.pos

    def rotate(self) -> int:
        """Start a new file; returns the old one's seq. Frames of the old file stay
        durable-pending until the next ``sync``."""
        with self._lock:
            old = self._current
            self._current = self._open(old.seq + 1)
            self._pending.append(old)
            return old.seq

    def sync(self) -> None:
        """fsync everything written so far (rotated files first) and wake waiters."""
        with self._lock:
            pending, self._pending = self._pending, []
            current, pos, dirty = self._current, self._current.pos, self._dirty
            self._dirty = False
        for f in pending:
            os.fsync(f.fd)
            os.close(f.fd)
        if dirty or pending:
            os.fsync(current.fd)
        with self._synced:
            if (current.seq, pos) > self._synced_at:
                self._synced_at = (current.seq, pos)
            self._synced.notify_all()

    def wait_synced(self, seq: int, pos: int, timeout_s: float) -> bool:
        with self._synced:
            return self._synced.wait_for(lambda: self._synced_at >= (seq, pos), timeout_s)

    def remove_before(self, seq: int) -> None:
        """Unlink files older than ``seq`` (their records are committed elsewhere)."""
        for s, path in self.existing():
            if s < seq:
                path.unlink(missing_ok=True)

    def close(self) -> None:
        self.sync()
        with self._lock:
            os.close(self._current.fd)

    @staticmethod
    def replay(path: Path) -> Iterator[agent_pb2.StoredRecord]:
        data = path.read_bytes()
        pos = 0
        while pos + _FRAME.size <= len(data):
            length, crc = _FRAME.unpack_from(data, pos)
            start = pos + _FRAME.size
            if length > MAX_FRAME_BYTES or start + length > len(data):
                return  # torn tail
            raw = data[start : start + length]
            if zlib.crc32(raw) != crc:
                return
            batch = agent_pb2.StoredBatch()
            batch.ParseFromString(raw)
            yield from batch.records
            pos = start + length
