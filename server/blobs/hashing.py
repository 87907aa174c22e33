"""The content hasher: SHA-256 of the whole content (its address, checked end
to end against the client's) and xxh3-64 of every block (what reads verify),
computed in one pass over the bytes as they arrive, in any chunking.

SHA-256 rather than BLAKE3: the standard library has it (clients need no
extra package), it releases the GIL, and with the SHA extensions measured here
it runs at ~1.2 GB/s against ~1.5 GB/s for the blake3 package on one core.
"""

from __future__ import annotations

import hashlib
import queue
import threading
from collections.abc import Callable

import xxhash

from tiermem.server.blobs.blocks import U64

SHA256_BYTES = 32


class ContentHasher:
    def __init__(self, block_bytes: int) -> None:
        self.block_bytes = block_bytes
        self._sha = hashlib.sha256()
        self._sums = bytearray()
        self._partial = bytearray()  # the bytes of the block being filled
        self.offset = 0  # bytes fed so far

    def update(self, data: memoryview | bytes) -> None:
        view = memoryview(data).cast("B")
        n = len(view)
        if not n:
            return
        self._sha.update(view)
        block = self.block_bytes
        pos = 0
        if self._partial:
            take = min(block - len(self._partial), n)
            self._partial += view[:take]
            pos = take
            if len(self._partial) == block:
                self._sums += U64.pack(xxhash.xxh3_64_intdigest(self._partial))
                self._partial.clear()
        while n - pos >= block:
            self._sums += U64.pack(xxhash.xxh3_64_intdigest(view[pos : pos + block]))
            pos += block
        if pos < n:
            self._partial += view[pos:]
        self.offset += n

    def finish(self) -> tuple[bytes, bytes]:
        """(SHA-256 digest, packed block checksums) of everything fed."""
        sums = bytes(self._sums)
        if self._partial:
            sums += U64.pack(xxhash.xxh3_64_intdigest(self._partial))
        return self._sha.digest(), sums


def digest_of(data: memoryview | bytes, block_bytes: int) -> tuple[bytes, bytes]:
    """(SHA-256, block checksums) of a whole small value."""
    hasher = ContentHasher(block_bytes)
    hasher.update(data)
    return hasher.finish()


class HashPipe:
    """Feeds a ``ContentHasher`` from a worker thread, in submission order, so
    hashing (SHA-256 releases the GIL) overlaps the receiving thread's socket
    reads and file writes. ``submit`` blocks while ``depth`` pieces wait;
    ``done`` callbacks (e.g. giving a buffer back) run once a piece is hashed;
    ``drain`` returns when everything submitted is hashed, re-raising a
    failure of the worker."""

    def __init__(
        self,
        hasher: ContentHasher,
        depth: int = 4,
        work: Callable[[memoryview], None] | None = None,
        name: str = "tiermem-blob-hash",
    ) -> None:
        """``work``: what the worker does with each piece instead of hashing it
        (the upload's file writer uses the same pipe)."""
        self.hasher = hasher
        self._work = work if work is not None else hasher.update
        self._queue: queue.Queue[tuple[memoryview, Callable[[], None] | None] | None] = queue.Queue(
            depth
        )
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                data, done = item
                if self._error is None:
                    try:
                        self._work(data)
                    except BaseException as exc:  # re-raised by drain/submit
                        self._error = exc
                if done is not None:
                    try:
                        done()
                    except BaseException as exc:  # re-raised by drain/submit
                        self._error = self._error or exc
            finally:
                self._queue.task_done()

    def submit(self, data: memoryview, done: Callable[[], None] | None = None) -> None:
        if self._error is not None:
            raise self._error
        self._queue.put((data, done))

    def drain(self) -> None:
        self._queue.join()
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()
