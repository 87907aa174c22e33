"""Blob upload and download throughput, side by side in one run:

* **plain file** — the same bytes written to a file on the same disk with
  ``fsync`` before the write counts as done, and read back with the file's
  pages dropped from the page cache first (``posix_fadvise DONTNEED``): the
  machine's limit for durable writes and cold reads;
* **LanceDB in-process** — one row per blob in a table with a blob column
  (Lance's blob encoding), added with ``table.add`` (plus a ``syncfs``, since
  Lance does not fsync) and read back with ``fetch_blob_files`` — the blob path
  the issue measured at ~0.53 GB/s in / ~0.34 GB/s out;
* **tiermem** — ``client.blobs.put`` / ``get_into`` against a daemon process on
  127.0.0.1 with the default fast paths of a client on the same host: uploads
  through a ring of slots in the daemon's shared-memory arena (``ShmUpload``);
  cold downloads read by the client from the payload file the daemon names
  (the ``file`` path, every block checked; with payloads in LanceDB, which has
  no such file, streamed through a leased arena extent the daemon reads and
  verifies into), hot ones leased where the DRAM cache holds them; once with
  payloads in tiermem's own files (``blobs.payload_store=files``, the default)
  and once in LanceDB (``payload_store=lance``). Uploads are durable when
  acknowledged. Cold downloads read a blob nobody has read yet, its pages
  dropped from the page cache; hot downloads read a blob the daemon copied
  into DRAM. The paths each run used are in ``results.paths``.

Sizes: 256 MiB and 4 MiB. Goals (256 MiB): tiermem upload >= 0.5x and download
>= 0.6x the plain-file figure; hot-cache download >= 1 GB/s.

    python -m bench.blob_throughput [--quick]
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import goal, tiermem_daemon, write_result
from tiermem.client import Client

MiB = 1 << 20
SIZES = {"256MiB": 256 * MiB, "4MiB": 4 * MiB}


def distinct(base: bytes, i: int) -> bytes:
    """``base`` with its first bytes changed: a new content (no dedup) for free."""
    return i.to_bytes(8, "little") + base[8:]


def drop_cache(path: Path) -> None:
    """Evict a file's (or a folder's files') pages from the page cache."""
    paths = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def syncfs(path: Path) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        libc.syncfs(fd)
    finally:
        os.close(fd)


def rate(size: int, times: list[float]) -> dict[str, float]:
    """GB/s from the median time, plus the best and the spread."""
    med = statistics.median(times)
    return {
        "gb_per_s": round(size / med / 1e9, 4),
        "best_gb_per_s": round(size / min(times) / 1e9, 4),
        "median_s": round(med, 5),
        "runs": len(times),
    }


def timed(fn: Callable[[], Any], before: Callable[[], Any] | None = None) -> float:
    if before is not None:
        before()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


# -- plain file ------------------------------------------------------------------------
def plain_file(root: Path, data: bytes, reps: int) -> dict[str, Any]:
    root.mkdir(parents=True, exist_ok=True)
    up, down = [], []
    buf = bytearray(len(data))
    for i in range(reps):
        path = root / f"plain-{i}.bin"
        payload = distinct(data, i)

        def write(path: Path = path, payload: bytes = payload) -> None:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                view = memoryview(payload)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)

        up.append(timed(write))

        def read(path: Path = path) -> None:
            with path.open("rb", buffering=0) as f:
                view = memoryview(buf)
                got = 0
                while got < len(buf):
                    got += f.readinto(view[got:]) or len(buf)

        down.append(timed(read, lambda path=path: drop_cache(path)))
        if bytes(buf[:8]) != payload[:8]:
            raise AssertionError("plain file read back other bytes")
        path.unlink()
    return {"upload": rate(len(data), up), "download": rate(len(data), down)}


# -- LanceDB in-process ----------------------------------------------------------------
def lance_direct(root: Path, data: bytes, reps: int) -> dict[str, Any]:
    import lancedb
    import pyarrow as pa
    from lancedb.schema import blob

    root.mkdir(parents=True, exist_ok=True)
    db = lancedb.connect(str(root))
    schema = pa.schema([pa.field("id", pa.int64()), blob("payload")])
    table = db.create_table("blobs", schema=schema)
    blob_type = table.schema.field("payload").type
    size = len(data)
    up, down = [], []
    for i in range(reps):
        payload = distinct(data, i)

        def add(i: int = i, payload: bytes = payload) -> None:
            offsets = pa.array([0, size], pa.int64()).buffers()[1]
            values = pa.Array.from_buffers(
                pa.large_binary(), 1, [None, offsets, pa.py_buffer(payload)]
            )
            storage = blob_type.storage_type
            children = [values] + [
                pa.nulls(1, storage.field(j).type) for j in range(1, storage.num_fields)
            ]
            column = pa.ExtensionArray.from_storage(
                blob_type, pa.StructArray.from_arrays(children, fields=list(storage))
            )
            table.add(pa.Table.from_arrays([pa.array([i], pa.int64()), column], schema=schema))
            syncfs(root)

        up.append(timed(add))
        out = bytearray(size)

        def take(i: int = i, out: bytearray = out) -> None:
            rows = table.search().where(f"id = {i}").with_row_id(True).select(["id"]).to_arrow()
            files = table.fetch_blob_files("payload", [int(rows["_rowid"][0].as_py())])
            with files[0] as f:
                view = memoryview(out)
                got = 0
                while got < size:
                    got += f.readinto(view[got:]) or size

        down.append(timed(take, lambda: drop_cache(root)))
        if bytes(out[:8]) != payload[:8]:
            raise AssertionError("LanceDB read back other bytes")
    return {"upload": rate(size, up), "download": rate(size, down)}


# -- tiermem ---------------------------------------------------------------------------
def tiermem(data_dir: Path, store: str, sizes: dict[str, int], reps: dict[str, int],
            data: dict[str, bytes]) -> dict[str, Any]:  # fmt: skip
    env = (
        ("TIERMEM_TIERS__DRAM__CAPACITY_BYTES", "2GiB"),
        ("TIERMEM_BLOBS__PAYLOAD_STORE", store),
        ("TIERMEM_BLOBS__TEXT_EMBEDDER", "off"),
    )
    out: dict[str, Any] = {}
    with tiermem_daemon(data_dir, *env) as address, Client(address, timeout_s=300) as c:
        payloads = data_dir / "blobs" / ("lance" if store == "lance" else "payloads")
        for label, size in sizes.items():
            out[label] = tiermem_size(c, label, size, reps[label], data[label], payloads)
        out["paths"] = c.path_stats()
    return out


def tiermem_size(
    c: Client, label: str, size: int, n: int, data: bytes, payloads: Path
) -> dict[str, Any]:
    up, cold, hot = [], [], []
    for i in range(n):
        payload = distinct(data, 1000 + i)
        t0 = time.perf_counter()
        info = c.blobs.put(f"{label}-{i}", payload)
        up.append(time.perf_counter() - t0)
        if info.sha256 != hashlib.sha256(payload).digest():
            raise AssertionError("tiermem stored another hash")
    buf = bytearray(size)  # like the plain file's reads: into one buffer, no allocation
    for i in range(n):
        drop_cache(payloads)
        t0 = time.perf_counter()
        c.blobs.get_into(f"{label}-{i}", buf)
        cold.append(time.perf_counter() - t0)
        if buf[:8] != (1000 + i).to_bytes(8, "little"):
            raise AssertionError("tiermem read back other bytes")
    key = f"{label}-0"
    for _ in range(6):  # reads make it hot: the daemon copies it into DRAM
        c.blobs.get_into(key, buf)
        if c.blobs.stat(key).cached:
            break
    cached = c.blobs.stat(key).cached
    for _ in range(max(3, n)):
        t0 = time.perf_counter()
        c.blobs.get_into(key, buf)
        hot.append(time.perf_counter() - t0)
    for i in range(n):
        c.blobs.delete(f"{label}-{i}")
    return {
        "upload": rate(size, up),
        "download_cold": rate(size, cold),
        "download_hot_cache": {**rate(size, hot), "cached": cached},
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()
    reps = {"256MiB": 3 if args.quick else 5, "4MiB": 10 if args.quick else 30}
    data = {label: os.urandom(size) for label, size in SIZES.items()}
    results: dict[str, dict[str, Any]] = {label: {} for label in SIZES}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=os.environ.get("TIERMEM_BENCH_DIR")) as tmp:
        root = Path(tmp)
        for label in SIZES:
            results[label]["plain_file_fsync"] = plain_file(
                root / "plain", data[label], reps[label]
            )
            results[label]["lancedb_in_process"] = lance_direct(
                root / f"lance-{label}", data[label], reps[label]
            )
        for store in ("files", "lance"):
            measured = tiermem(root / f"tm-{store}", store, SIZES, reps, data)
            for label in SIZES:
                results[label][f"tiermem_{store}"] = measured[label]
            results.setdefault("paths", {})[store] = measured["paths"]
    big = results["256MiB"]
    plain, tm = big["plain_file_fsync"], big["tiermem_files"]
    goals = [
        goal("upload_256MiB_vs_plain_file",
             tm["upload"]["gb_per_s"] / plain["upload"]["gb_per_s"], 0.5, "x"),
        goal("download_256MiB_vs_plain_file",
             tm["download_cold"]["gb_per_s"] / plain["download"]["gb_per_s"], 0.6, "x"),
        goal("hot_cache_download_256MiB", tm["download_hot_cache"]["gb_per_s"], 1.0, "GB/s"),
    ]  # fmt: skip
    details = {
        "results": results,
        "sizes": {k: v for k, v in SIZES.items()},
        "reps": reps,
        "seconds": round(time.monotonic() - started, 1),
        "notes": (
            "GB/s = 1e9 bytes/s from the median of the runs. tiermem_files (the default "
            "payload store, used for the goals) keeps payloads in its own files; "
            "tiermem_lance keeps them in a LanceDB table (blob encoding). Cold reads drop "
            "the payload's pages from the page cache first (all three); 2 shared cores, noisy."
        ),
    }
    write_result("blob_throughput", goals, details)


if __name__ == "__main__":
    main()
