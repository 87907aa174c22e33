"""The content hasher: SHA-256 of the whole content (its address, checked end
to end against the client's) and xxh3-64 of every block (what reads verify),
computed in one pass over the bytes as they arrive, in any chunking.

SHA-256 rather than BLAKE3: the standard library has it (clients need no
extra package), it releases the GIL, and with the SHA extensions measured here
it runs at ~1.2 GB/s against ~1.5 GB/s for the blake3 package on one core.
"""

from __future__ import annotations

import hashlib

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
