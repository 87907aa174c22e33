"""Blobs from the client: streamed, resumable, verified. ``Client.blobs`` is a
``BlobClient``::

    info = c.blobs.put("photos/cat.jpg", "cat.jpg", media_type="image/jpeg",
                       tags=["cat"], embeddings={"clip": vector})
    c.blobs.get("photos/cat.jpg", "copy.jpg")              # to a file, verified
    head = c.blobs.get("photos/cat.jpg", length=4096)      # a range, as bytes
    hits = c.blobs.search(vector=q, space="clip", k=5, tags_all=["cat"])
    hits = c.blobs.search(text="quarterly revenue", k=5)   # text blobs (daemon-embedded)

Uploads: sources are paths, bytes-like values or binary files. Small blobs
(up to ``INLINE_UPLOAD_BYTES``) go in one call. Larger ones are streamed from
the source in chunks (never read whole into memory) over the bulk TCP channel
when the daemon offers it, else the gRPC stream; the SHA-256 is computed while
sending (in a reader thread, overlapping the network) and checked by the
daemon at the end. A dropped connection is resumed from the daemon's
acknowledged offset (``retries`` times); ``resume(upload_id, source)``
continues an upload another process started (``on_upload_id`` tells you the id).

Downloads: the bytes come by shared memory (hot blobs cached in the daemon's
DRAM, client on the same host), the bulk channel, or the gRPC stream, and are
verified before they reach the destination: each block against the xxh3-64
the daemon stored for it (``verify="blocks"``, the default when ``xxhash`` is
installed), or the whole blob against its SHA-256 (``verify="sha256"``). Bytes
in shared memory were verified by the daemon as it placed them there and cross
no wire, so by default (``verify="auto"``) the client does not hash them again
(the data plane's rule for every object); an explicit mode still does. A
path destination is written to ``<path>.part`` and renamed when complete and
verified.
"""

from __future__ import annotations

import builtins
import collections
import concurrent.futures
import contextlib
import hashlib
import io
import os
import queue
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal

import grpc
import numpy as np

from tiermem.client._transport import Transport
from tiermem.client._wire import HAVE_XXHASH
from tiermem.client.errors import (
    ChecksumError,
    DeadlineError,
    FailedPreconditionError,
    InvalidArgumentError,
    TiermemClientError,
    from_rpc_error,
)
from tiermem.client.fastpath import DataPlane
from tiermem.client.fastpath.bulk import BulkBroken
from tiermem.client.fastpath.shm import ArenaMismatch
from tiermem.v1 import blobs_pb2, blobs_pb2_grpc

if HAVE_XXHASH:
    import xxhash

#: Blobs up to this size are sent inside BeginUpload (one call).
INLINE_UPLOAD_BYTES = 4 << 20
#: Bytes read from the source (and hashed) per piece while uploading.
READ_UNIT_BYTES = 4 << 20
#: Bytes received per piece on the bulk channel while downloading.
RECV_UNIT_BYTES = 8 << 20
#: Streaming calls get at least this much time per byte (a floor of 20 MB/s).
MIN_STREAM_BYTES_PER_S = 20e6
#: Upload failures (dropped connections) resumed before giving up.
DEFAULT_RETRIES = 3
#: A put giving up on its timeout aborts the upload it opened within this (best effort).
ABORT_TIMEOUT_S = 1.0

Verify = Literal["auto", "blocks", "sha256", "none"]
Source = str | os.PathLike[str] | bytes | bytearray | memoryview | BinaryIO
Progress = Callable[[int], None]  # called with the bytes moved since the last call

#: Answers to ShmUpload's start that mean "use another path" (nothing was sent).
_NO_RING = (
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.UNIMPLEMENTED,
)
_RETRYABLE = ("UNAVAILABLE", "CANCELLED", "DEADLINE_EXCEEDED", "ABORTED", "UNKNOWN")


@dataclass(frozen=True, slots=True)
class BlobInfo:
    namespace: str
    key: str
    size_bytes: int
    sha256: bytes
    media_type: str
    tags: tuple[str, ...]
    session: str
    created_unix_ms: int
    embedding_spaces: tuple[str, ...]
    block_bytes: int
    content_refs: int
    cached: bool
    version: int

    @property
    def sha256_hex(self) -> str:
        return self.sha256.hex()


@dataclass(frozen=True, slots=True)
class BlobHit:
    info: BlobInfo
    distance: float
    space: str


@dataclass(frozen=True, slots=True)
class UploadStatus:
    upload_id: str
    size_bytes: int
    acknowledged_offset: int
    expires_unix_ms: int
    blob: BlobInfo | None
    deduplicated: bool


@dataclass(frozen=True, slots=True)
class BlobStats:
    blobs: int
    logical_bytes: int
    contents: int
    stored_bytes: int
    uploads_active: int
    index_pending: int
    payload_store: str
    lance_uri: str
    cached_bytes: int
    inline_upload_max_bytes: int
    max_blob_bytes: int
    text_space: str
    spaces: tuple[str, ...]
    block_bytes: int


def _info(msg: blobs_pb2.BlobInfo) -> BlobInfo:
    return BlobInfo(
        namespace=msg.ref.namespace,
        key=msg.ref.key,
        size_bytes=int(msg.size_bytes),
        sha256=bytes(msg.sha256),
        media_type=msg.media_type,
        tags=tuple(msg.tags),
        session=msg.session,
        created_unix_ms=int(msg.created_unix_ms),
        embedding_spaces=tuple(msg.embedding_spaces),
        block_bytes=int(msg.block_bytes),
        content_refs=int(msg.content_refs),
        cached=msg.cached,
        version=int(msg.version),
    )


def _status(msg: blobs_pb2.UploadReply) -> UploadStatus:
    return UploadStatus(
        upload_id=msg.upload_id,
        size_bytes=int(msg.size_bytes),
        acknowledged_offset=int(msg.acknowledged_offset),
        expires_unix_ms=int(msg.expires_unix_ms),
        blob=_info(msg.blob) if msg.HasField("blob") else None,
        deduplicated=msg.deduplicated,
    )


def sha256_of(source: Source, unit_bytes: int = READ_UNIT_BYTES) -> bytes:
    """SHA-256 of a source's bytes (streamed)."""
    src = _Source(source)
    try:
        h = hashlib.sha256()
        buf = memoryview(bytearray(min(unit_bytes, max(src.size, 1))))
        pos = 0
        while pos < src.size:
            n = min(len(buf), src.size - pos)
            src.readinto(pos, buf[:n])
            h.update(buf[:n])
            pos += n
        return h.digest()
    finally:
        src.close()


# -- sources and sinks -----------------------------------------------------------------------
class _Source:
    """Random access to the bytes of an upload (a file, a buffer, or a seekable
    binary stream; anything else is spooled to a temporary file first)."""

    def __init__(self, source: Source) -> None:
        self._fd = -1
        self._owned: Any = None
        self._view: memoryview | None = None
        self._file: BinaryIO | None = None
        self._start = 0
        if isinstance(source, str | os.PathLike):
            self._fd = os.open(os.fspath(source), os.O_RDONLY)
            self.size = os.fstat(self._fd).st_size
        elif isinstance(source, bytes | bytearray | memoryview):
            view = memoryview(source)
            self._view = view.cast("B") if view.format != "B" or view.ndim != 1 else view
            self.size = len(self._view)
        else:
            if not _seekable(source):
                spooled = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
                while chunk := source.read(READ_UNIT_BYTES):
                    spooled.write(chunk)
                spooled.flush()
                spooled.seek(0)  # its bytes start at 0 (at the end, it stored none)
                self._owned = source = spooled
            self._file = source
            self._start = source.tell()
            self.size = source.seek(0, io.SEEK_END) - self._start
            fileno = _fileno(source)
            if fileno is not None:
                self._fd = fileno

    def readinto(self, offset: int, buffer: memoryview) -> None:
        n = len(buffer)
        if self._view is not None:
            buffer[:] = self._view[offset : offset + n]
            return
        done = 0
        if self._fd >= 0:
            while done < n:
                got = os.preadv(self._fd, [buffer[done:]], self._start + offset + done)
                if got <= 0:
                    raise ValueError(f"the source ended at {offset + done} of {self.size} bytes")
                done += got
            return
        if self._file is None:
            raise ValueError("the source is closed")
        self._file.seek(self._start + offset)
        while done < n:
            got = self._file.readinto(buffer[done:])  # type: ignore[attr-defined]
            if not got:
                raise ValueError(f"the source ended at {offset + done} of {self.size} bytes")
            done += got

    def close(self) -> None:
        if self._owned is not None:
            self._owned.close()
        elif self._file is None and self._fd >= 0:
            os.close(self._fd)
        self._fd = -1


def _seekable(f: Any) -> bool:
    try:
        return bool(f.seekable())
    except (AttributeError, OSError, ValueError):
        return False


def _fileno(f: Any) -> int | None:
    try:
        fileno = int(f.fileno())
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return None
    return fileno if isinstance(f, io.BufferedReader | io.FileIO) else None


class _Sink:
    """Where downloaded bytes go: a path (via ``<path>.part``), a binary file, or memory."""

    def __init__(
        self, dest: str | os.PathLike[str] | BinaryIO | bytearray | memoryview | None
    ) -> None:
        self._path: Path | None = None
        self._file: BinaryIO | None = None
        self._buf: bytearray | None = None
        self._into: memoryview | None = None
        self._start = 0
        self.written = 0
        if dest is None:
            self._buf = bytearray()
        elif isinstance(dest, bytearray | memoryview):
            into = memoryview(dest)
            if into.readonly:
                raise InvalidArgumentError("INVALID_ARGUMENT", "the destination is read-only")
            self._into = into.cast("B") if into.format != "B" or into.ndim != 1 else into
        elif isinstance(dest, str | os.PathLike):
            self._path = Path(dest)
            self._part = self._path.with_name(self._path.name + ".part")
            self._file = open(self._part, "wb")  # noqa: SIM115 - closed in commit/abort
        else:
            self._file = dest
            self._start = dest.tell() if _seekable(dest) else -1

    def write(self, view: memoryview) -> None:
        start = self.written
        self.written += len(view)
        if self._into is not None:
            if self.written > len(self._into):
                raise InvalidArgumentError(
                    "INVALID_ARGUMENT",
                    f"the destination buffer holds {len(self._into)} bytes; the range is longer",
                )
            self._into[start : self.written] = view
        elif self._buf is not None:
            self._buf += view
        elif self._file is not None:
            self._file.write(view)

    def direct(self, nbytes: int) -> memoryview | None:
        """The destination memory for the next ``nbytes`` when the caller gave a
        buffer (received into in place, then ``accept``-ed), else None."""
        if self._into is None or self.written + nbytes > len(self._into):
            return None
        return self._into[self.written : self.written + nbytes]

    def accept(self, nbytes: int) -> None:
        """``nbytes`` were written in place (see ``direct``)."""
        self.written += nbytes

    def rewind(self) -> None:
        """Forget what was written (a path switch after a partial transfer)."""
        if not self.written:
            return
        self.written = 0
        if self._buf is not None:
            self._buf.clear()
        elif self._file is not None:
            if self._start < 0:
                raise FailedPreconditionError(
                    "FAILED_PRECONDITION",
                    "a transfer broke after writing to a non-seekable destination; retry",
                )
            self._file.seek(self._start)
            self._file.truncate()

    def commit(self) -> bytes | None:
        if self._buf is not None:
            return bytes(self._buf)
        if self._path is not None and self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            os.replace(self._part, self._path)
        return None

    def abort(self) -> None:
        if self._path is not None and self._file is not None:
            self._file.close()
            self._part.unlink(missing_ok=True)


class _Delivery:
    """Checks downloaded bytes of the aligned range block by block (or the whole
    blob's SHA-256) and passes on only the requested range's verified bytes."""

    def __init__(
        self,
        header: blobs_pb2.DownloadHeader,
        verify: Verify,
        sink: _Sink,
        progress: Progress | None,
        daemon_verified: bool = False,
    ) -> None:
        """``daemon_verified``: the bytes come from a shared-memory extent the daemon
        filled from checked blocks ("auto" then hashes nothing again)."""
        self.header = header
        info = header.info
        whole = header.offset == 0 and header.length == info.size_bytes
        if verify == "auto" and daemon_verified:
            verify = "none"
        elif verify == "auto":
            verify = "blocks" if HAVE_XXHASH else ("sha256" if whole else "none")
        if verify == "blocks" and not HAVE_XXHASH:
            raise InvalidArgumentError(
                "INVALID_ARGUMENT", "verify='blocks' needs the xxhash package; use 'sha256'"
            )
        if verify == "sha256" and not whole:
            verify = "blocks" if HAVE_XXHASH else "none"
        self._mode = verify
        self._sink = sink
        self._progress = progress
        self._block = int(header.block_bytes) or 1
        self._sums = np.frombuffer(header.block_xxh3, dtype="<u8")
        self._lo = int(header.offset)
        self._hi = self._lo + int(header.length)
        self._in_place = False
        self.reset()

    def reset(self) -> None:
        self._pos = int(self.header.aligned_offset)
        self._partial = bytearray()
        self._sha = hashlib.sha256() if self._mode == "sha256" else None

    @property
    def end(self) -> int:
        return int(self.header.aligned_offset + self.header.aligned_length)

    def feed(self, view: memoryview) -> None:
        if self._pos + len(self._partial) + len(view) > self.end:
            raise ChecksumError("DATA_LOSS", "the daemon sent more bytes than the range holds")
        if self._mode != "blocks":
            self._deliver(self._pos, view)
            self._pos += len(view)
            return
        block = self._block
        if self._partial:
            take = min(block - len(self._partial), len(view))
            self._partial += view[:take]
            view = view[take:]
            if len(self._partial) == block or self._pos + len(self._partial) == self.end:
                self._check(memoryview(self._partial))
                self._partial = bytearray()
        whole = len(view) // block * block
        if self._pos + len(view) == self.end:
            whole = len(view)
        for start in range(0, whole, block):
            self._check(view[start : start + block])
        if whole < len(view):
            self._partial += view[whole:]

    def _check(self, piece: memoryview) -> None:
        index = (self._pos - int(self.header.aligned_offset)) // self._block
        if index >= len(self._sums) or xxhash.xxh3_64_intdigest(piece) != int(self._sums[index]):
            info = self.header.info
            raise ChecksumError(
                "DATA_LOSS",
                f"blob {info.ref.namespace}/{info.ref.key}: block at byte {self._pos} arrived "
                "damaged (xxh3 mismatch); nothing of it was kept",
            )
        self._deliver(self._pos, piece)
        self._pos += len(piece)

    def direct(self) -> memoryview | None:
        """Where the whole aligned range may be received in place (the sink's own
        buffer), when the range needs no trimming; else None."""
        h = self.header
        if h.aligned_offset != h.offset or h.aligned_length != h.length or self._partial:
            return None
        return self._sink.direct(int(h.length))

    def _deliver(self, start: int, view: memoryview) -> None:
        lo = max(self._lo - start, 0)
        hi = min(self._hi - start, len(view))
        if hi > lo:
            part = view[lo:hi]
            if self._sha is not None:
                self._sha.update(part)
            if self._in_place:
                self._sink.accept(len(part))
            else:
                self._sink.write(part)
            if self._progress is not None:
                self._progress(len(part))

    def feed_in_place(self, view: memoryview) -> None:
        """Verify bytes already received into the sink's memory (``direct``)."""
        self._in_place = True
        try:
            self.feed(view)
        finally:
            self._in_place = False

    def done(self) -> None:
        if self._partial:
            self._check(memoryview(self._partial))
            self._partial = bytearray()
        if self._pos != self.end:
            raise ChecksumError(
                "DATA_LOSS", f"the download ended after {self._pos} of {self.end} bytes"
            )
        if self._sha is not None and self._sha.digest() != self.header.info.sha256:
            info = self.header.info
            raise ChecksumError(
                "DATA_LOSS",
                f"blob {info.ref.namespace}/{info.ref.key} arrived with SHA-256 "
                f"{self._sha.hexdigest()}, not {bytes(info.sha256).hex()}",
            )


class _Fallback(Exception):
    """This path could not serve the download; use the gRPC stream."""


class _ShortFile(Exception):
    """A payload file ended before the range the daemon said it holds."""


#: Reads in flight at once in a short-circuit download (each LOCAL_READ_BYTES).
LOCAL_READ_THREADS = 2
LOCAL_READ_BYTES = 8 << 20


def _read_verified(fd: int, start: int, length: int, delivery: _Delivery) -> None:
    """Read ``[start, start + length)`` of ``fd`` into ``delivery`` in units, two
    reads in flight (preadv releases the GIL), each unit checked (by ``feed``)
    before the next is delivered; in place when the destination is a buffer."""
    direct = delivery.direct()
    spans = [
        (pos, min(LOCAL_READ_BYTES, length - pos)) for pos in range(0, length, LOCAL_READ_BYTES)
    ]
    scratch = (
        []
        if direct is not None
        else [memoryview(bytearray(LOCAL_READ_BYTES)) for _ in range(LOCAL_READ_THREADS + 1)]
    )

    def target(i: int) -> memoryview:
        pos, n = spans[i]
        if direct is not None:
            return direct[pos : pos + n]
        return scratch[i % len(scratch)][:n]

    def read(i: int) -> memoryview:
        view = target(i)
        done = 0
        while done < len(view):
            got = os.preadv(fd, [view[done:]], start + spans[i][0] + done)
            if got <= 0:
                raise _ShortFile()
            done += got
        return view

    with concurrent.futures.ThreadPoolExecutor(LOCAL_READ_THREADS) as pool:
        ahead = min(LOCAL_READ_THREADS, len(spans))
        pending = collections.deque(pool.submit(read, i) for i in range(ahead))
        for i in range(len(spans)):
            view = pending.popleft().result()
            if i + ahead < len(spans):  # its buffer (scratch) is free once i is delivered
                pending.append(pool.submit(read, i + ahead))
            if direct is not None:
                delivery.feed_in_place(view)
            else:
                delivery.feed(view)
    delivery.done()


def _pipelined(
    src: _Source, start: int, end: int, unit: int, hasher: Any, depth: int = 2
) -> Iterator[memoryview]:
    """Pieces of ``src[start:end]`` read and hashed by a thread while the caller
    sends the previous ones (hashlib and socket sends release the GIL)."""
    unit = max(1, min(unit, end - start))
    buffers = [memoryview(bytearray(unit)) for _ in range(depth + 2)]
    pieces: queue.Queue[memoryview | BaseException | None] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        pos, turn = start, 0
        try:
            while pos < end and not stop.is_set():
                view = buffers[turn % len(buffers)][: min(unit, end - pos)]
                src.readinto(pos, view)
                hasher.update(view)
                pieces.put(view)
                pos += len(view)
                turn += 1
            pieces.put(None)
        except BaseException as exc:  # handed to the consumer
            pieces.put(exc)

    thread = threading.Thread(target=produce, name="tiermem-blob-reader", daemon=True)
    thread.start()
    try:
        while True:
            item = pieces.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while thread.is_alive():
            with contextlib.suppress(queue.Empty):
                pieces.get(timeout=0.05)
        thread.join()


class BlobClient:
    """Blob operations of one client (``Client.blobs``). Thread-safe."""

    def __init__(
        self,
        transport: Transport,
        dataplane: DataPlane,
        *,
        namespace: str = "default",
        chunk_bytes: int = 1 << 20,
    ) -> None:
        self._transport = transport
        self._dp = dataplane
        # short-circuit downloads (reading the daemon's payload files) until one fails
        self._local_reads = HAVE_XXHASH
        self._namespace = namespace
        self._chunk = chunk_bytes
        self._stub = blobs_pb2_grpc.BlobServiceStub(transport.channel)

    def _call(self, fn: Callable[[float], Any], timeout_s: float | None = None) -> Any:
        return self._transport.call(fn, timeout_s)

    def _md(self) -> tuple[tuple[str, str], ...]:
        return self._transport.metadata

    def _ref(self, key: str, namespace: str | None) -> blobs_pb2.BlobRef:
        return blobs_pb2.BlobRef(namespace=namespace or self._namespace, key=key)

    def _stream_timeout(self, nbytes: int, timeout_s: float | None) -> float:
        base = self._transport.timeout_s if timeout_s is None else timeout_s
        return max(base, nbytes / MIN_STREAM_BYTES_PER_S + base)

    def _bytes_deadline(self, nbytes: int, timeout_s: float | None) -> float:
        """When ``nbytes`` of a blob starting to move now by a bulk ticket must
        have moved (``time.monotonic``): the time a gRPC stream of them gets."""
        return time.monotonic() + self._stream_timeout(nbytes, timeout_s)

    def _fast_paths(self, path: str | None, timeout_s: float | None) -> list[str]:
        """The fast paths to try (``path`` forces one); ``timeout_s``: what is
        left of the call, should the offer be negotiated (a client's first call)."""
        if path == "grpc":
            return []
        offered = self._dp.paths(timeout_s)
        if path is not None:
            if path not in offered:
                raise FailedPreconditionError(
                    "FAILED_PRECONDITION", f"data path {path!r} is not available (have {offered})"
                )
            return [path]
        return [p for p in offered if p in ("shm", "bulk")]

    # -- upload -------------------------------------------------------------------------
    def put(
        self,
        key: str,
        source: Source,
        *,
        namespace: str | None = None,
        media_type: str = "",
        tags: Sequence[str] = (),
        embeddings: Mapping[str, Any] | None = None,
        session: str = "",
        if_absent: bool = False,
        skip_text_embedding: bool = False,
        sha256: bytes | None = None,
        path: str | None = None,
        progress: Progress | None = None,
        retries: int = DEFAULT_RETRIES,
        on_upload_id: Callable[[str], None] | None = None,
        timeout_s: float | None = None,
    ) -> BlobInfo:
        """Store ``source`` as blob ``key``. ``embeddings``: space name → vector.
        ``sha256``: the bytes' hash if already known — content the namespace
        stores already is then referenced without sending the bytes. ``path``
        forces a data path ("shm", "bulk" or "grpc")."""
        # what comes before the bytes (BeginUpload, negotiating the offer) shares
        # the call's timeout; the bytes then get time by their size
        deadline = self._dp.deadline_for(timeout_s)
        src = _Source(source)
        try:
            header = blobs_pb2.BeginUploadRequest(
                ref=self._ref(key, namespace),
                size_bytes=src.size,
                media_type=media_type,
                tags=list(tags),
                embeddings=[
                    blobs_pb2.Embedding(space=space, values=np.asarray(v, np.float32).ravel())
                    for space, v in (embeddings or {}).items()
                ],
                session=session,
                sha256=sha256 or b"",
                if_absent=if_absent,
                skip_text_embedding=skip_text_embedding,
            )
            if src.size <= INLINE_UPLOAD_BYTES and path != "bulk":
                data = bytearray(src.size)
                src.readinto(0, memoryview(data))
                header.data = bytes(data)
                header.has_data = True
                header.sha256 = hashlib.sha256(data).digest()
                if sha256 is not None and sha256 != header.sha256:
                    raise ChecksumError("DATA_LOSS", "the given sha256 is not that of the source")
                try:
                    reply = self._begin(header, self._dp.time_left(deadline))
                except InvalidArgumentError as exc:
                    if "inline_upload_max_bytes" not in exc.message:
                        raise
                    header.ClearField("data")
                    header.has_data = False
                else:
                    if progress is not None:
                        progress(src.size)
                    return _info(reply.blob)
            reply = self._begin(header, self._dp.time_left(deadline))
            if reply.HasField("blob"):
                if progress is not None:
                    progress(src.size)
                return _info(reply.blob)
            if on_upload_id is not None:
                on_upload_id(reply.upload_id)
            try:
                return self._send_all(
                    reply.upload_id, src, int(reply.acknowledged_offset), path, progress,
                    retries, timeout_s, deadline,
                )  # fmt: skip
            except DeadlineError:
                # the upload this call opened would hold the daemon's staging until
                # its TTL; one the caller was told of (on_upload_id) is its to resume
                if on_upload_id is None:
                    self._abort_quietly(reply.upload_id)
                raise
        finally:
            src.close()

    def _abort_quietly(self, upload_id: str) -> None:
        """Best effort, within ABORT_TIMEOUT_S: the call is failing already."""
        with contextlib.suppress(TiermemClientError):
            self.abort(upload_id, timeout_s=ABORT_TIMEOUT_S)

    def _begin(
        self, header: blobs_pb2.BeginUploadRequest, timeout_s: float | None
    ) -> blobs_pb2.UploadReply:
        return self._call(  # type: ignore[no-any-return]
            lambda t: self._stub.BeginUpload(header, timeout=t, metadata=self._md()), timeout_s
        )

    def resume(
        self,
        upload_id: str,
        source: Source,
        *,
        path: str | None = None,
        progress: Progress | None = None,
        retries: int = DEFAULT_RETRIES,
        timeout_s: float | None = None,
    ) -> BlobInfo:
        """Continue an upload (begun by ``put``, perhaps in another process) from
        the daemon's acknowledged offset; ``source`` must hold the same bytes."""
        deadline = self._dp.deadline_for(timeout_s)  # (see put)
        src = _Source(source)
        try:
            status = self.status(upload_id, timeout_s=self._dp.time_left(deadline))
            if status.size_bytes != src.size:
                raise InvalidArgumentError(
                    "INVALID_ARGUMENT",
                    f"upload {upload_id} is of {status.size_bytes} bytes; "
                    f"the source has {src.size}",
                )
            return self._send_all(
                upload_id, src, status.acknowledged_offset, path, progress, retries, timeout_s,
                deadline,
            )  # fmt: skip
        finally:
            src.close()

    def begin(
        self, key: str, size_bytes: int, *, namespace: str | None = None, media_type: str = "",
        tags: Sequence[str] = (), session: str = "", timeout_s: float | None = None,
    ) -> UploadStatus:  # fmt: skip
        """Announce an upload without sending bytes (low level; see ``put``)."""
        header = blobs_pb2.BeginUploadRequest(
            ref=self._ref(key, namespace),
            size_bytes=size_bytes,
            media_type=media_type,
            tags=list(tags),
            session=session,
        )
        return _status(self._begin(header, timeout_s))

    def status(self, upload_id: str, *, timeout_s: float | None = None) -> UploadStatus:
        """Where an upload stands: resume it from ``acknowledged_offset``."""
        request = blobs_pb2.GetUploadRequest(upload_id=upload_id)
        reply = self._call(
            lambda t: self._stub.GetUpload(request, timeout=t, metadata=self._md()), timeout_s
        )
        return _status(reply)

    def abort(self, upload_id: str, *, timeout_s: float | None = None) -> bool:
        request = blobs_pb2.AbortUploadRequest(upload_id=upload_id)
        reply = self._call(
            lambda t: self._stub.AbortUpload(request, timeout=t, metadata=self._md()), timeout_s
        )
        return bool(reply.aborted)

    def _send_all(
        self,
        upload_id: str,
        src: _Source,
        offset: int,
        path: str | None,
        progress: Progress | None,
        retries: int,
        timeout_s: float | None,
        deadline: float,
    ) -> BlobInfo:
        """Send [offset, size), resuming after failures, then finish. The offer
        is negotiated first (a client's first call), within what is left of the
        call's ``deadline``: a Hello cut short raises DeadlineError, never
        retried as a broken stream is."""
        if path != "grpc" and not self._dp.negotiated:
            self._dp.offer(self._dp.time_left(deadline))
        attempt = 0
        while True:
            hasher = hashlib.sha256()
            if offset:
                _hash_prefix(src, offset, hasher)
            try:
                return self._send(upload_id, src, offset, hasher, path, progress, timeout_s)
            except (BulkBroken, TiermemClientError) as exc:
                if isinstance(exc, TiermemClientError) and exc.code not in _RETRYABLE:
                    raise
                attempt += 1
                if attempt > retries:
                    raise
                if isinstance(exc, BulkBroken) and path is None:
                    self._dp.bulk_broken()
                offset = self.status(upload_id, timeout_s=timeout_s).acknowledged_offset

    def _send(
        self,
        upload_id: str,
        src: _Source,
        offset: int,
        hasher: Any,
        path: str | None,
        progress: Progress | None,
        timeout_s: float | None,
    ) -> BlobInfo:
        size = src.size
        fast = self._fast_paths(path, timeout_s)  # (negotiated by _send_all)
        if "shm" in fast and offset < size:
            try:
                self._send_shm(upload_id, src, offset, hasher, progress, timeout_s)
            except _Fallback:
                if path == "shm":
                    raise FailedPreconditionError(
                        "FAILED_PRECONDITION", "the daemon cannot take this upload by shared memory"
                    ) from None
            else:
                self._dp.count("shm", puts=1, nbytes=size - offset)
                return self._finish(upload_id, hasher.digest(), timeout_s)
        if "bulk" in fast and offset < size:
            request = blobs_pb2.BeginBulkUploadRequest(upload_id=upload_id, offset=offset)
            ticket = self._call(
                lambda t: self._stub.BeginBulkUpload(request, timeout=t, metadata=self._md()),
                timeout_s,
            )

            def pieces() -> Iterator[memoryview]:
                for view in _pipelined(src, offset, size, READ_UNIT_BYTES, hasher):
                    yield view
                    if progress is not None:
                        progress(len(view))

            self._dp.bulk_pool.send_stream(
                self._dp.bulk_target(ticket.address), ticket.ticket_id, pieces(),
                self._bytes_deadline(size - offset, timeout_s),
            )  # fmt: skip
            self._dp.count("bulk", puts=1, nbytes=size - offset)
            return self._finish(upload_id, hasher.digest(), timeout_s)
        chunk = self._chunk

        def requests() -> Iterator[blobs_pb2.UploadChunk]:
            yield blobs_pb2.UploadChunk(upload_id=upload_id, offset=offset)
            for view in _pipelined(src, offset, size, READ_UNIT_BYTES, hasher):
                for start in range(0, len(view), chunk):
                    yield blobs_pb2.UploadChunk(data=bytes(view[start : start + chunk]))
                if progress is not None:
                    progress(len(view))
            yield blobs_pb2.UploadChunk(
                finish=blobs_pb2.FinishUploadRequest(upload_id=upload_id, sha256=hasher.digest())
            )

        timeout = self._stream_timeout(size - offset, timeout_s)
        try:  # not retried as a whole: a broken stream resumes from the acknowledged offset
            reply = self._stub.Upload(requests(), timeout=timeout, metadata=self._md())
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None
        self._dp.count("grpc", puts=1, nbytes=size - offset)
        return self._finished(upload_id, reply, hasher.digest())

    def _send_shm(
        self,
        upload_id: str,
        src: _Source,
        offset: int,
        hasher: Any,
        progress: Progress | None,
        timeout_s: float | None,
    ) -> None:
        """Send [offset, size) through a ring of slots the daemon leases in its arena:
        copy a piece into a free slot, hash it, tell the daemon, and refill each slot
        once the daemon says it has written it. Raises _Fallback (having sent and
        hashed nothing) when the daemon cannot give a ring; later failures raise and
        ``_send_all`` resumes from the acknowledged offset."""
        arena = self._dp.offer(timeout_s).arena
        if arena is None:
            raise _Fallback()
        size = src.size
        messages: queue.Queue[blobs_pb2.ShmUploadRequest | None] = queue.Queue()
        start = blobs_pb2.ShmUploadRequest.Start(upload_id=upload_id, offset=offset)
        messages.put(blobs_pb2.ShmUploadRequest(start=start))

        def requests() -> Iterator[blobs_pb2.ShmUploadRequest]:
            while (msg := messages.get()) is not None:
                yield msg

        timeout = self._stream_timeout(size - offset, timeout_s)
        replies = self._stub.ShmUpload(requests(), timeout=timeout, metadata=self._md())
        try:
            try:
                ring = next(replies).ring
                region = arena.region(int(ring.lease.offset), int(ring.lease.length))
                if ring.lease.arena_id != arena.arena_id or ring.slots < 1:
                    raise ArenaMismatch("the ring is not in the mapped arena")
            except grpc.RpcError as exc:
                if exc.code() in _NO_RING:
                    raise _Fallback() from None
                raise
            except (ArenaMismatch, StopIteration):
                raise _Fallback() from None
            slot_bytes = int(ring.slot_bytes)
            free = list(range(int(ring.slots)))[::-1]
            pos = offset
            while pos < size:
                if not free:
                    free.append(next(replies).freed_slot)
                slot = free.pop()
                n = min(slot_bytes, size - pos)
                view = memoryview(region[slot * slot_bytes : slot * slot_bytes + n])  # type: ignore[arg-type]
                src.readinto(pos, view)
                hasher.update(view)
                unit = blobs_pb2.ShmUploadRequest.Unit(slot=slot, length=n)
                messages.put(blobs_pb2.ShmUploadRequest(unit=unit))
                pos += n
                if progress is not None:
                    progress(n)
            messages.put(None)
            for _ in replies:  # the daemon ends the stream once the bytes are durable
                pass
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None
        except StopIteration:
            raise TiermemClientError(
                "UNAVAILABLE", "the daemon ended the shared-memory upload before taking every byte"
            ) from None
        finally:
            messages.put(None)
            replies.cancel()  # nothing once the stream has ended

    def _finish(self, upload_id: str, digest: bytes, timeout_s: float | None) -> BlobInfo:
        request = blobs_pb2.FinishUploadRequest(upload_id=upload_id, sha256=digest)
        try:
            reply = self._call(
                lambda t: self._stub.FinishUpload(request, timeout=t, metadata=self._md()),
                timeout_s,
            )
        except FailedPreconditionError as exc:
            if "already finished" not in exc.message:
                raise
            raise FailedPreconditionError(
                exc.code, f"{exc.message} (a retried finish: stat the blob to see it)"
            ) from None
        return self._finished(upload_id, reply, digest)

    @staticmethod
    def _finished(upload_id: str, reply: blobs_pb2.UploadReply, digest: bytes) -> BlobInfo:
        if not reply.HasField("blob"):
            raise TiermemClientError("INTERNAL", f"upload {upload_id} was not stored")
        info = _info(reply.blob)
        if info.sha256 != digest:
            raise ChecksumError("DATA_LOSS", f"upload {upload_id} was stored with another hash")
        return info

    # -- download -------------------------------------------------------------------------
    def get(
        self,
        key: str,
        dest: str | os.PathLike[str] | BinaryIO | None = None,
        *,
        namespace: str | None = None,
        offset: int = 0,
        length: int = 0,
        verify: Verify = "auto",
        path: str | None = None,
        progress: Progress | None = None,
        lease_ttl_ms: int = 0,
        timeout_s: float | None = None,
    ) -> bytes | BlobInfo:
        """Read a blob, or ``length`` bytes from ``offset`` (0 = to the end). With
        ``dest`` (a path or a binary file) the bytes are written there and the
        blob's info is returned; without, the bytes are returned."""
        sink = _Sink(dest)
        try:
            info = self._download(
                self._ref(key, namespace), offset, length, sink, verify, path, progress,
                lease_ttl_ms, timeout_s,
            )  # fmt: skip
            data = sink.commit()
        except BaseException:
            sink.abort()
            raise
        return info if dest is not None else (data or b"")

    def get_into(
        self,
        key: str,
        buffer: bytearray | memoryview,
        *,
        namespace: str | None = None,
        offset: int = 0,
        length: int = 0,
        verify: Verify = "auto",
        path: str | None = None,
        progress: Progress | None = None,
        timeout_s: float | None = None,
    ) -> tuple[int, BlobInfo]:
        """Read a blob (or ``length`` bytes from ``offset``) into a writable buffer
        at least that long, verified, without allocating; (bytes written, info)."""
        sink = _Sink(buffer)
        info = self._download(
            self._ref(key, namespace), offset, length, sink, verify, path, progress, 0,
            timeout_s,
        )  # fmt: skip
        return sink.written, info

    def read(self, key: str, offset: int = 0, length: int = 0, **kw: Any) -> bytes:
        """The bytes of a blob or a range of it."""
        data = self.get(key, None, offset=offset, length=length, **kw)
        if not isinstance(data, bytes):  # pragma: no cover - get without dest returns bytes
            raise TypeError("expected bytes")
        return data

    def _download(
        self,
        ref: blobs_pb2.BlobRef,
        offset: int,
        length: int,
        sink: _Sink,
        verify: Verify,
        path: str | None,
        progress: Progress | None,
        lease_ttl_ms: int,
        timeout_s: float | None,
    ) -> BlobInfo:
        # negotiating the offer (a client's first call) and opening the download
        # share the call's timeout; the bytes then get time by their size
        deadline = self._dp.deadline_for(timeout_s)
        fast = self._fast_paths(path, self._dp.time_left(deadline))
        if fast:
            # a client on this host may read the payload file itself (checking it)
            local = path is None and "shm" in fast and self._local_reads and verify != "none"
            request = blobs_pb2.OpenDownloadRequest(
                ref=ref, offset=offset, length=length, lease_ttl_ms=lease_ttl_ms,
                paths=[*fast, "file"] if local else fast, streamed="shm" in fast,
            )  # fmt: skip
            reply = self._call(
                lambda t: self._stub.OpenDownload(request, timeout=t, metadata=self._md()),
                self._dp.time_left(deadline),
            )
            delivery = _Delivery(
                reply.header, verify, sink, progress, daemon_verified=reply.HasField("shm")
            )
            size = int(reply.header.aligned_length)
            try:
                if reply.stream:
                    local = local and self._local_reads
                    stream = blobs_pb2.DownloadRequest(
                        ref=ref, offset=offset, length=length,
                        paths=["shm", "file"] if local else ["shm"], lease_ttl_ms=lease_ttl_ms,
                    )  # fmt: skip
                    return self._streamed(stream, size, sink, verify, progress, timeout_s,
                                          forced=path is not None)  # fmt: skip
                if reply.HasField("inline"):
                    delivery.feed(memoryview(reply.inline))
                    delivery.done()
                    self._dp.count("grpc", gets=1, nbytes=int(reply.header.length))
                    return _info(reply.header.info)
                if reply.HasField("shm"):
                    self._from_shm(reply.shm, delivery)
                    return _info(reply.header.info)
                if reply.HasField("bulk"):
                    self._from_bulk(reply.bulk, delivery, timeout_s)
                    return _info(reply.header.info)
            except _Fallback:
                sink.rewind()
            if path is not None and path != "grpc":
                # a broken fast path may have been the daemon refusing damaged bytes:
                # planning the read again without a path raises its status (DATA_LOSS)
                request.ClearField("paths")
                self._call(
                    lambda t: self._stub.OpenDownload(request, timeout=t, metadata=self._md()),
                    timeout_s,
                )
                raise FailedPreconditionError(
                    "FAILED_PRECONDITION", f"data path {path!r} could not serve the download"
                )
        else:
            size = (
                length
                or self.stat(ref.key, namespace=ref.namespace, timeout_s=timeout_s).size_bytes
            )
        return self._from_grpc(ref, offset, length, sink, verify, progress, size, timeout_s)

    def _streamed(
        self,
        request: blobs_pb2.DownloadRequest,
        size: int,
        sink: _Sink,
        verify: Verify,
        progress: Progress | None,
        timeout_s: float | None,
        forced: bool,
    ) -> BlobInfo:
        """A streamed download through shared memory: the daemon leases an extent,
        reads and verifies the range into it and reports the verified prefix as
        it grows; the caller's copy of each verified unit overlaps the reads of
        the next ones. Bytes past the last reported prefix are never used; a
        damaged block ends the stream with DATA_LOSS. Should the daemon send the
        bytes on the stream instead (no room in its arena), they are taken like
        the gRPC path's, unless ``forced`` (the caller asked for shm only)."""
        arena = self._dp.offer(timeout_s).arena
        if arena is None:
            raise _Fallback()

        def call(timeout: float) -> BlobInfo:
            sink.rewind()
            started = time.monotonic()
            stream = self._stub.Download(request, timeout=timeout, metadata=self._md())
            try:
                header = next(stream).header
                second = next(stream, None)
                if second is not None and second.HasField("file"):
                    if self._read_local(second.file, header, verify, sink, progress):
                        return _info(header.info)
                    sink.rewind()  # the daemon reads it instead (and reports any damage)
                    del request.paths[:]
                    request.paths.append("shm")
                    return call(timeout)
                if second is not None and second.HasField("lease"):
                    lease = second.lease
                    try:
                        delivery = _Delivery(header, verify, sink, progress, daemon_verified=True)
                        self._copy_verified(arena, lease, delivery, stream, started)
                    finally:
                        self._dp.release_leases([lease.lease_id])
                    self._dp.count("shm", gets=1, nbytes=int(header.length))
                    return _info(header.info)
                if forced:
                    raise _Fallback()
                delivery = _Delivery(header, verify, sink, progress)
                for msg in [second] if second is not None else []:
                    delivery.feed(memoryview(msg.data))
                for msg in stream:
                    delivery.feed(memoryview(msg.data))
                delivery.done()
                self._dp.count("grpc", gets=1, nbytes=int(header.length))
                return _info(header.info)
            finally:
                stream.cancel()  # nothing once the stream has ended

        return self._call(call, self._stream_timeout(size, timeout_s))  # type: ignore[no-any-return]

    def _copy_verified(
        self,
        arena: Any,
        lease: blobs_pb2.BlobLease,
        delivery: _Delivery,
        stream: Iterator[blobs_pb2.DownloadChunk],
        started: float,
    ) -> None:
        """Deliver the leased region's bytes as the stream reports them verified."""
        header = delivery.header
        if lease.arena_id != arena.arena_id:
            raise _Fallback()
        try:
            region = arena.region(int(lease.offset), int(lease.length))
        except ArenaMismatch:
            raise _Fallback() from None
        start = int(header.aligned_offset) - int(lease.range_offset)
        view = region.data[start : start + int(header.aligned_length)]
        deadline = started + lease.ttl_ms / 1000.0
        copied = 0
        for msg in stream:
            upto = int(msg.verified_bytes)
            if not msg.HasField("verified_bytes") or not copied <= upto <= len(view):
                raise ChecksumError(
                    "DATA_LOSS", f"the daemon reported {upto} verified bytes after {copied}"
                )
            for pos in range(copied, upto, RECV_UNIT_BYTES):
                if time.monotonic() >= deadline:
                    raise _Fallback()  # the lease may run out: do not trust later bytes
                delivery.feed(view[pos : min(pos + RECV_UNIT_BYTES, upto)])
            copied = upto
        delivery.done()

    def _read_local(
        self,
        local: blobs_pb2.LocalFile,
        header: blobs_pb2.DownloadHeader,
        verify: Verify,
        sink: _Sink,
        progress: Progress | None,
    ) -> bool:
        """Read the aligned range from the payload file the daemon named (a
        short-circuit read: one copy, from the page cache into the destination),
        checking every block. False, having delivered nothing for good, when the
        file cannot be used: not readable by this user (file reads are then off
        for this client), not the file the daemon named, shorter, or damaged."""
        try:
            fd = os.open(local.path, os.O_RDONLY)
        except OSError:
            self._local_reads = False
            return False
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino, st.st_size) != (local.device, local.inode, local.size_bytes):
                return False  # replaced since (a repair), or another mount namespace
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
            mode: Verify = "sha256" if verify == "sha256" else "blocks"
            delivery = _Delivery(header, mode, sink, progress)
            _read_verified(fd, int(header.aligned_offset), int(header.aligned_length), delivery)
        except (ChecksumError, _ShortFile):
            return False
        finally:
            os.close(fd)
        self._dp.count("file", gets=1, nbytes=int(header.length))
        return True

    def _from_shm(self, lease: blobs_pb2.BlobLease, delivery: _Delivery) -> None:
        started = time.monotonic()
        arena = self._dp.offer().arena
        try:
            if arena is None or lease.arena_id != arena.arena_id:
                raise _Fallback()
            region = arena.region(int(lease.offset), int(lease.length))
            header = delivery.header
            start = int(header.aligned_offset) - int(lease.range_offset)
            view = region.data[start : start + int(header.aligned_length)]
            deadline = started + lease.ttl_ms / 1000.0
            for pos in range(0, len(view), RECV_UNIT_BYTES):
                if time.monotonic() >= deadline:
                    raise _Fallback()  # the lease may run out: do not trust later bytes
                delivery.feed(view[pos : pos + RECV_UNIT_BYTES])
            delivery.done()
        finally:
            self._dp.release_leases([lease.lease_id])
        self._dp.count("shm", gets=1, nbytes=int(delivery.header.length))

    def _from_bulk(self, ticket: Any, delivery: _Delivery, timeout_s: float | None) -> None:
        header = delivery.header
        nbytes = int(header.aligned_length)
        deadline = self._bytes_deadline(nbytes, timeout_s)
        direct = delivery.direct()
        if direct is not None:  # into the caller's buffer: no copy, verified in place
            units = [direct[i : i + RECV_UNIT_BYTES] for i in range(0, nbytes, RECV_UNIT_BYTES)]
            try:
                self._dp.bulk_pool.get(self._dp.bulk_target(ticket.address), ticket.ticket_id,
                                       units, deadline)  # fmt: skip
            except BulkBroken:
                raise _Fallback() from None
            for unit in units:
                delivery.feed_in_place(unit)
            delivery.done()
            self._dp.count("bulk", gets=1, nbytes=int(header.length))
            return
        buf = memoryview(bytearray(min(RECV_UNIT_BYTES, max(nbytes, 1))))
        try:
            self._dp.bulk_pool.recv_stream(
                self._dp.bulk_target(ticket.address), ticket.ticket_id, nbytes, buf, delivery.feed,
                deadline,
            )  # fmt: skip
        except BulkBroken:
            raise _Fallback() from None  # the gRPC stream says why (e.g. DATA_LOSS)
        delivery.done()
        self._dp.count("bulk", gets=1, nbytes=int(header.length))

    def _from_grpc(
        self,
        ref: blobs_pb2.BlobRef,
        offset: int,
        length: int,
        sink: _Sink,
        verify: Verify,
        progress: Progress | None,
        size: int,
        timeout_s: float | None,
    ) -> BlobInfo:
        """The gRPC stream (retried from the start while the daemon is unavailable)."""
        request = blobs_pb2.DownloadRequest(ref=ref, offset=offset, length=length)

        def call(timeout: float) -> BlobInfo:
            sink.rewind()
            stream = self._stub.Download(request, timeout=timeout, metadata=self._md())
            first = next(stream)
            delivery = _Delivery(first.header, verify, sink, progress)
            for msg in stream:
                delivery.feed(memoryview(msg.data))
            delivery.done()
            self._dp.count("grpc", gets=1, nbytes=int(first.header.length))
            return _info(first.header.info)

        return self._call(call, self._stream_timeout(size, timeout_s))  # type: ignore[no-any-return]

    # -- stat, delete, list, search ----------------------------------------------------------
    def stat(
        self, key: str, *, namespace: str | None = None, timeout_s: float | None = None
    ) -> BlobInfo:
        request = blobs_pb2.StatBlobRequest(ref=self._ref(key, namespace))
        reply = self._call(
            lambda t: self._stub.StatBlob(request, timeout=t, metadata=self._md()), timeout_s
        )
        return _info(reply.info)

    def delete(
        self, key: str, *, namespace: str | None = None, timeout_s: float | None = None
    ) -> bool:
        request = blobs_pb2.DeleteBlobRequest(ref=self._ref(key, namespace))
        reply = self._call(
            lambda t: self._stub.DeleteBlob(request, timeout=t, metadata=self._md()), timeout_s
        )
        return bool(reply.deleted)

    def list(
        self,
        *,
        namespace: str | None = None,
        prefix: str = "",
        media_type: str = "",
        tags_all: Sequence[str] = (),
        tags_any: Sequence[str] = (),
        session: str = "",
        page_size: int = 0,
        timeout_s: float | None = None,
    ) -> Iterator[BlobInfo]:
        """Every matching blob, page by page as the iterator advances."""
        flt = blobs_pb2.BlobFilter(
            media_type=media_type,
            tags_all=list(tags_all),
            tags_any=list(tags_any),
            session=session,
            key_prefix=prefix,
        )
        token = ""
        while True:
            request = blobs_pb2.ListBlobsRequest(
                namespace=namespace or self._namespace,
                filter=flt,
                page_size=page_size,
                page_token=token,
            )
            reply = self._list_page(request, timeout_s)
            for msg in reply.blobs:
                yield _info(msg)
            token = reply.next_page_token
            if not token:
                return

    def _list_page(
        self, request: blobs_pb2.ListBlobsRequest, timeout_s: float | None
    ) -> blobs_pb2.ListBlobsResponse:
        return self._call(  # type: ignore[no-any-return]
            lambda t: self._stub.ListBlobs(request, timeout=t, metadata=self._md()), timeout_s
        )

    def search(
        self,
        *,
        vector: Any = None,
        text: str | None = None,
        space: str = "",
        k: int = 10,
        namespace: str | None = None,
        media_type: str = "",
        tags_all: Sequence[str] = (),
        tags_any: Sequence[str] = (),
        session: str = "",
        prefix: str = "",
        metric: Literal["cosine", "l2", "dot"] = "cosine",
        timeout_s: float | None = None,
    ) -> builtins.list[BlobHit]:
        """The ``k`` blobs whose embedding in ``space`` is nearest ``vector`` (or,
        with ``text``, whose text embedding is nearest the text's), filtered."""
        if (vector is None) == (text is None):
            raise ValueError("give exactly one of vector and text")
        request = blobs_pb2.SearchBlobsRequest(
            namespace=namespace or self._namespace,
            k=k,
            filter=blobs_pb2.BlobFilter(
                media_type=media_type,
                tags_all=list(tags_all),
                tags_any=list(tags_any),
                session=session,
                key_prefix=prefix,
            ),
            metric={"cosine": 1, "l2": 2, "dot": 3}[metric],  # type: ignore[arg-type]
        )
        if text is not None:
            request.text = text
        else:
            request.vector.CopyFrom(
                blobs_pb2.Embedding(space=space, values=np.asarray(vector, np.float32).ravel())
            )
        reply = self._call(
            lambda t: self._stub.SearchBlobs(request, timeout=t, metadata=self._md()), timeout_s
        )
        return [BlobHit(_info(h.info), float(h.distance), h.space) for h in reply.hits]

    def stats(self, *, timeout_s: float | None = None) -> BlobStats:
        reply = self._call(
            lambda t: self._stub.BlobStats(
                blobs_pb2.BlobStatsRequest(), timeout=t, metadata=self._md()
            ),
            timeout_s,
        )
        return BlobStats(
            blobs=int(reply.blobs),
            logical_bytes=int(reply.logical_bytes),
            contents=int(reply.contents),
            stored_bytes=int(reply.stored_bytes),
            uploads_active=int(reply.uploads_active),
            index_pending=int(reply.index_pending),
            payload_store=reply.payload_store,
            lance_uri=reply.lance_uri,
            cached_bytes=int(reply.cached_bytes),
            inline_upload_max_bytes=int(reply.inline_upload_max_bytes),
            max_blob_bytes=int(reply.max_blob_bytes),
            text_space=reply.text_space,
            spaces=tuple(reply.spaces),
            block_bytes=int(reply.block_bytes),
        )


def _hash_prefix(src: _Source, offset: int, hasher: Any) -> None:
    buf = memoryview(bytearray(min(READ_UNIT_BYTES, offset)))
    pos = 0
    while pos < offset:
        n = min(len(buf), offset - pos)
        src.readinto(pos, buf[:n])
        hasher.update(buf[:n])
        pos += n
