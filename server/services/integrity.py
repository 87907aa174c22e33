"""Integrity checks (``tiermem fsck``): find objects whose stored bytes are damaged.

Two entry points share the per-object checks:

* ``check_online(store, ...)`` runs inside the daemon (``IntegrityService.Check``):
  it walks the catalog, takes each object's current entry under the lock and
  verifies its SSD copy without the lock. A failure on an SSD copy that moved
  or went meanwhile (compaction, overwrite, delete) is not damage; one on the
  same SSD copy is registered in the damage log, so reads answer DATA_LOSS and
  the metric counts it, even if the object's serving copy moved between tiers.
* ``check_offline(data_dir, ...)`` opens the catalog read-only next to (or
  without) a daemon and checks the records as stored.

What counts as damage: a record that cannot be decoded, an inline value that is
missing or fails its checksum (or sits in a RocksDB block that fails RocksDB's
own checksum), a segment file that is missing or shorter than the entries it
holds, a segment entry whose header does not name the object, and bytes that do
not hash to the object's checksum. Records of objects that lived only in memory
(no SSD copy) have nothing on disk to check.

Vector collections are checked too (one object each, ``namespace/VECTOR/name``,
where "vectors"): the snapshot their record names must be present and match
the digests in its meta.json (``vectors.snapshot.verify``; snapshots written
before the digests existed are only parsed). A collection with no snapshot yet
has nothing on disk to check.

Scratchpad log files that recovery kept aside (a damaged frame, renamed
``*.damaged`` in the log folder) are listed as damage ("scratch_log") until
they are deleted: acknowledged records in them may be lost. A whole-daemon
online check also clears the register's entry of one deleted since.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import xxhash

from tiermem.server.catalog import records
from tiermem.server.catalog.index import SEG_INLINE, SEG_NONE
from tiermem.server.errors import Corrupted, InvalidArgument
from tiermem.server.model import ObjectKey, validate_namespace
from tiermem.server.scratch.log import damage_name as log_damage_name
from tiermem.server.scratch.log import kept_aside
from tiermem.server.services.damage import Damage
from tiermem.server.services.guard import Role
from tiermem.server.services.store import Store
from tiermem.server.storage.rocks import RocksStore, ScanGap
from tiermem.server.tiers.segments import HEADER as SEGMENT_HEADER
from tiermem.server.tiers.segments import MAGIC, SegmentStore
from tiermem.server.vectors import snapshot
from tiermem.server.vectors.oplog import VectorStore
from tiermem.server.vectors.types import damage_name
from tiermem.v1 import vector_records_pb2

MAX_LISTED = 100_000


@dataclass(slots=True)
class CheckReport:
    objects_checked: int = 0
    bytes_checked: int = 0
    damaged_total: int = 0
    damaged: list[Damage] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, damage: Damage, max_listed: int) -> None:
        self.damaged_total += 1
        if len(self.damaged) < max_listed:
            self.damaged.append(damage)


@dataclass(frozen=True, slots=True)
class Copy:
    """Where an object's SSD copy is, and what it must hash to."""

    seg: int
    seg_off: int
    size: int
    checksum: int


def verify_copy(
    rocks: RocksStore,
    segments: SegmentStore | None,
    encoded: bytes,
    copy: Copy,
    read_bytes: bool,
) -> tuple[str, str] | None:
    """(where, reason) if the copy is damaged, else None."""
    if copy.seg == SEG_INLINE:
        try:
            raw = rocks.get("values", encoded)
        except Corrupted as exc:
            return "inline", exc.message
        if raw is None:
            return "inline", "inline value is missing from the catalog"
        if len(raw) != copy.size:
            return "inline", f"inline value is {len(raw)} bytes, the record says {copy.size}"
        if read_bytes and xxhash.xxh3_64_intdigest(raw) != copy.checksum:
            return "inline", "inline value fails its checksum"
        return None
    if segments is None:
        return "segment", "the segments folder is missing"
    length = segments.file_bytes(copy.seg)
    if length is None:
        return "segment", f"segment file {copy.seg} is missing"
    if copy.seg_off + copy.size > length:
        end = copy.seg_off + copy.size
        return "segment", f"segment file {copy.seg} is {length} bytes; the value ends at {end}"
    head_at = copy.seg_off - len(encoded) - SEGMENT_HEADER.size
    try:
        buf = np.empty(SEGMENT_HEADER.size + len(encoded), dtype=np.uint8)
        segments.read_into(copy.seg, head_at, buf.data)
        magic, key_len, size, checksum = SEGMENT_HEADER.unpack_from(buf.data)
        if (magic, key_len, size, checksum) != (MAGIC, len(encoded), copy.size, copy.checksum) or (
            bytes(buf[SEGMENT_HEADER.size :]) != encoded
        ):
            return (
                "segment",
                f"segment {copy.seg} entry header at {head_at} does not name the object",
            )
        if read_bytes:
            data = np.empty(copy.size, dtype=np.uint8)
            segments.read_into(copy.seg, copy.seg_off, data.data)
            if xxhash.xxh3_64_intdigest(data.data) != copy.checksum:
                return "segment", f"segment {copy.seg} bytes at {copy.seg_off} fail their checksum"
    except (FileNotFoundError, EOFError) as exc:
        return "segment", f"segment {copy.seg}: {exc}"
    return None


#: Where the daemon keeps vector snapshots and the scratchpad log, under the
#: data dir (as app.py wires them).
VECTORS_DIR = "vectors"
SCRATCH_LOG_DIR = "scratch-log"
KEPT_LOG = "kept aside by recovery (a damaged frame; acknowledged records in it may be lost)"


def _kept_logs(data_dir: Path, namespace: str) -> Iterator[tuple[str, Path]]:
    """(damage name, file) of each kept-aside scratchpad log (not per namespace)."""
    if not namespace:
        for kept in kept_aside(data_dir / SCRATCH_LOG_DIR):
            yield log_damage_name(kept), kept


def _snapshot_problem(
    root: Path, rec: vector_records_pb2.CollectionRecord, read_bytes: bool
) -> str | None:
    """Why the snapshot ``rec`` names is damaged, or None."""
    try:
        snapshot.verify(root / str(rec.id) / rec.snapshot_dir, read_bytes)
    except Corrupted as exc:
        return exc.message
    return None


def _collections(
    vectors: VectorStore, namespace: str
) -> Iterator[tuple[str, vector_records_pb2.CollectionRecord]]:
    """(damage name, record) of every collection with a snapshot, in ``namespace``
    (all if empty)."""
    for rec in vectors.collection_records():
        if rec.snapshot_dir and (not namespace or rec.namespace == namespace):
            yield damage_name(rec.namespace, rec.name), rec


def _scope(namespace: str) -> bytes:
    if not namespace:
        return b""
    validate_namespace(namespace)
    return namespace.encode() + b"\x00"


def _listed(max_damaged: int) -> int:
    if max_damaged < 0 or max_damaged > MAX_LISTED:
        raise InvalidArgument(f"max_damaged must be 0..{MAX_LISTED}")
    return max_damaged or 1000


def _name(encoded: bytes) -> str:
    try:
        return str(ObjectKey.decode(encoded))
    except (ValueError, IndexError, UnicodeDecodeError):
        return encoded.hex()


def _add_gaps(report: CheckReport, gaps: list[ScanGap], listed: int) -> None:
    """Unreadable catalog ranges count as damage: the objects in them are lost."""
    for g in gaps:
        span = (
            f"records after {_name(g.after) if g.after else 'the start'} and before "
            f"{_name(g.before) if g.before else 'the end'}"
        )
        report.add(Damage(f"<catalog {span}>", g.error, "catalog"), listed)
        report.notes.append(f"catalog {span} are unreadable: {g.error}")


def check_offline(
    data_dir: Path, namespace: str = "", *, read_bytes: bool = True, max_damaged: int = 0
) -> CheckReport:
    """Check a data directory without a daemon (or beside one: read-only)."""
    started = time.perf_counter()
    listed = _listed(max_damaged)
    scope = _scope(namespace)
    report = CheckReport()
    rocks = RocksStore(data_dir / "catalog", read_only=True)
    segdir = data_dir / "segments"
    segments = SegmentStore(segdir, 1 << 30) if segdir.is_dir() else None
    referenced: set[int] = set()
    gaps: list[ScanGap] = []
    try:
        for encoded, raw in rocks.scan_salvage("objects", gaps):
            if not encoded.startswith(scope):
                continue
            report.objects_checked += 1
            try:
                rec = records.decode(raw)
                head = records.headers([raw])[0]  # named fields: robust to header growth
            except Corrupted as exc:
                report.add(Damage(_name(encoded), exc.message, "catalog"), listed)
                continue
            seg, seg_off = int(head["seg"]), int(head["seg_off"])
            size, checksum = int(head["size"]), int(head["checksum"])
            if not rec.on_ssd or seg == SEG_NONE:
                continue  # lived in memory only: nothing on disk to check
            if seg >= 0:
                referenced.add(seg)
            copy = Copy(seg, seg_off, size, checksum)
            problem = verify_copy(rocks, segments, encoded, copy, read_bytes)
            report.bytes_checked += size
            if problem is not None:
                report.add(Damage(_name(encoded), problem[1], problem[0]), listed)
        _add_gaps(report, gaps, listed)
        root = data_dir / VECTORS_DIR
        for name, col in _collections(VectorStore(rocks, fsync=False), namespace):
            report.objects_checked += 1
            report.bytes_checked += col.snapshot_bytes
            damaged = _snapshot_problem(root, col, read_bytes)
            if damaged is not None:
                report.add(Damage(name, damaged, "vectors"), listed)
        for name, _kept in _kept_logs(data_dir, namespace):
            report.add(Damage(name, KEPT_LOG, "scratch_log"), listed)
        if segments is not None and not namespace:
            unused = sorted(set(segments.stats()) - referenced)
            if unused:
                report.notes.append(
                    f"{len(unused)} segment files hold no referenced value (the daemon "
                    f"deletes them at start unless the catalog is damaged): {unused[:20]}"
                )
    finally:
        if segments is not None:
            segments.close()
        rocks.close()
    report.seconds = time.perf_counter() - started
    return report


def check_online(
    store: Store,
    namespace: str = "",
    *,
    read_bytes: bool = True,
    max_damaged: int = 0,
    check_deadline: Callable[[str], None] | None = None,
) -> CheckReport:
    """Check the daemon's objects while it serves; registers damage found."""
    started = time.perf_counter()
    listed = _listed(max_damaged)
    scope = _scope(namespace)
    report = CheckReport()
    catalog, ssd = store.catalog, store.ssd
    gaps: list[ScanGap] = []
    for encoded, _raw in catalog.rocks.scan_salvage("objects", gaps):
        if not encoded.startswith(scope):
            continue
        if check_deadline is not None:
            check_deadline("the integrity check")
        with store.lock:
            entry = catalog.find(encoded)
        if entry is None:
            continue  # deleted, or a volatile record purged at start
        report.objects_checked += 1
        if not entry.persisted:
            continue
        copy = Copy(entry.seg, entry.seg_off, entry.size, entry.checksum)
        problem = verify_copy(catalog.rocks, ssd.segments, encoded, copy, read_bytes)
        report.bytes_checked += entry.size
        if problem is None:
            continue
        with store.lock:  # the SSD copy checked, still the object's? (its serving
            # copy moving between tiers meanwhile changes nothing about that one)
            now = catalog.find(encoded)
            same = now is not None and now.same_ssd_copy(entry)
        if same:
            store.damage.add(encoded, problem[0], f"{_name(encoded)}: {problem[1]}")
            report.add(Damage(_name(encoded), problem[1], problem[0]), listed)
    _add_gaps(report, gaps, listed)
    _check_collections_online(store, namespace, read_bytes, report, listed, check_deadline)
    _check_kept_logs(store, namespace, report, listed)
    report.seconds = time.perf_counter() - started
    return report


def _check_collections_online(
    store: Store,
    namespace: str,
    read_bytes: bool,
    report: CheckReport,
    listed: int,
    check_deadline: Callable[[str], None] | None,
) -> None:
    """Verify each collection's snapshot; a failure counts (and is registered)
    only if the record still names that snapshot when it is registered (a new
    one may have replaced and pruned it meanwhile, or the collection gone)."""
    root = Path(store.config.data_dir) / VECTORS_DIR
    vectors = VectorStore(store.catalog.rocks, fsync=False)
    for name, rec in _collections(vectors, namespace):
        if check_deadline is not None:
            check_deadline("the integrity check")
        report.objects_checked += 1
        report.bytes_checked += rec.snapshot_bytes
        problem = _snapshot_problem(root, rec, read_bytes)
        if problem is None:
            continue

        def current(rec: vector_records_pb2.CollectionRecord = rec) -> bool:
            now = vectors.record(rec.namespace, rec.name)
            return now is not None and (now.id, now.snapshot_dir) == (rec.id, rec.snapshot_dir)

        # re-read and register in one step under the register's lock: a rewrite
        # or drop switches the record first and then clears the name, so it
        # either is seen here or clears this registration after it
        if store.damage.add_named_if_current(
            name, "vectors", f"collection {name}: {problem}", current
        ):
            report.add(Damage(name, problem, "vectors"), listed)


def _check_kept_logs(store: Store, namespace: str, report: CheckReport, listed: int) -> None:
    """List (and register) the kept-aside scratchpad logs; in a whole-daemon
    check, also clear the registered ones an operator has deleted since (the
    daemon never deletes them, so nothing else would until a restart)."""
    if namespace:
        return  # kept logs belong to no namespace: a scoped check looks at none
    present: set[str] = set()
    for name, kept in _kept_logs(Path(store.config.data_dir), namespace):
        # registered only if still there, checked under the register's lock: a
        # check that found it deleted meanwhile may have cleared it already
        if store.damage.add_named_if_current(
            name, "scratch_log", f"scratchpad log {name}: {KEPT_LOG}", kept.exists
        ):
            present.add(name)
            report.add(Damage(name, KEPT_LOG, "scratch_log"), listed)
    for known in store.damage.entries():
        if known.where == "scratch_log" and known.key not in present:
            store.damage.discard_named(known.key)


class IntegrityService:
    """The daemon's integrity checks, for the admin role."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def check(self, namespace: str, *, read_bytes: bool, max_damaged: int) -> CheckReport:
        guard = self.store.guard
        guard.require(Role.ADMIN)
        return check_online(
            self.store,
            namespace,
            read_bytes=read_bytes,
            max_damaged=max_damaged,
            check_deadline=guard.check_deadline,
        )

    def known_damage(self) -> list[Damage]:
        """Damage found since start (recovery, reads, checks), without a new walk."""
        return self.store.damage.entries()
