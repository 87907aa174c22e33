"""Where the bytes of stored contents live (contents up to
``blobs.inline_max_bytes`` stay in RocksDB and never reach a payload store).

``FilePayloads`` (store ``files``, the default for a local LanceDB directory):
one file per content, named by its SHA-256, under ``<data_dir>/blobs/payloads``::

    payloads/ab/ab3f...e1     raw content bytes (no header: the name is the hash,
                              the block checksums are in the content record)

An upload is streamed into a staging file on the same file system, fsynced,
and *adopted*: renamed to its content path and the directory fsynced. Reads
use ``preadv`` into the caller's buffers; being positional, several threads
may read one file at once (``parallel_reads``: a long download keeps several
reads in flight). They go through the page cache: O_DIRECT straight into the
shared-memory arena was measured here at a third of the speed (its pages are
scattered, so the device gets many small segments; see docs/architecture.md).
These are the same primitives as the SSD tier's segment files
(``tiers/segments.py``), with one dedicated file per large value: a blob is
written once and deleted whole, so nothing needs compacting, and a range read
is one ``preadv`` at the block's offset.

``LancePayloads`` (store ``lance``; ``lance_payloads.py``) keeps the bytes in a
LanceDB table instead; it is what an ``s3://`` URI uses.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from tiermem.server.errors import Corrupted


class PayloadReader(Protocol):
    def readinto(self, offset: int, buffer: memoryview) -> None:
        """Fill ``buffer`` with the content's bytes from ``offset``; raises
        Corrupted if the stored payload is shorter than that."""
        ...

    def close(self) -> None: ...


class PayloadStore(Protocol):
    name: str

    def adopt(self, sha256: bytes, staging: Path, size: int) -> None:
        """Make the fsynced file ``staging`` (``size`` bytes) the content's payload,
        durably; ``staging`` is consumed. Replaces an existing payload (repair)."""
        ...

    def open(self, sha256: bytes, size: int) -> PayloadReader:
        """A reader of the payload; raises Corrupted if it is missing."""
        ...

    def delete(self, sha256: bytes) -> None:
        """Forget the payload (no error if it is already gone)."""
        ...

    def hashes(self) -> Iterator[bytes]:
        """Every stored payload (start-up clean-up of payloads nothing references)."""
        ...

    def close(self) -> None: ...


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FileReader:
    #: ``readinto`` may be called from several threads at once.
    parallel_reads = True

    def __init__(self, path: Path, size: int) -> None:
        try:
            self._fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            raise Corrupted(f"payload file {path.name} is missing") from None
        os.posix_fadvise(self._fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)  # larger kernel read-ahead
        self.path = path
        self._size = size

    def will_need(self, offset: int, length: int) -> None:
        """Start reading a range into the page cache now (a long read: the disk
        works ahead of the checks and the sends)."""
        os.posix_fadvise(self._fd, offset, length, os.POSIX_FADV_WILLNEED)

    def readinto(self, offset: int, buffer: memoryview) -> None:
        done, want = 0, len(buffer)
        while done < want:
            n = os.preadv(self._fd, [buffer[done:]], offset + done)
            if n <= 0:
                raise Corrupted(
                    f"payload file {self.path.name} ends at {offset + done} bytes; "
                    f"the content has {self._size}"
                )
            done += n

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class FilePayloads:
    name = "files"

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def path(self, sha256: bytes) -> Path:
        hexed = sha256.hex()
        return self.directory / hexed[:2] / hexed

    def adopt(self, sha256: bytes, staging: Path, size: int) -> None:
        target = self.path(sha256)
        parent = target.parent
        if not parent.is_dir():
            parent.mkdir(exist_ok=True)
            fsync_dir(self.directory)
        os.replace(staging, target)
        fsync_dir(parent)

    def open(self, sha256: bytes, size: int) -> FileReader:
        return FileReader(self.path(sha256), size)

    def delete(self, sha256: bytes) -> None:
        self.path(sha256).unlink(missing_ok=True)

    def hashes(self) -> Iterator[bytes]:
        for sub in sorted(self.directory.iterdir()):
            if not sub.is_dir():
                continue
            for entry in os.scandir(sub):
                try:
                    yield bytes.fromhex(entry.name)
                except ValueError:
                    continue

    def close(self) -> None:
        return None
