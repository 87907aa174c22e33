"""The catalog: durable object records plus the compact in-memory index.

Records (``catalog.records``: a fixed header plus the wire ``ObjectMeta``) live
in RocksDB column family "objects"
keyed by the encoded object key; the index (``catalog.index``) mirrors what the
hot path and the planner need. The record is the truth for metadata that rarely
changes (profile, tensor info, session, version); the index is the truth for
where the value is served from right now (tier, location) and for access stats.

Not thread-safe: the object service serialises access with its lock.
"""

from __future__ import annotations

import struct
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from tiermem.placement.access import AccessModel, PriorLearner
from tiermem.server.catalog import records
from tiermem.server.catalog.index import (
    FLAG_DURABLE,
    FLAG_LIVE,
    FLAG_PINNED,
    FLAG_REMOTE,
    FLAG_SEEN,
    HINT_MASK,
    HINT_SHIFT,
    SEG_INLINE,
    SEG_NONE,
    VERSION_COLUMN_MAX,
    ObjectIndex,
)
from tiermem.server.catalog.records import StoredRecord
from tiermem.server.catalog.sessions import SessionIds
from tiermem.server.errors import NotFound
from tiermem.server.model import (
    KIND_BY_VALUE,
    Kind,
    ObjectKey,
    ObjectMeta,
    Tier,
    validate_namespace,
)
from tiermem.server.protoconv import meta_from_proto, meta_to_proto
from tiermem.server.storage.rocks import Batch, RocksStore
from tiermem.v1 import common_pb2 as pb

_EXPIRY = struct.Struct(">Q")
#: Batches of at least this many rows are looked up and touched with numpy
#: (one call per column: ``entries``, ``touch_many``); smaller ones row by row,
#: which costs less than numpy's fixed overhead per call.
VECTOR_MIN_ROWS = 16
#: members by value (a dict lookup is several times cheaper than ``Kind(value)``)
_TIERS = {int(m): m for m in Tier}


class Entry(NamedTuple):
    """A snapshot of one index row, taken under the service lock. (A named
    tuple: reads build one per object, and a tuple is built several times
    faster than a frozen dataclass.)"""

    row: int
    kind: Kind
    tier: Tier
    size: int
    loc: int
    seg: int
    seg_off: int
    checksum: int
    flags: int
    expires_ms: int

    @property
    def durable(self) -> bool:
        return bool(self.flags & FLAG_DURABLE)

    @property
    def pinned(self) -> bool:
        return bool(self.flags & FLAG_PINNED)

    @property
    def persisted(self) -> bool:
        return self.seg != SEG_NONE

    @property
    def remote_copy(self) -> bool:
        """A copy of this version was written to the remote store (it may since have
        been evicted there)."""
        return bool(self.flags & FLAG_REMOTE)

    def same_copy(self, other: Entry) -> bool:
        """True if ``other`` still describes the very copy this snapshot saw."""
        return (self.row, self.tier, self.loc, self.seg, self.seg_off, self.checksum) == (
            other.row,
            other.tier,
            other.loc,
            other.seg,
            other.seg_off,
            other.checksum,
        )

    def same_ssd_copy(self, other: Entry) -> bool:
        """True if ``other`` still has the very SSD copy this snapshot saw (its
        serving copy may have moved between tiers meanwhile)."""
        return _ssd_copy(self) == _ssd_copy(other)


def _ssd_copy(e: Entry) -> tuple[int, int, int, int]:
    return (e.row, e.seg, e.seg_off, e.checksum)


def session_index_key(session: str, encoded_key: bytes) -> bytes:
    return session.encode() + b"\x00" + encoded_key


def expiry_index_key(expires_ms: int, encoded_key: bytes) -> bytes:
    return _EXPIRY.pack(expires_ms) + encoded_key


#: Called under the lock after a read counted an access: (row, encoded key or None).
AccessHook = Callable[[int, bytes | None], None]


class Catalog:
    def __init__(
        self, rocks: RocksStore, access: AccessModel | None = None, recent_keys: int = 100_000
    ) -> None:
        self.rocks = rocks
        self.index = ObjectIndex()
        #: encoded key of every row whose serving copy is in HBM or DRAM (needed to
        #: demote it); bounded by what fits in those tiers.
        self.resident_keys: dict[int, bytes] = {}
        #: keys of recently read or written rows served from SSD (needed to promote
        #: them), least recent first; at most ``recent_keys_max`` entries.
        self.recent_keys: OrderedDict[int, bytes] = OrderedDict()
        self.recent_keys_max = recent_keys
        #: the access model: ``rate``/``atime`` columns, priors learned per class
        self.access = access or AccessModel()
        self.learner = PriorLearner(self.access)
        self.sessions = SessionIds()
        self.on_access: AccessHook | None = None
        #: Reads counted without the store lock (``touch_later``): (row, key) in
        #: the order they happened, applied by the next holder of the lock
        #: (``apply_touches``, which ``Store`` runs as the lock is taken).
        #: Appends and pops of a deque are atomic, so readers need no lock.
        self.pending_touches: deque[tuple[int, bytes]] = deque()
        #: bytes of the objects served from the remote tier (their only copy is there)
        self.remote_bytes = 0
        self.namespaces: dict[str, int] = {}
        #: [namespace id] -> (objects, bytes) of live objects: quotas read it.
        self.ns_usage = np.zeros((1 << 16, 2), dtype=np.int64)
        for name, raw in rocks.scan("namespaces"):
            self.namespaces[name.decode()] = int.from_bytes(raw[:2], "little")

    # -- namespaces -------------------------------------------------------------
    def ensure_namespace(self, name: str) -> bool:
        """Create the namespace if missing; returns True if it was created."""
        validate_namespace(name)
        if name in self.namespaces:
            return False
        ns_id = len(self.namespaces) + 1
        if ns_id >= 1 << 16:
            from tiermem.server.errors import CapacityExceeded

            raise CapacityExceeded("at most 65535 namespaces are supported")
        created_ms = int(time.time() * 1000)
        self.rocks.cf("namespaces").put(
            name.encode(), ns_id.to_bytes(2, "little") + created_ms.to_bytes(8, "little")
        )
        self.rocks.flush()
        self.namespaces[name] = ns_id
        return True

    def namespace_id(self, name: str) -> int:
        ns_id = self.namespaces.get(name)
        if ns_id is None:
            raise NotFound(
                f"namespace {name!r} not found; create it with `tiermem ns create {name}` "
                "or list it under `namespaces` in the config"
            )
        return ns_id

    def namespace_usage(self, name: str) -> tuple[int, int]:
        """(objects, bytes) the namespace holds now (0, 0 if unknown)."""
        ns_id = self.namespaces.get(name)
        if ns_id is None:
            return 0, 0
        objects, nbytes = self.ns_usage[ns_id]
        return int(objects), int(nbytes)

    # -- rows -------------------------------------------------------------------
    def find(self, encoded_key: bytes) -> Entry | None:
        row = self.index.find(encoded_key)
        return None if row is None else self.entry(row)

    def find_all(self, encoded_keys: Sequence[bytes]) -> list[Entry | None]:
        """``find`` of many keys: the index searched for all at once when there
        are enough of them (``VECTOR_MIN_ROWS``) for numpy to pay off."""
        if len(encoded_keys) >= VECTOR_MIN_ROWS:
            return self.entries(self.index.find_many(encoded_keys))
        return [self.find(e) for e in encoded_keys]

    def entry(self, row: int) -> Entry:
        c = self.index.cols  # (``item`` returns a Python int, at half the cost of int())
        return Entry(
            row,
            KIND_BY_VALUE[c["kind"].item(row)],
            _TIERS[c["tier"].item(row)],
            c["size"].item(row),
            c["loc"].item(row),
            c["seg"].item(row),
            c["seg_off"].item(row),
            c["checksum"].item(row),
            c["flags"].item(row),
            c["expires"].item(row),
        )

    def entries(self, rows: npt.NDArray[np.int64]) -> list[Entry | None]:
        """``entry`` of many rows at once (None where a row is < 0: absent);
        each column is gathered once for all of them."""
        c = self.index.cols
        safe = np.where(rows >= 0, rows, 0)
        cols = [
            c[name][safe].tolist()
            for name in ("kind", "tier", "size", "loc", "seg", "seg_off", "checksum", "flags")
        ]
        expires = c["expires"][safe].tolist()
        kinds, tiers, sizes, locs, segs, seg_offs, checksums, flags = cols
        return [
            None
            if row < 0
            else Entry(
                row,
                KIND_BY_VALUE[kinds[i]],
                _TIERS[tiers[i]],
                sizes[i],
                locs[i],
                segs[i],
                seg_offs[i],
                checksums[i],
                flags[i],
                expires[i],
            )
            for i, row in enumerate(rows.tolist())
        ]

    def set_row(
        self,
        encoded_key: bytes,
        meta: ObjectMeta,
        *,
        tier: Tier,
        loc: int,
        seg: int,
        seg_off: int,
    ) -> int:
        row = self.index.find(encoded_key)
        c = self.index.cols
        ns_id = self.namespaces.get(meta.key.namespace, 0)
        if row is None:
            row = self.index.insert(encoded_key)
            self.ns_usage[ns_id, 0] += 1
        else:
            self.ns_usage[ns_id, 1] -= int(c["size"][row])
        self.ns_usage[ns_id, 1] += meta.size_bytes
        c = self.index.cols  # the insert may have grown the columns
        if int(c["tier"][row]) == Tier.REMOTE:  # replaced: its remote bytes leave with it
            self.remote_bytes -= int(c["size"][row])
            c["tier"][row] = 0
        now = time.time()
        old_flags = int(c["flags"][row])
        flags = old_flags & 1  # keep FLAG_LIVE
        if meta.durable:
            flags |= FLAG_DURABLE
        if meta.profile.pin:
            flags |= FLAG_PINNED
        kind, hint = int(meta.key.kind), int(meta.profile.hint)
        flags |= (hint << HINT_SHIFT) & HINT_MASK
        c["flags"][row] = flags
        c["kind"][row] = kind
        c["ns"][row] = ns_id
        c["size"][row] = meta.size_bytes
        c["checksum"][row] = meta.checksum
        c["expires"][row] = meta.expires_unix_ms
        prior = self.learner.prior(kind, hint)
        self.learner.on_put(kind, hint, now)
        if old_flags & FLAG_SEEN:  # an overwrite keeps what reads taught about the key
            learned = self.access.estimate_one(
                float(c["rate"][row]), float(c["atime"][row]), now, self.session_kv(row)
            )
            prior = max(prior, learned)
        c["rate"][row] = prior
        c["atime"][row] = now
        c["version"][row] = meta.version if 0 < meta.version <= VERSION_COLUMN_MAX else 0
        old_sess = int(c["sess"][row])
        c["sess"][row] = self.sessions.acquire(meta.session)
        self.sessions.release(old_sess)
        self.place(row, encoded_key, tier=tier, loc=loc, seg=seg, seg_off=seg_off)
        return row

    def place(
        self, row: int, encoded_key: bytes, *, tier: Tier, loc: int, seg: int, seg_off: int
    ) -> None:
        """Record where the row's serving copy and SSD copy are."""
        c = self.index.cols
        if int(c["tier"][row]) == Tier.REMOTE:
            self.remote_bytes -= int(c["size"][row])
        if tier == Tier.REMOTE:
            self.remote_bytes += int(c["size"][row])
        c["tier"][row] = int(tier)
        c["loc"][row] = loc
        c["seg"][row] = seg
        c["seg_off"][row] = seg_off
        if tier in (Tier.HBM, Tier.DRAM):
            self.resident_keys[row] = encoded_key
            self.recent_keys.pop(row, None)
        else:
            self.resident_keys.pop(row, None)
            self.remember(row, encoded_key)

    def remember(self, row: int, encoded_key: bytes) -> None:
        """Keep the key of a non-resident row (bounded, least recent dropped)."""
        keys = self.recent_keys
        keys[row] = encoded_key
        keys.move_to_end(row)
        while len(keys) > self.recent_keys_max:
            keys.popitem(last=False)

    def key_of(self, row: int) -> bytes | None:
        """Encoded key of a row if known without a scan: resident in memory, or a
        recently read or written SSD row."""
        key = self.resident_keys.get(row)
        return key if key is not None else self.recent_keys.get(row)

    def set_remote(self, row: int, present: bool) -> None:
        """Mark whether the row's current version has a copy in the remote store."""
        c = self.index.cols["flags"]
        c[row] = (int(c[row]) | FLAG_REMOTE) if present else (int(c[row]) & ~FLAG_REMOTE)

    def set_pinned(self, row: int, pinned: bool) -> None:
        c = self.index.cols["flags"]
        c[row] = (int(c[row]) | FLAG_PINNED) if pinned else (int(c[row]) & ~FLAG_PINNED)

    def session_kv(self, row: int) -> bool:
        """Whether ``row`` is a KV block of a session (its rate fades faster:
        ``AccessModel.session_half_life_s``)."""
        c = self.index.cols
        return int(c["kind"][row]) == Kind.KV_BLOCK and int(c["sess"][row]) != 0

    def touch(self, row: int, encoded_key: bytes | None = None) -> None:
        """Count a read of ``row`` now: decayed rate, last access, first-read
        learning; remember its key if it is served from SSD (so it can be
        promoted), then tell ``on_access`` (promotion on read)."""
        c = self.index.cols
        now = time.time()
        if not int(c["flags"][row]) & FLAG_SEEN:
            self.touch_first(row, now)
        c["rate"][row] = self.access.record_one(
            float(c["rate"][row]), float(c["atime"][row]), now, self.session_kv(row)
        )
        c["atime"][row] = now
        if encoded_key is not None and row not in self.resident_keys:
            self.remember(row, encoded_key)
        if self.on_access is not None:
            self.on_access(row, encoded_key)

    def touch_many(self, rows: Sequence[int], encoded_keys: Sequence[bytes]) -> None:
        """``touch`` of distinct rows read together, the rate update vectorised
        (each row counted once, as one ``touch`` each would). A few rows, or a
        row twice, are touched one by one (numpy's fixed cost per call is more
        than a few scalar updates; a repeated row counts every read in turn)."""
        if len(rows) < VECTOR_MIN_ROWS or len(set(rows)) != len(rows):
            for row, encoded in zip(rows, encoded_keys, strict=True):
                self.touch(row, encoded)
            return
        c = self.index.cols
        now = time.time()
        at = np.asarray(rows, dtype=np.int64)
        flags = c["flags"][at]
        unseen = (flags & FLAG_SEEN) == 0
        if unseen.any():  # first reads: mark them seen, teach the learner per class
            first = at[unseen]
            c["flags"][first] = flags[unseen] | FLAG_SEEN
            kinds = c["kind"][first]
            hints = (flags[unseen] & HINT_MASK) >> HINT_SHIFT
            ages = now - c["atime"][first]
            for kind, hint in set(zip(kinds.tolist(), hints.tolist(), strict=True)):
                same = (kinds == kind) & (hints == hint)
                self.learner.on_first_reads(kind, hint, ages[same], now)
        session = (c["kind"][at] == int(Kind.KV_BLOCK)) & (c["sess"][at] != 0)
        self.access.record(c["rate"], c["atime"], at, now, session)
        resident = self.resident_keys
        for row, encoded in zip(rows, encoded_keys, strict=True):
            if row not in resident:
                self.remember(row, encoded)
            if self.on_access is not None:
                self.on_access(row, encoded)

    def touch_later(self, rows: Sequence[int], encoded_keys: Sequence[bytes]) -> None:
        """Count reads of ``rows`` once the store lock is next taken (safe
        without the lock; see ``pending_touches``)."""
        self.pending_touches.extend(zip(rows, encoded_keys, strict=True))

    def apply_touches(self) -> None:
        """``touch_many`` the reads ``touch_later`` queued, skipping rows that
        no longer hold the key they were read under (deleted since). They are
        counted as of now, not as of the read: at most the time until the lock
        is next taken later (the migrator takes it every pass). A read of a
        key replaced (or deleted and stored again) meanwhile counts for the
        new version. Call with the store lock."""
        pending = self.pending_touches
        if not pending:
            return
        find = self.index.find
        rows: list[int] = []
        keys: list[bytes] = []
        seen: set[int] = set()  # rows of the current run (a list's `in` is quadratic)
        for _ in range(len(pending)):  # not those queued while this runs
            row, key = pending.popleft()
            if find(key) != row:
                continue
            if row in seen:  # hot rows repeat: count each run of distinct rows at
                # once (vectorised), in order, so every read of a row counts in turn
                self.touch_many(rows, keys)
                rows, keys = [], []
                seen.clear()
            seen.add(row)
            rows.append(row)
            keys.append(key)
        if rows:
            self.touch_many(rows, keys)

    def touch_first(self, row: int, now: float) -> None:
        """A row's first read: mark it seen and teach the prior learner how long
        objects of its class wait for their first read."""
        c = self.index.cols
        flags = int(c["flags"][row])
        c["flags"][row] = flags | FLAG_SEEN
        hint = (flags & HINT_MASK) >> HINT_SHIFT
        self.learner.on_first_read(int(c["kind"][row]), hint, now - float(c["atime"][row]), now)

    def remove_row(self, encoded_key: bytes) -> None:
        row = self.index.remove(encoded_key)
        c = self.index.cols
        if int(c["tier"][row]) == Tier.REMOTE:
            self.remote_bytes -= int(c["size"][row])
        ns_id = int(c["ns"][row])
        self.ns_usage[ns_id, 0] -= 1
        self.ns_usage[ns_id, 1] -= int(c["size"][row])
        self.resident_keys.pop(row, None)
        self.recent_keys.pop(row, None)
        sess = self.index.cols["sess"]
        self.sessions.release(int(sess[row]))
        sess[row] = 0

    def replaced(self, encoded_key: bytes, old: Entry | None) -> tuple[str, int]:
        """(session, version) of the object a put is about to replace (``old``,
        its entry; None: nothing, ("", 0)), from the index; its record is read
        only when the index does not know the version (rows rebuilt at
        recovery). Saves a RocksDB read under the store lock."""
        if old is None:
            return "", 0
        c = self.index.cols
        version = int(c["version"][old.row])
        if version == 0:
            rec = self.record(encoded_key)
            if rec is not None:
                return rec.meta.session, int(rec.meta.version)
        return self.sessions.name(int(c["sess"][old.row])), version

    # -- records ----------------------------------------------------------------
    def record(self, encoded_key: bytes) -> StoredRecord | None:
        raw = self.rocks.get("objects", encoded_key)
        return None if raw is None else records.decode(raw)

    def meta(self, encoded_key: bytes, entry: Entry) -> ObjectMeta:
        """Full metadata: the record plus live placement from the index."""
        return self.meta_and_wire(encoded_key, entry)[0]

    def meta_and_wire(self, encoded_key: bytes, entry: Entry) -> tuple[ObjectMeta, pb.ObjectMeta]:
        """``meta`` and the same metadata as its wire message (the record's own,
        with the live fields set), so replies need not convert it back."""
        wire = self.wire(encoded_key, entry)
        return meta_from_proto(wire), wire

    def wire(self, encoded_key: bytes, entry: Entry) -> pb.ObjectMeta:
        """The object's metadata as its wire message: the record's own, with the
        live fields from ``entry`` (``live_wire``). Raises NotFound."""
        rec = self.record(encoded_key)
        if rec is None:
            raise NotFound(f"object {ObjectKey.decode(encoded_key)} not found")
        return self.live_wire(rec, entry)

    def compose(
        self, rec: StoredRecord, entry: Entry, atime: float | None = None
    ) -> tuple[ObjectMeta, pb.ObjectMeta]:
        """A record's metadata with the live fields from ``entry``, as the domain
        object and as the record's own wire message (``live_wire``)."""
        wire = self.live_wire(rec, entry, atime)
        return meta_from_proto(wire), wire

    def live_wire(
        self, rec: StoredRecord, entry: Entry, atime: float | None = None
    ) -> pb.ObjectMeta:
        """The record's metadata message, updated in place with the live fields
        the index holds (tier, persisted, pin, access time). The access time is
        read from the index unless given (``atime_of``, read under the lock with
        ``entry``: then this needs no lock)."""
        wire = rec.meta
        wire.tier = int(entry.tier)  # type: ignore[assignment]
        wire.persisted = entry.persisted
        wire.profile.pin = entry.pinned
        wire.accessed_unix_ms = int((self.atime_of(entry) if atime is None else atime) * 1000)
        return wire

    def atime_of(self, entry: Entry) -> float:
        """The entry's last access (unix seconds) as the index holds it now."""
        return float(self.index.cols["atime"][entry.row])

    def stage_record(
        self, batch: Batch, encoded_key: bytes, meta: ObjectMeta, seg: int, seg_off: int
    ) -> pb.ObjectMeta:
        """Stage ``meta``'s record (and its session and expiry index entries);
        returns ``meta`` as the message the record holds (replies reuse it)."""
        ns_id = self.namespaces.get(meta.key.namespace, 0)
        wire = meta_to_proto(meta)
        batch.put(
            "objects", encoded_key, records.encode(meta, encoded_key, ns_id, seg, seg_off, wire)
        )
        if meta.session:
            batch.put("by_session", session_index_key(meta.session, encoded_key), b"")
        if meta.expires_unix_ms:
            batch.put("expiry", expiry_index_key(meta.expires_unix_ms, encoded_key), b"")
        return wire

    def stage_ssd_location(self, batch: Batch, encoded_key: bytes, seg: int, seg_off: int) -> bool:
        """Point a record at a new SSD copy (demotion, compaction), or at none
        (``SEG_NONE``: a move to the remote tier released it). False if it is gone."""
        raw = self.rocks.get("objects", encoded_key)
        if raw is None:
            return False
        batch.put("objects", encoded_key, records.with_ssd_location(raw, seg, seg_off))
        return True

    def store_pinned(self, encoded_key: bytes, pinned: bool) -> None:
        """Persist a pin change in the record (header flag and metadata)."""
        raw = self.rocks.get("objects", encoded_key)
        if raw is None:
            return
        rec = records.decode(raw)
        if rec.meta.profile.pin == pinned and bool(rec.flags & FLAG_PINNED) == pinned:
            return
        rec.meta.profile.pin = pinned
        header = records.with_pinned(raw, pinned)[: records.HEADER.size]
        batch = self.rocks.batch()
        batch.put("objects", encoded_key, header + rec.meta.SerializeToString())
        batch.commit(sync=False)

    def stage_removal(
        self, batch: Batch, encoded_key: bytes, session: str, expires_ms: int
    ) -> None:
        batch.delete("objects", encoded_key)
        if session:
            batch.delete("by_session", session_index_key(session, encoded_key))
        if expires_ms:
            batch.delete("expiry", expiry_index_key(expires_ms, encoded_key))

    def expired_keys(self, now_ms: int, limit: int) -> list[tuple[int, bytes]]:
        """(expiry ms, encoded key) of entries due by ``now_ms``, oldest first."""
        out: list[tuple[int, bytes]] = []
        for k, _ in self.rocks.scan("expiry"):
            expires_ms = _EXPIRY.unpack_from(k)[0]
            if expires_ms > now_ms or len(out) >= limit:
                break
            out.append((expires_ms, k[_EXPIRY.size :]))
        return out

    def scan_records(
        self, prefix: bytes, start: bytes | None = None
    ) -> Iterator[tuple[bytes, StoredRecord]]:
        for k, raw in self.rocks.scan("objects", prefix, start):
            yield k, records.decode(raw)

    def session_keys(self, session: str, start: bytes | None = None) -> Iterator[bytes]:
        prefix = session.encode() + b"\x00"
        for k, _ in self.rocks.scan("by_session", prefix, start):
            yield k[len(prefix) :]

    # -- usage ------------------------------------------------------------------
    def usage(self) -> npt.NDArray[np.int64]:
        """Array [tier, kind, (objects, bytes)] counting copies: an object served
        from DRAM with an SSD copy counts on both tiers. Derived from the index."""
        out = np.zeros((len(Tier) + 1, len(Kind) + 1, 2), dtype=np.int64)
        rows = self.index.live_rows()
        if len(rows) == 0:
            return out
        c = self.index.cols
        tiers = c["tier"][rows].astype(np.int64)
        kinds = c["kind"][rows].astype(np.int64)
        sizes = c["size"][rows]
        np.add.at(out[:, :, 0], (tiers, kinds), 1)
        np.add.at(out[:, :, 1], (tiers, kinds), sizes)
        extra = (c["seg"][rows] != SEG_NONE) & (tiers != int(Tier.SSD))
        if extra.any():
            np.add.at(out[:, :, 0], (int(Tier.SSD), kinds[extra]), 1)
            np.add.at(out[:, :, 1], (int(Tier.SSD), kinds[extra]), sizes[extra])
        return out

    def copy_columns(self, *names: str) -> dict[str, npt.NDArray[Any]]:
        """Copies of index columns up to the high-water row (call under the
        service lock; a memcpy, so the lock is held for milliseconds even with
        millions of objects, and the copies are read after releasing it)."""
        n = self.index.high_water_row
        return {name: self.index.cols[name][:n].copy() for name in names}


USAGE_COLUMNS = ("tier", "kind", "ns", "size", "seg", "flags")


def usage_by_namespace(
    cols: dict[str, npt.NDArray[Any]], max_namespaces: int
) -> npt.NDArray[np.int64]:
    """Array [tier, kind, slot, (objects, bytes)] counting copies like
    ``Catalog.usage``, per namespace, from ``Catalog.copy_columns(*USAGE_COLUMNS)``:
    slot = namespace id for ids 1..max_namespaces; max_namespaces + 1 sums all
    later namespaces, so the output stays bounded."""
    slots = max_namespaces + 2
    shape = (len(Tier) + 1, len(Kind) + 1, slots)
    live = (cols["flags"] & FLAG_LIVE) != 0
    kinds = cols["kind"].astype(np.intp)
    ns = np.minimum(cols["ns"].astype(np.intp), max_namespaces + 1)
    sizes = cols["size"].astype(np.float64)
    # Serving copies, plus the SSD copy of objects served from a memory tier.
    extra = live & (cols["seg"] != SEG_NONE) & (cols["tier"] != int(Tier.SSD))
    flat = np.concatenate(
        [
            (cols["tier"].astype(np.intp) * shape[1] + kinds) * slots + ns,
            (int(Tier.SSD) * shape[1] + kinds[extra]) * slots + ns[extra],
        ]
    )
    weight = np.concatenate([live.astype(np.float64), np.ones(int(extra.sum()))])
    n = int(np.prod(shape))
    out = np.zeros((*shape, 2), dtype=np.int64)
    out[..., 0] = np.bincount(flat, weights=weight, minlength=n).reshape(shape).round()
    nbytes = np.concatenate([sizes * weight[: len(sizes)], sizes[extra]])
    out[..., 1] = np.bincount(flat, weights=nbytes, minlength=n).reshape(shape).round()
    return out


__all__ = ["SEG_INLINE", "SEG_NONE", "Catalog", "Entry"]
