"""The scratchpad's group-commit log: append-only files of framed records.

Layout: ``<dir>/log-<seq>.wal``, each a sequence of frames
``u32 length | u32 crc32 | StoredBatch bytes`` (little-endian): the records
of one append call, or the BUFFERED records the log thread writes at once. A frame is
written with one ``write`` before a LOGGED append is acknowledged, so it is in
the OS page cache and survives ``kill -9``; ``sync`` fsyncs in groups (one
fsync covers every frame written before it), which SYNC appends wait for. A
failed fsync fails those waiting for the frames it covered (``LogSyncFailed``),
and those frames are never reported synced by a later fsync.

A flush rotates to a new file; the old files are unlinked once the flushed
batch is committed to RocksDB. A file with a damaged frame is also kept,
hard-linked as ``<name>.damaged``, for inspection (recovery does that).

Replay tells a torn tail from damage:

* **Torn tail** (quiet): the file ends inside its last frame (a crash cut the
  write short, so nothing in it was acknowledged). The frames before it are
  replayed.
* **Damage** (reported in ``damage``): a whole frame that fails its CRC (or
  does not parse), or a frame header that claims bytes past the end while a
  frame that checks out follows it (a damaged length). A damaged frame whose
  length leads to a frame that checks out (or exactly to the end of the file)
  is skipped and replay goes on from there. A damaged length cannot be
  resynchronised soundly: the format has no sync marker and record payloads
  are client bytes that can hold a well-formed frame, so replay stops there
  and the rest of the file is reported as not replayed.
"""

from __future__ import annotations

import contextlib
import os
import re
import struct
import threading
import zlib
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from google.protobuf.message import DecodeError

from tiermem.server.errors import InvariantViolation
from tiermem.v1 import agent_records_pb2 as agent_pb2

_FRAME = struct.Struct("<II")
_NAME = re.compile(r"^log-(\d{12})\.wal$")
MAX_FRAME_BYTES = 64 << 20
#: A log file with a damaged frame is renamed to its name plus this (so it is
#: neither replayed again nor removed) and kept for inspection.
DAMAGED_SUFFIX = ".damaged"
_FAILED_SYNCS_KEPT = 64


class LogSyncFailed(Exception):
    """An fsync of the log failed for a position a caller waited for: the frames
    written there may or may not reach the disk."""


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
        #: (synced before, failed up to, why) of the latest failed fsyncs: the
        #: positions in between are never reported synced (bounded: a waiter
        #: older than these has timed out long since)
        self._failed: deque[tuple[tuple[int, int], tuple[int, int], str]] = deque(
            maxlen=_FAILED_SYNCS_KEPT
        )
        seqs = [seq for seq, _ in self.existing()]
        # kept-aside files keep their seq: a new file never takes their name
        seqs += [_kept_seq(p) for p in kept_aside(directory)]
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
        """Append ``data`` (whole frames); returns (file seq, end position). A
        write that fails part way (a full disk) is cut off again before it
        raises: a partial frame with whole frames after it would read as damage."""
        with self._lock:
            f = self._current
            view = memoryview(data)
            try:
                while view:
                    n = os.write(f.fd, view)
                    view = view[n:]
            except OSError:
                # if this fails too, recovery reports the partial frame as damage
                with contextlib.suppress(OSError):
                    os.ftruncate(f.fd, f.pos)
                raise
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
        """fsync everything written so far (rotated files first) and wake waiters.

        A failed fsync fails every waiter for a position it covered, for good:
        after a failed fsync the kernel may have dropped those dirty pages and
        a later fsync that succeeds says nothing about them (so they are never
        reported synced). The next ``sync`` fsyncs again, for what is written
        after; the rotated files not synced yet stay pending."""
        with self._lock:
            pending, self._pending = self._pending, []
            current, pos, dirty = self._current, self._current.pos, self._dirty
            self._dirty = False
        upto = (current.seq, pos)
        rotated = bool(pending)
        try:
            while pending:
                os.fsync(pending[0].fd)
                os.close(pending.pop(0).fd)
            if dirty or rotated:
                os.fsync(current.fd)
        except OSError as exc:
            with self._lock:
                self._pending[:0] = pending
                self._dirty = True
            with self._synced:
                if upto > self._synced_at:
                    self._failed.append((self._synced_at, upto, exc.strerror or str(exc)))
                self._synced.notify_all()
            raise
        with self._synced:
            if upto > self._synced_at:
                self._synced_at = upto
            self._synced.notify_all()

    def wait_synced(self, seq: int, pos: int, timeout_s: float) -> bool:
        """Wait until the log is fsynced up to (``seq``, ``pos``), a position
        ``write`` returned: True, or False after ``timeout_s``. Raises
        ``LogSyncFailed`` if an fsync covering that position failed."""
        at = (seq, pos)
        with self._synced:
            self._synced.wait_for(
                lambda: self._synced_at >= at or self._failure_at(at) is not None, timeout_s
            )
            failure = self._failure_at(at)
            if failure is not None:
                raise LogSyncFailed(f"the scratchpad log fsync failed: {failure}")
            return self._synced_at >= at

    def _failure_at(self, at: tuple[int, int]) -> str | None:
        """Why the fsync covering ``at`` failed, or None (``_synced`` held)."""
        for after, upto, why in self._failed:
            if after < at <= upto:
                return why
        return None

    def remove_before(self, seq: int) -> None:
        """Unlink files older than ``seq`` (their records are committed elsewhere)."""
        for s, path in self.existing():
            if s < seq:
                path.unlink(missing_ok=True)

    def close(self) -> None:
        """Sync and close the files; a failed fsync is raised once they are closed."""
        try:
            self.sync()
        finally:
            with self._lock:
                for f in (*self._pending, self._current):
                    with contextlib.suppress(OSError):
                        os.close(f.fd)
                self._pending = []

    def kept_aside(self) -> list[Path]:
        """Log files kept aside for inspection (a damaged frame), oldest first."""
        return kept_aside(self.directory)

    def keep_aside(self, path: Path) -> Path:
        """Keep a damaged log file under a name that replay and removal skip (a
        hard link: the file itself is removed as usual once its good records are
        committed, so a crash before that replays it again)."""
        kept = path.with_name(path.name + DAMAGED_SUFFIX)
        # it exists if a crash cut an earlier recovery short (seqs are never reused)
        with contextlib.suppress(FileExistsError):
            os.link(path, kept)
        return kept

    @staticmethod
    def replay(path: Path, damage: list[str] | None = None) -> Iterator[agent_pb2.StoredRecord]:
        """The records of the whole frames of ``path``, in order. Damage found
        (not a torn tail: module docstring) is described in ``damage``, one
        line per damaged frame, once the iteration ends."""
        data = path.read_bytes()
        size = len(data)
        found = damage if damage is not None else []
        pos = 0
        while pos + _FRAME.size <= size:
            length = _FRAME.unpack_from(data, pos)[0]
            end = pos + _FRAME.size + length
            if length > MAX_FRAME_BYTES or end > size:
                if length <= MAX_FRAME_BYTES and not _frame_follows(data, pos + _FRAME.size):
                    return  # torn tail
                found.append(
                    f"the frame at byte {pos} claims {length} bytes, past the end or the "
                    f"limit (a damaged length): the {size - pos} bytes from there are not "
                    f"replayed"
                )
                return
            batch = _batch_at(data, pos)
            if batch is not None:
                yield from batch.records
            elif end == size or _batch_at(data, end) is not None:
                found.append(f"the frame at byte {pos} ({length} bytes) fails its CRC: skipped")
            else:
                found.append(
                    f"the frame at byte {pos} fails its CRC and its length leads to no frame "
                    f"(a damaged length): the {size - pos} bytes from there are not replayed"
                )
                return
            pos = end


def kept_aside(directory: Path) -> list[Path]:
    """The log files in ``directory`` kept aside for inspection."""
    if not directory.is_dir():
        return []
    return sorted(
        p for p in directory.iterdir()
        if p.name.endswith(DAMAGED_SUFFIX) and _NAME.match(p.name[: -len(DAMAGED_SUFFIX)])
    )  # fmt: skip


def _kept_seq(kept: Path) -> int:
    m = _NAME.match(kept.name[: -len(DAMAGED_SUFFIX)])
    if m is None:
        raise InvariantViolation(f"{kept} is not a kept-aside log file")
    return int(m.group(1))


def damage_name(kept: Path) -> str:
    """How the damage register and fsck name a kept-aside log file."""
    return f"<scratch log {kept.name}>"


def _batch_at(data: bytes, pos: int) -> agent_pb2.StoredBatch | None:
    """The batch of a whole frame at ``pos`` that checks out, else None."""
    if pos + _FRAME.size > len(data):
        return None
    length, crc = _FRAME.unpack_from(data, pos)
    start = pos + _FRAME.size
    if length > MAX_FRAME_BYTES or start + length > len(data):
        return None
    raw = data[start : start + length]
    if zlib.crc32(raw) != crc:
        return None
    batch = agent_pb2.StoredBatch()
    try:
        batch.ParseFromString(raw)
    except DecodeError:
        return None
    return batch


def _frame_follows(data: bytes, start: int) -> bool:
    """Whether a non-empty frame that checks out starts anywhere from ``start``
    (tells a damaged length from a torn tail; used to report, never to replay)."""
    size = len(data)
    for k in range(4):  # the u32 at every byte position, as 4 aligned views
        first = start + k
        count = (size - first - _FRAME.size) // 4 + 1 if size - first >= _FRAME.size else 0
        if count <= 0:
            continue
        lengths = np.frombuffer(data, dtype="<u4", count=count, offset=first)
        at = first + 4 * np.arange(count, dtype=np.int64)
        fits = (lengths > 0) & (lengths.astype(np.int64) <= size - at - _FRAME.size)
        for pos in at[fits].tolist():
            batch = _batch_at(data, pos)
            if batch is not None and batch.records:
                return True
    return False
