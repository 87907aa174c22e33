"""Snapshots of loaded collections on SSD.

```
 <data_dir>/vectors/<collection id>/<seq:020d>-<nonce>/
     index.faiss   faiss.write_index of the built index
     state.npz     slot_ids, live (per slot), payload columns num0.. / str0..
     meta.json     format, seq covered, built kind, effective params, counters, column names,
                   digests: xxh3-64 (hex) of index.faiss and state.npz,
                   meta_digest: xxh3-64 of the rest of meta.json (sorted-key JSON)
```

Every load checks the digests before it reads the files (``verify``), and so
does ``tiermem fsck``: a flipped byte in a snapshot is DATA_LOSS, never other
search results. Snapshots written before the digests existed (no ``digests``
in meta.json) load unchecked.

A snapshot is written into ``<name>.tmp``, every file fsynced, renamed into
place and the parent directory fsynced; only then does the caller point the
collection's RocksDB record at it (and trim the log up to its seq in the same
write batch). A crash at any step leaves the previous snapshot in charge;
stray folders are removed when the collection is next opened.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from tiermem.server.errors import Corrupted
from tiermem.server.vectors import index as fx
from tiermem.server.vectors.payloads import PayloadColumns
from tiermem.server.vectors.state import State
from tiermem.server.vectors.types import CollectionSpec, IndexKind, IndexParams

FORMAT = 1

#: The files a snapshot's digests cover (meta.json carries its own).
DIGESTED = ("index.faiss", "state.npz")
_READ_CHUNK_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    dir_name: str
    seq: int
    size_bytes: int
    count: int


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _file_digest(path: Path) -> str:
    h = xxhash.xxh3_64()
    with open(path, "rb") as f:
        while chunk := f.read(_READ_CHUNK_BYTES):
            h.update(chunk)
    return h.hexdigest()


def _meta_digest(meta: dict[str, Any]) -> str:
    rest = {k: v for k, v in meta.items() if k != "meta_digest"}
    return xxhash.xxh3_64_hexdigest(json.dumps(rest, sort_keys=True).encode())


def verify(folder: Path, read_bytes: bool = True) -> dict[str, Any]:
    """The snapshot's meta, once its files check out against their digests
    (every byte read; without ``read_bytes`` only that meta.json checks out
    and the files exist); raises Corrupted naming the damaged file. A snapshot
    without digests (written before they existed) is only parsed."""
    try:
        meta = json.loads((folder / "meta.json").read_text())
    except (OSError, ValueError) as exc:
        raise Corrupted(f"snapshot {folder}: meta.json cannot be read: {exc}") from exc
    if not isinstance(meta, dict):
        raise Corrupted(f"snapshot {folder}: meta.json is not an object")
    digests = meta.get("digests")
    if digests is None and "meta_digest" not in meta:
        return meta  # an older snapshot: nothing to check against
    if meta.get("meta_digest") != _meta_digest(meta) or not isinstance(digests, dict):
        raise Corrupted(f"snapshot {folder}: meta.json fails its digest")
    for name in DIGESTED:
        try:
            if not read_bytes:
                (folder / name).stat()
                continue
            digest = _file_digest(folder / name)
        except OSError as exc:
            raise Corrupted(f"snapshot {folder}: {name} cannot be read: {exc}") from exc
        if digest != digests.get(name):
            raise Corrupted(f"snapshot {folder}: {name} fails its digest")
    return meta


def write(root: Path, state: State, fsync: bool) -> SnapshotInfo:
    """Write ``state`` under ``root`` (the collection's folder); returns its name.
    Call with the collection's lock held (shared is enough: it only reads)."""
    root.mkdir(parents=True, exist_ok=True)
    name = f"{state.seq:020d}-{uuid.uuid4().hex[:8]}"
    tmp = root / f"{name}.tmp"
    tmp.mkdir()
    n = state.next_slot
    fx.write(state.index, tmp / "index.faiss")
    arrays, columns = state.columns.to_arrays()
    arrays["slot_ids"] = state.slot_ids[:n]
    arrays["live"] = state.live[:n]
    with open(tmp / "state.npz", "wb") as f:
        np.savez(f, **arrays)  # type: ignore[arg-type]  # numpy's stub types **kwds oddly
    meta = {
        "format": FORMAT,
        "seq": state.seq,
        "built": state.built.name,
        "params": {k: getattr(state.params, k) for k in IndexParams.__slots__},
        "next_slot": n,
        "count": state.count,
        "tombstones": state.tombstones,
        "columns": columns,
        "digests": {name: _file_digest(tmp / name) for name in DIGESTED},
    }
    meta["meta_digest"] = _meta_digest(meta)
    (tmp / "meta.json").write_text(json.dumps(meta))
    if fsync:
        for file in tmp.iterdir():
            _fsync_file(file)
    final = root / name
    os.rename(tmp, final)
    if fsync:
        _fsync_dir(root)
    size = sum(f.stat().st_size for f in final.iterdir())
    return SnapshotInfo(name, state.seq, size, state.count)


def read(root: Path, dir_name: str, spec: CollectionSpec, mmap: bool) -> State:
    """Load the snapshot ``dir_name`` (a State at the seq it covers); Corrupted
    if it fails its digests or does not parse."""
    folder = root / dir_name
    meta = verify(folder)
    try:
        if meta.get("format") != FORMAT:
            raise Corrupted(f"snapshot {folder} has format {meta.get('format')}, not {FORMAT}")
        built = IndexKind[meta["built"]]
        params = IndexParams(**meta["params"])
        index = fx.read(folder / "index.faiss", built, mmap)
        with np.load(folder / "state.npz", allow_pickle=False) as npz:
            arrays: dict[str, Any] = {k: npz[k] for k in npz.files}
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise Corrupted(f"snapshot {folder} of {spec.label} cannot be read: {exc}") from exc
    state = State(spec, built, index, params, int(meta["seq"]))
    n = int(meta["next_slot"])
    state._reserve(n)
    state.slot_ids[:n] = arrays.pop("slot_ids")
    state.live[:n] = arrays.pop("live")
    state.next_slot = n
    state.tombstones = int(meta["tombstones"])
    live = state.live_slots()
    state.id_to_slot = dict(zip(state.slot_ids[live].tolist(), live.tolist(), strict=True))
    state.columns = PayloadColumns.from_arrays(arrays, meta["columns"], n)
    in_index = state.count if built == IndexKind.IVF_PQ else n
    if state.count != int(meta["count"]) or int(index.ntotal) != in_index:
        raise Corrupted(
            f"snapshot {folder} of {spec.label} is inconsistent: {state.count} live ids, "
            f"meta says {meta['count']}; index holds {index.ntotal} of {n} slots"
        )
    return state


def prune(root: Path, keep: str) -> None:
    """Remove every snapshot folder (and leftover .tmp) under ``root`` but ``keep``."""
    if not root.is_dir():
        return
    for child in root.iterdir():
        if child.name != keep:
            shutil.rmtree(child, ignore_errors=True)
