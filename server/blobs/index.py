"""The search tables: one LanceDB table per embedding space, one row per blob
that has an embedding in that space, holding the embedding next to the
blob's reference and metadata — so ``SearchBlobs`` is one filtered vector
query that returns blob references::

    space_<name>:  uid | namespace | key | sha256 | size | media_type | tags | session
                   | created_ms | vector (fixed_size_list<float32, dimension>)

The tables are derived data: the blob records in RocksDB are the truth, and
every change to them journals an entry (``catalog.BlobCatalog``) that
``apply`` replays here — drop the rows of the old version, insert the rows of
the current one. Replays are idempotent, so a crash between a commit and its
replay only delays it; searches replay what is pending first (read your
writes). Queries are exact (a flat scan with the filter applied first).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import numpy as np

from tiermem.v1 import blob_records_pb2 as rec_pb

SPACE_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # fullmatch: no trailing newline
TABLE_PREFIX = "space_"
METRICS = {0: "cosine", 1: "cosine", 2: "l2", 3: "dot"}


@dataclass(frozen=True, slots=True)
class Hit:
    uid: int
    namespace: str
    key: str
    distance: float


def quote(value: str) -> str:
    """A SQL string literal (quotes doubled)."""
    return "'" + value.replace("'", "''") + "'"


def where_clause(
    namespace: str,
    media_type: str,
    tags_all: Sequence[str],
    tags_any: Sequence[str],
    session: str,
    key_prefix: str,
    visible_sessions: Sequence[str] | None,
    granted: tuple[Sequence[str], Sequence[str]] = ((), ()),
) -> str:
    """The filter of a search. ``visible_sessions``: owners a session caller may
    see ('' = unowned), None for a trusted caller. ``granted``: (owners, key
    prefixes) whose blobs the caller may also see, those of any of the owners
    under any of the prefixes (a child session's grants over its ancestors)."""
    parts = [f"namespace = {quote(namespace)}"]
    if media_type.endswith("/*"):
        parts.append(f"starts_with(media_type, {quote(media_type[:-1])})")
    elif media_type:
        parts.append(f"media_type = {quote(media_type)}")
    if tags_all:
        parts.append(f"array_has_all(tags, [{', '.join(quote(t) for t in tags_all)}])")
    if tags_any:
        parts.append(f"array_has_any(tags, [{', '.join(quote(t) for t in tags_any)}])")
    if session:
        parts.append(f"session = {quote(session)}")
    if key_prefix:
        parts.append(f"starts_with(key, {quote(key_prefix)})")
    if visible_sessions is not None:
        owners = f"session IN ({', '.join(quote(s) for s in visible_sessions)})"
        granted_owners, prefixes = granted
        if granted_owners and prefixes:
            shared = f"session IN ({', '.join(quote(s) for s in granted_owners)})"
            if "" not in prefixes:
                keys = " OR ".join(f"starts_with(key, {quote(p)})" for p in prefixes)
                shared = f"{shared} AND ({keys})"
            owners = f"({owners} OR ({shared}))"
        parts.append(owners)
    return " AND ".join(parts)


class SearchIndex:
    def __init__(self, db: Any, spaces: dict[str, int]) -> None:
        self._db = db
        self._lock = threading.Lock()
        self._tables: dict[str, Any] = {}
        self._dims = dict(spaces)
        for name in spaces:
            self._open(name)

    @staticmethod
    def _schema(dimension: int) -> Any:
        import pyarrow as pa

        return pa.schema(
            [
                pa.field("uid", pa.uint64()),
                pa.field("namespace", pa.string()),
                pa.field("key", pa.string()),
                pa.field("sha256", pa.string()),
                pa.field("size", pa.uint64()),
                pa.field("media_type", pa.string()),
                pa.field("tags", pa.list_(pa.string())),
                pa.field("session", pa.string()),
                pa.field("created_ms", pa.uint64()),
                pa.field("vector", pa.list_(pa.float32(), dimension)),
            ]
        )

    def _open(self, name: str) -> Any:
        table = self._tables.get(name)
        if table is None:
            schema = self._schema(self._dims[name])
            table = self._db.create_table(TABLE_PREFIX + name, schema=schema, exist_ok=True)
            self._tables[name] = table
        return table

    def ensure_space(self, name: str, dimension: int) -> None:
        with self._lock:
            self._dims.setdefault(name, dimension)
            self._open(name)

    def drop_space(self, name: str) -> None:
        """Drop a space's table (no blob record names the space: its rows, if
        any, are of no blob)."""
        with self._lock:
            self._db.drop_table(TABLE_PREFIX + name, ignore_missing=True)
            self._dims.pop(name, None)
            self._tables.pop(name, None)

    @property
    def spaces(self) -> dict[str, int]:
        with self._lock:
            return dict(self._dims)

    def apply(self, drop_uids: Iterable[int], records: Sequence[rec_pb.BlobRecord]) -> None:
        """Drop the rows of ``drop_uids`` from every space, then insert one row per
        embedding of each record (their own uids must be among ``drop_uids``)."""
        import pyarrow as pa

        drops = sorted(set(drop_uids))
        by_space: dict[str, list[dict[str, Any]]] = {}
        for rec in records:
            for emb in rec.embeddings:
                by_space.setdefault(emb.space, []).append(
                    {
                        "uid": rec.uid,
                        "namespace": rec.namespace,
                        "key": rec.key,
                        "sha256": rec.sha256.hex(),
                        "size": rec.size_bytes,
                        "media_type": rec.media_type,
                        "tags": list(rec.tags),
                        "session": rec.session,
                        "created_ms": rec.created_unix_ms,
                        "vector": np.frombuffer(emb.values, dtype="<f4"),
                    }
                )
        with self._lock:
            for name in list(self._dims):
                table = self._open(name)
                for start in range(0, len(drops), 1000):
                    ids = ", ".join(str(u) for u in drops[start : start + 1000])
                    table.delete(f"uid IN ({ids})")
                rows = by_space.get(name)
                if rows:
                    table.add(pa.Table.from_pylist(rows, schema=table.schema))

    def search(
        self, space: str, vector: np.ndarray[Any, Any], k: int, where: str, metric: int
    ) -> list[Hit]:
        with self._lock:
            table = self._open(space)
        rows = (
            table.search(vector.astype(np.float32), vector_column_name="vector")
            .distance_type(METRICS.get(metric, "cosine"))
            .where(where, prefilter=True)
            .limit(k)
            .select(["uid", "namespace", "key", "_distance"])
            .to_arrow()
            .to_pylist()
        )
        return [Hit(r["uid"], r["namespace"], r["key"], float(r["_distance"])) for r in rows]

    def optimize(self) -> None:
        """Compact the tables' small fragments and drop old versions."""
        with self._lock:
            for table in self._tables.values():
                table.optimize(cleanup_older_than=timedelta(0))
