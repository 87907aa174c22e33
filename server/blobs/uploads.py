"""Uploads in progress: bytes streamed into a staging file, hashed on the way,
resumable after a dropped connection or a daemon restart.

::

    <data_dir>/blobs/uploads/<upload id>.part   preallocated to the announced size
        [ acknowledged (fsynced, recorded) | received | not yet sent ... )
        0                                  durable    received           size

Every chunk is written at its offset (``pwrite``) and fed to the content
hasher (SHA-256 + per-block xxh3). Every ``checkpoint_bytes``, and whenever a
stream ends (normally or broken), the file is fsynced and the offset recorded
in RocksDB (``UploadRecord.durable_offset``): that is the *acknowledged
offset* clients resume from. Within one daemon process nothing is lost when a
connection drops, so the acknowledged offset is everything received; after a
crash it is the last checkpoint, and the hasher is rebuilt lazily by reading
the acknowledged prefix back from the staging file.

One stream writes an upload at a time (its lock); a second one waits a little
for the first to notice its connection is gone, then is refused. Uploads idle
for ``upload_ttl_s`` are forgotten with their bytes; ids of ended uploads are
remembered (bounded) so a late call learns why the id is gone.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import logging
import mmap
import os
import queue
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from tiermem.server.blobs.catalog import now_ms
from tiermem.server.blobs.hashing import ContentHasher, HashPipe
from tiermem.server.dataplane.transfers import TransferBroken
from tiermem.server.errors import (
    CapacityExceeded,
    FailedPrecondition,
    InvalidArgument,
    InvariantViolation,
    NotFound,
    OutOfRange,
)
from tiermem.v1 import blob_records_pb2 as rec_pb
from tiermem.v1 import blobs_pb2

log = logging.getLogger(__name__)

#: How long a second stream waits for the first to end before it is refused.
BUSY_WAIT_S = 5.0
#: Ended upload ids remembered for a clear answer.
REMEMBERED_IDS = 8192
READ_BACK_BYTES = 8 << 20
#: Writeback of received bytes is started every this many bytes (so the disk
#: writes while the transfer goes on, and the final fsync has little left).
WRITEBACK_BYTES = 8 << 20
_SYNC_FILE_RANGE_WRITE = 2
#: Buffers a bulk upload receives into while earlier ones are hashed.
RECEIVE_BUFFERS = 4
ID_BYTES = 16


class Channel(Protocol):
    def recv_into(self, buffer: memoryview, nbytes: int = 0, /) -> int: ...


class ConnectionEnded(TransferBroken):
    """A bulk connection ended before every announced byte of the upload arrived."""


@dataclass(eq=False)
class Upload:
    upload_id: str
    header: blobs_pb2.BeginUploadRequest  # validated; without inline data
    caller: str
    path: Path
    block_bytes: int
    head_max_bytes: int
    created_ms: int
    touched: float  # time.monotonic() of the last activity
    received: int = 0
    durable: int = 0
    flushed: int = 0  # bytes whose writeback was started
    fd: int = -1
    head: bytearray = field(default_factory=bytearray)
    lock: threading.Lock = field(default_factory=threading.Lock)
    pipe: HashPipe | None = None  # while a stream writes: hashing on a worker thread
    writer: HashPipe | None = None  # ... and file writes on another one
    written: int = 0  # bytes the writer has written (while there is one)
    checkpointing: int = 0  # offset of the last checkpoint handed to the writer
    mapped: mmap.mmap | None = None  # the staging file, read-only, while a shm stream writes
    _hasher: ContentHasher | None = None

    @property
    def size(self) -> int:
        return int(self.header.size_bytes)

    def record(self) -> rec_pb.UploadRecord:
        return rec_pb.UploadRecord(
            upload_id=self.upload_id,
            header=self.header,
            durable_offset=self.durable,
            created_unix_ms=self.created_ms,
            touched_unix_ms=now_ms(),
            caller=self.caller,
        )

    def open(self) -> None:
        if self.fd < 0:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def hasher(self) -> ContentHasher:
        """The hasher at ``received`` (rebuilt from the staging file after a restart)."""
        if self._hasher is None:
            hasher = ContentHasher(self.block_bytes)
            self.open()
            buf = bytearray(min(READ_BACK_BYTES, max(self.received, 1)))
            view = memoryview(buf)
            pos = 0
            while pos < self.received:
                n = os.preadv(self.fd, [view[: min(len(buf), self.received - pos)]], pos)
                if n <= 0:
                    raise FailedPrecondition(
                        f"upload {self.upload_id}: its staging file is shorter than the "
                        f"{self.received} acknowledged bytes; abort it and start again"
                    )
                hasher.update(view[:n])
                self._keep_head(pos, view[:n])
                pos += n
            self._hasher = hasher
        return self._hasher

    def hashed(self) -> ContentHasher:
        """The hasher once every byte received so far is written and hashed."""
        if self.writer is not None:
            self.writer.drain()
        if self.pipe is not None:
            self.pipe.drain()
        return self.hasher()

    def start_stages(self) -> None:
        """Worker threads for a stream: one writes the file, one hashes, so the
        receiving thread only receives (the disk, the hashing and the socket
        work at once)."""
        self.stop_stages()
        self.open()
        self.written = self.checkpointing = self.received
        self.pipe = HashPipe(self.hasher())
        self.writer = HashPipe(self.hasher(), work=self._write_next, name="tiermem-blob-write")

    def _write_next(self, data: memoryview) -> None:
        """The writer's work: ``data`` at the next offset, then start its writeback."""
        n, done, at = len(data), 0, self.written
        while done < n:
            done += os.pwrite(self.fd, data[done:], at + done)
        self.written = at + n
        if self.written - self.flushed >= WRITEBACK_BYTES:
            start_writeback(self.fd, self.flushed, self.written - self.flushed)
            self.flushed = self.written

    def map_file(self) -> None:
        """Map the staging file read-only, for ``write_shared`` to hash what it wrote."""
        if self.mapped is None:
            self.open()
            if os.fstat(self.fd).st_size < self.size:
                os.ftruncate(self.fd, self.size)
            self.mapped = mmap.mmap(self.fd, self.size, mmap.MAP_SHARED, mmap.PROT_READ)

    def unmap_file(self) -> None:
        """Drop the mapping (after ``stop_stages``: nothing views it any more)."""
        mapped, self.mapped = self.mapped, None
        if mapped is not None:
            with contextlib.suppress(BufferError):  # a view left behind: freed with it
                mapped.close()

    def write_shared(self, data: memoryview, done: Callable[[], None]) -> None:
        """Append ``data``, a slot of a client's shared-memory ring, at ``received``:
        the writer copies it to the file, then ``done`` runs (the client may refill
        the slot) and the hasher hashes those bytes *from the file* (``map_file``),
        so what is hashed is what was written even if the client changes the slot
        too early. Needs the stages (``start_stages``) and the mapping."""
        n = len(data)
        if self.received + n > self.size:
            raise InvalidArgument(
                f"upload {self.upload_id}: a unit of {n} bytes at offset {self.received} "
                f"runs past the announced size_bytes={self.size}"
            )
        writer, pipe, mapped = self.writer, self.pipe, self.mapped
        if writer is None or pipe is None or mapped is None:
            raise InvariantViolation("write_shared needs the writer, the hasher and the mapping")
        at = self.received
        written = memoryview(mapped)[at : at + n]

        def after_write() -> None:
            done()
            self._keep_head(at, written)
            pipe.submit(written)

        writer.submit(data, after_write)
        self.received += n

    def stop_stages(self) -> None:
        """Wait for the workers and end them. If one failed, what was received
        past the bytes really written is forgotten (the hasher is rebuilt from
        the file) and the failure is raised."""
        failed: BaseException | None = None
        for stage in (self.writer, self.pipe):
            if stage is None:
                continue
            try:
                stage.drain()
            except BaseException as exc:
                failed = failed or exc
            finally:
                stage.close()
        writer, self.writer, self.pipe = self.writer, None, None
        if failed is not None:
            if writer is not None:
                self.received = min(self.received, self.written)
            self.flushed = min(self.flushed, self.received)
            self.head = bytearray()
            self._hasher = None
            raise failed

    def _keep_head(self, offset: int, data: memoryview) -> None:
        if offset < self.head_max_bytes and offset == len(self.head):
            self.head += data[: self.head_max_bytes - offset]

    def write(self, data: memoryview, done: Callable[[], None] | None = None) -> None:
        """Append ``data`` at ``received``: written, then hashed (by the pipe's
        worker while a stream writes: ``data`` must stay unchanged until ``done``
        runs). Raises InvalidArgument (storing nothing of it) if it runs past the
        announced size."""
        n = len(data)
        if self.received + n > self.size:
            raise InvalidArgument(
                f"upload {self.upload_id}: chunk of {n} bytes at offset {self.received} runs "
                f"past the announced size_bytes={self.size}"
            )
        if self.writer is not None and self.pipe is not None:
            both = _Twice(done)
            self.writer.submit(data, both)
            self.pipe.submit(data, both)
            self._keep_head(self.received, data)
            self.received += n
            return
        hasher = self.hasher()
        self.open()
        written = 0
        while written < n:
            written += os.pwrite(self.fd, data[written:], self.received + written)
        self._keep_head(self.received, data)
        self.received += n
        if self.received - self.flushed >= WRITEBACK_BYTES:
            start_writeback(self.fd, self.flushed, self.received - self.flushed)
            self.flushed = self.received
        if self.pipe is not None:
            self.pipe.submit(data, done)
            return
        hasher.update(data)
        if done is not None:
            done()


class _Twice:
    """A ``done`` callback run once both workers (writer, hasher) are done."""

    __slots__ = ("_done", "_left", "_lock")

    def __init__(self, done: Callable[[], None] | None) -> None:
        self._done = done
        self._left = 2
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            self._left -= 1
            last = self._left == 0
        if last and self._done is not None:
            self._done()


class UploadTable:
    """The uploads in progress, their limits and their durable records."""

    def __init__(
        self,
        directory: Path,
        *,
        block_bytes: int,
        head_max_bytes: int,
        checkpoint_bytes: int,
        ttl_s: float,
        max_uploads: int,
        persist: Callable[[rec_pb.UploadRecord, bool], None],
        forget: Callable[[str], None],
    ) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._block = block_bytes
        self._head_max = head_max_bytes
        self._checkpoint = checkpoint_bytes
        self._ttl_s = ttl_s
        self._max = max_uploads
        self._persist = persist
        self._forget = forget
        self._lock = threading.Lock()
        self._uploads: dict[str, Upload] = {}
        self._ended: OrderedDict[str, str] = OrderedDict()

    def __len__(self) -> int:
        with self._lock:
            return len(self._uploads)

    @property
    def pending_bytes(self) -> int:
        """Bytes announced by uploads in progress (reserved against the store's limit)."""
        with self._lock:
            return sum(u.size for u in self._uploads.values())

    def expires_ms(self, upload: Upload) -> int:
        idle = time.monotonic() - upload.touched
        return now_ms() + int(max(self._ttl_s - idle, 0) * 1000)

    # -- begin / restore --------------------------------------------------------------
    def begin(self, header: blobs_pb2.BeginUploadRequest, caller: str) -> Upload:
        upload_id = secrets.token_hex(ID_BYTES)
        upload = Upload(
            upload_id,
            header,
            caller,
            self.directory / f"{upload_id}.part",
            self._block,
            self._head_max,
            now_ms(),
            time.monotonic(),
            _hasher=ContentHasher(self._block),
        )
        with self._lock:
            if len(self._uploads) >= self._max:
                raise CapacityExceeded(
                    f"{len(self._uploads)} uploads are in progress (blobs.max_uploads="
                    f"{self._max}); finish or abort some, or let idle ones expire"
                )
            self._uploads[upload_id] = upload
        try:
            upload.open()
            _preallocate(upload.fd, upload.size)
            self._persist(upload.record(), False)
        except BaseException:
            self._end(upload, "failed")
            raise
        return upload

    def restore(self, record: rec_pb.UploadRecord) -> bool:
        """Take back an upload recorded before a restart; False if its file is gone."""
        path = self.directory / f"{record.upload_id}.part"
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return False
        if size < record.durable_offset:
            return False
        upload = Upload(
            record.upload_id,
            record.header,
            record.caller,
            path,
            self._block,
            self._head_max,
            int(record.created_unix_ms),
            time.monotonic(),
            received=int(record.durable_offset),
            durable=int(record.durable_offset),
            flushed=int(record.durable_offset),
        )
        with self._lock:
            self._uploads[upload.upload_id] = upload
        return True

    def staging_names(self) -> set[str]:
        with self._lock:
            return {u.path.name for u in self._uploads.values()}

    # -- lookup -----------------------------------------------------------------------
    def get(self, upload_id: str, caller: str) -> Upload:
        with self._lock:
            upload = self._uploads.get(upload_id)
            how = self._ended.get(upload_id) if upload is None else None
        if upload is None or (caller and upload.caller != caller):
            if how is not None and how != "expired":
                raise FailedPrecondition(f"upload {upload_id[:64]} was already {how}")
            if how == "expired":
                raise FailedPrecondition(
                    f"upload {upload_id[:64]} expired (idle for more than "
                    f"{self._ttl_s:g} s, blobs.upload_ttl_s); start a new one"
                )
            raise NotFound(f"upload {upload_id[:64]!r} is unknown to this daemon")
        return upload

    @contextlib.contextmanager
    def writing(self, upload_id: str, caller: str) -> Iterator[Upload]:
        """Hold an upload for one stream; on exit its progress is made durable."""
        upload = self.get(upload_id, caller)
        if not upload.lock.acquire(timeout=BUSY_WAIT_S):
            raise FailedPrecondition(
                f"upload {upload_id} is being written by another stream; retry once it ends"
            )
        try:
            if self.get(upload_id, caller) is not upload:
                raise NotFound(f"upload {upload_id} ended meanwhile")
            upload.touched = time.monotonic()
            upload.start_stages()
            yield upload
        finally:
            try:
                upload.stop_stages()
                if upload.fd >= 0 and upload.received != upload.durable:
                    self.checkpoint(upload)
            finally:
                upload.touched = time.monotonic()
                upload.lock.release()

    def settled(self, upload_id: str, caller: str) -> Upload:
        """The upload once a stream still writing it (one whose client died, say)
        has ended, so its acknowledged offset is final; else as it stands."""
        upload = self.get(upload_id, caller)
        if upload.lock.acquire(timeout=BUSY_WAIT_S):
            upload.lock.release()
        return upload

    def check_offset(self, upload: Upload, offset: int) -> None:
        """Raise unless a stream may start at ``offset`` (see ``resume_at``)."""
        if not upload.durable <= offset <= max(upload.received, upload.durable):
            raise OutOfRange(
                f"upload {upload.upload_id} continues at offset {upload.received} "
                f"(acknowledged {upload.durable}), not {offset}: resume from "
                "acknowledged_offset (GetUpload)"
            )

    def resume_at(self, upload: Upload, offset: int) -> None:
        """Continue at ``offset`` (the upload held by ``writing``): where it stands,
        or back at any point since the acknowledged offset — bytes received after
        it were never acknowledged, so a client resuming from there sends them again."""
        if upload.durable <= offset < upload.received:
            upload.received = offset
            upload.flushed = min(upload.flushed, offset)
            restart = upload.pipe is not None
            upload.stop_stages()  # nothing was submitted yet: cannot fail
            upload.received = offset
            upload.head = bytearray()
            upload._hasher = None  # rebuilt from the staging file up to ``offset``
            if restart:
                upload.start_stages()
            return
        if offset != upload.received:
            raise OutOfRange(
                f"upload {upload.upload_id} continues at offset {upload.received} "
                f"(acknowledged {upload.durable}), not {offset}: resume from "
                "acknowledged_offset (GetUpload)"
            )

    # -- writing ----------------------------------------------------------------------
    def write(
        self, upload: Upload, data: memoryview, done: Callable[[], None] | None = None
    ) -> None:
        upload.write(data, done)
        self._maybe_checkpoint(upload)

    def write_shared(self, upload: Upload, data: memoryview, done: Callable[[], None]) -> None:
        """``Upload.write_shared``, with the same checkpoints as ``write``."""
        upload.write_shared(data, done)
        self._maybe_checkpoint(upload)

    def _maybe_checkpoint(self, upload: Upload) -> None:
        writer = upload.writer
        if writer is None:
            if upload.received - upload.durable >= self._checkpoint:
                self.checkpoint(upload)
        elif upload.received - upload.checkpointing >= self._checkpoint:
            # the writer checkpoints once it has written this far; receiving goes on
            upload.checkpointing = upload.received
            at = upload.received
            writer.submit(memoryview(b""), lambda: self._checkpoint_at(upload, at))

    def _checkpoint_at(self, upload: Upload, offset: int) -> None:
        """On the writer thread, every byte up to ``offset`` written: make them
        durable and record the acknowledged offset."""
        os.fdatasync(upload.fd)
        upload.durable = max(upload.durable, offset)
        self._persist(upload.record(), True)

    def receive(self, upload: Upload, channel: Channel, nbytes: int, unit_bytes: int) -> None:
        """Write ``nbytes`` read from a bulk connection, through a few buffers of
        ``unit_bytes`` that the hashing worker gives back as it goes."""
        unit = max(1, min(unit_bytes, nbytes))
        free: queue.Queue[memoryview] = queue.Queue()
        for _ in range(RECEIVE_BUFFERS):
            free.put(memoryview(bytearray(unit)))
        end = upload.received + nbytes
        while upload.received < end:
            buffer = free.get()
            want = min(unit, end - upload.received)
            got = 0
            while got < want:
                n = channel.recv_into(buffer[got:want], want - got)
                if n == 0:
                    if got:
                        self.write(upload, buffer[:got], functools.partial(free.put, buffer))
                    raise ConnectionEnded(
                        f"the bulk connection ended after {upload.received} of {upload.size} "
                        f"bytes of upload {upload.upload_id}; resume from acknowledged_offset"
                    )
                got += n
            self.write(upload, buffer[:want], functools.partial(free.put, buffer))

    def checkpoint(self, upload: Upload) -> None:
        """Make everything received durable and record the acknowledged offset."""
        if upload.writer is not None:
            upload.writer.drain()
        upload.open()
        os.fdatasync(upload.fd)
        upload.durable = upload.received
        self._persist(upload.record(), True)

    # -- ending -----------------------------------------------------------------------
    def finish(self, upload: Upload, how: str) -> None:
        """The upload is done (its staging file adopted or deleted by the caller)."""
        self._end(upload, how)

    def _end(self, upload: Upload, how: str) -> None:
        with self._lock:
            if self._uploads.get(upload.upload_id) is upload:
                del self._uploads[upload.upload_id]
            self._ended[upload.upload_id] = how
            while len(self._ended) > REMEMBERED_IDS:
                self._ended.popitem(last=False)
        upload.close()
        if how != "finished":
            upload.path.unlink(missing_ok=True)
            self._forget(upload.upload_id)

    def abort(self, upload_id: str, caller: str) -> bool:
        try:
            upload = self.get(upload_id, caller)
        except (NotFound, FailedPrecondition):
            return False
        if not upload.lock.acquire(timeout=BUSY_WAIT_S):
            raise FailedPrecondition(f"upload {upload_id} is being written; retry the abort")
        try:
            self._end(upload, "aborted")
        finally:
            upload.lock.release()
        return True

    def reap_expired(self) -> int:
        now = time.monotonic()
        with self._lock:
            idle = [u for u in self._uploads.values() if now - u.touched > self._ttl_s]
        count = 0
        for upload in idle:
            if not upload.lock.acquire(blocking=False):
                continue
            try:
                if time.monotonic() - upload.touched > self._ttl_s:
                    self._end(upload, "expired")
                    count += 1
            finally:
                upload.lock.release()
        return count

    def close(self) -> None:
        with self._lock:
            uploads = list(self._uploads.values())
        for upload in uploads:
            upload.close()


def _libc_sync_file_range() -> Callable[[int, int, int, int], int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    return fn


_sync_file_range = _libc_sync_file_range()


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Ask the kernel to start writing a range to disk now, without waiting
    (Linux ``sync_file_range(SYNC_FILE_RANGE_WRITE)``; a no-op elsewhere)."""
    if _sync_file_range is not None:
        _sync_file_range(fd, offset, length, _SYNC_FILE_RANGE_WRITE)


def _preallocate(fd: int, size: int) -> None:
    """Reserve the announced size on disk: a full disk fails the upload at once."""
    if size <= 0:
        return
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise CapacityExceeded(f"no disk space for an upload of {size} bytes") from exc
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise
