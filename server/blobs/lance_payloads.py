"""Content bytes in LanceDB: the ``contents`` table (``sha256``, ``size``, and
the bytes in a blob v2 column, Lance's blob encoding), at the same URI as the
search tables — a local directory or ``s3://`` object storage.

Writes go from the fsynced staging file, mapped (``mmap``: the page cache,
not a copy on the heap), into one ``add``; reads open the row's blob as a
seekable file (``fetch_blob_files``) and read ranges into the caller's buffers.
Deleted rows release their space when the table is optimized (``optimize``,
run by the blob service's maintenance). On a local directory the file system
is synced after each add (Lance itself does not fsync).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from tiermem.server.errors import Corrupted

TABLE = "contents"


def blob_column(table_type: Any, data: Any, size: int) -> Any:
    """A one-row blob v2 column holding ``data`` (a pyarrow buffer of ``size`` bytes)."""
    import pyarrow as pa

    offsets = pa.array([0, size], pa.int64()).buffers()[1]
    values = pa.Array.from_buffers(pa.large_binary(), 1, [None, offsets, data])
    storage = table_type.storage_type
    children = [values] + [pa.nulls(1, storage.field(i).type) for i in range(1, storage.num_fields)]
    struct = pa.StructArray.from_arrays(children, fields=list(storage))
    return pa.ExtensionArray.from_storage(table_type, struct)


def _syncfs(path: Path) -> None:
    """Flush the file system holding ``path`` (Linux ``syncfs``; else ``sync``)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fn = getattr(libc, "syncfs", None)
    if fn is None:
        os.sync()
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        if fn(fd) != 0:
            raise OSError(ctypes.get_errno(), "syncfs failed")
    finally:
        os.close(fd)


class LanceReader:
    def __init__(self, blob_file: Any, size: int, name: str) -> None:
        self._file = blob_file
        self._size = size
        self._name = name

    def readinto(self, offset: int, buffer: memoryview) -> None:
        self._file.seek(offset)
        done, want = 0, len(buffer)
        while done < want:
            n = self._file.readinto(buffer[done:])
            if not n:
                raise Corrupted(
                    f"LanceDB payload {self._name} ends at {offset + done} bytes; "
                    f"the content has {self._size}"
                )
            done += n

    def close(self) -> None:
        self._file.close()


class LancePayloads:
    name = "lance"

    def __init__(self, db: Any, local_dir: Path | None) -> None:
        import pyarrow as pa
        from lancedb.schema import blob

        self._db = db
        self._local = local_dir
        self._lock = threading.Lock()
        schema = pa.schema(
            [pa.field("sha256", pa.string()), pa.field("size", pa.uint64()), blob("payload")]
        )
        try:
            self._table = db.open_table(TABLE)
        except (FileNotFoundError, ValueError):
            self._table = db.create_table(TABLE, schema=schema, exist_ok=True)

    def adopt(self, sha256: bytes, staging: Path, size: int) -> None:
        import pyarrow as pa

        hexed = sha256.hex()
        with open(staging, "rb") as f, mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ) as mm:
            column = blob_column(self._table.schema.field("payload").type, pa.py_buffer(mm), size)
            rows = pa.Table.from_arrays(
                [pa.array([hexed]), pa.array([size], pa.uint64()), column],
                schema=self._table.schema,
            )
            with self._lock:
                self._table.delete(f"sha256 = '{hexed}'")  # a repair replaces the row
                self._table.add(rows)
                del rows, column
        if self._local is not None:
            _syncfs(self._local)
        staging.unlink(missing_ok=True)

    def _row_id(self, hexed: str) -> int | None:
        rows = (
            self._table.search()
            .where(f"sha256 = '{hexed}'")
            .with_row_id(True)
            .select(["sha256"])
            .limit(1)
            .to_arrow()
        )
        return int(rows["_rowid"][0].as_py()) if rows.num_rows else None

    def open(self, sha256: bytes, size: int) -> LanceReader:
        hexed = sha256.hex()
        row = self._row_id(hexed)
        if row is None:
            raise Corrupted(f"LanceDB payload {hexed[:16]}… is missing")
        files = self._table.fetch_blob_files("payload", [row])
        if not files or files[0] is None:
            raise Corrupted(f"LanceDB payload {hexed[:16]}… has no bytes")
        return LanceReader(files[0], size, hexed[:16])

    def delete(self, sha256: bytes) -> None:
        with self._lock:
            self._table.delete(f"sha256 = '{sha256.hex()}'")

    def hashes(self) -> Iterator[bytes]:
        rows = self._table.search().select(["sha256"]).limit(None).to_arrow()
        for value in rows["sha256"].to_pylist():
            yield bytes.fromhex(value)

    def optimize(self) -> None:
        """Compact the table and drop old versions: frees deleted payloads' space."""
        with self._lock:
            self._table.optimize(cleanup_older_than=timedelta(0))

    def close(self) -> None:
        return None
