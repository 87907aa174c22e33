"""The hot blob cache: copies of often-read blob contents in the DRAM tier,
as ordinary objects of kind BLOB, so the placement policy governs them like
everything else in memory.

A cached copy is the object ``(namespace, BLOB, ".tiermem/blob-cache/<sha256>")``
with a CACHE profile: no SSD copy, never durable, dropped (or demoted) by the
planner when something else is worth its memory more. Because it lives in the
shared-memory arena, a client on the daemon's host reads it in place under a
data-plane lease, and the bulk channel sends it straight from the arena.

Admission (``wants``): the blob service counts reads per content with the
placement access model (a decayed rate, the same estimate the catalog keeps
per object). After ``cache_min_reads`` reads, a content of a cacheable size
is copied in when the planner's admission rule — ``Planner.admit`` for a BLOB
at that rate, asked as for a DURABLE object since the payload stays on SSD
and the copy is an extra one — puts it in DRAM; room is made only by
moving out residents worth less per byte (``PlacementService.make_room`` with
the newcomer's density), never by pushing out hotter data. A copy the planner
demoted to SSD is worth nothing (the payload is on SSD already): it is deleted
the next time it is looked up.

Usage: a copy holds no data its namespace does not hold already (the blob
counts there, once). The object catalog counts the copy as an object of the
namespace all the same, so the cache keeps a tally of its copies per
namespace (``copies``) — added when a fill commits, taken away when the store
removes the object however it goes (a drop, an eviction: ``_removed``, a
store removal observer, which also hears of objects an overwrite replaced)
— and the blob service's namespace usage is net of it. The copies' keys are
reserved: clients may read them, but a put or delete of one is refused
INVALID_ARGUMENT (an overwrite kept the old copy's bytes out of the usage). A
fill takes no quota admission: it adds no bytes to the namespace.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

import xxhash

from tiermem.server.catalog.catalog import Entry
from tiermem.server.config import BlobsConfig
from tiermem.server.errors import NotFound
from tiermem.server.model import Durability, Kind, ObjectKey, Profile, Tier, key_prefix
from tiermem.server.services.objects import RESERVED_PREFIX, ObjectRead, ObjectService, PutSpec

#: Copies' keys are reserved (``objects.check_client_key``): no client can put
#: or delete one, so the tally below sees every change to them.
PREFIX = RESERVED_PREFIX + "blob-cache/"
#: What follows the namespace and its NUL in the encoded catalog key of a copy.
_KEY_MARK = bytes((Kind.BLOB,)) + PREFIX.encode()
#: Contents whose read rates are tracked (least recently read forgotten first).
MAX_TRACKED = 65_536


def cache_key(namespace: str, sha256: bytes) -> ObjectKey:
    return ObjectKey(namespace, Kind.BLOB, PREFIX + sha256.hex())


class HotCache:
    def __init__(self, objects: ObjectService, config: BlobsConfig) -> None:
        self._objects = objects
        self._store = objects.store
        self._placement = objects.placement
        self._config = config
        self._access = objects.store.catalog.access
        self._reads: OrderedDict[tuple[str, bytes], tuple[float, float, int]] = OrderedDict()
        self._lock = threading.Lock()
        #: namespace -> {sha256: bytes} of the copies the catalog holds
        self._copies: dict[str, dict[bytes, int]] = {}
        #: namespace -> bytes of its copies (the sum of ``_copies[namespace]``)
        self._copy_bytes: dict[str, int] = {}
        self.enabled = config.cache_enabled and Tier.DRAM in self._store.memory
        self._store.removal_observers.append(self._removed)

    # -- the tally of copies (namespace usage is net of it) ------------------------------
    def copies(self, namespace: str) -> tuple[int, int]:
        """(copies, bytes) of blob contents ``namespace`` holds as cached copies,
        which the object catalog counts as its objects."""
        with self._lock:
            held = self._copies.get(namespace)
            return (len(held), self._copy_bytes[namespace]) if held else (0, 0)

    def _tally(self, namespace: str, sha256: bytes, size: int | None) -> None:
        """Note a copy of ``size`` bytes (None: forget it). Call with ``_lock``."""
        held = self._copies.setdefault(namespace, {})
        old = held.pop(sha256, 0)
        if size is not None:
            held[sha256] = size
        total = self._copy_bytes.get(namespace, 0) - old + (size or 0)
        if held:
            self._copy_bytes[namespace] = total
        else:
            del self._copies[namespace]
            self._copy_bytes.pop(namespace, None)

    def _removed(self, victims: list[tuple[bytes, Entry]]) -> None:
        """The store removed objects (called under its lock): forget the copies."""
        if not self._copies:
            return
        for encoded, _entry in victims:
            raw_namespace, _, rest = encoded.partition(b"\x00")
            if not rest.startswith(_KEY_MARK):
                continue
            try:
                sha256 = bytes.fromhex(rest[len(_KEY_MARK) :].decode())
            except ValueError:
                continue  # not a key the cache made
            namespace = raw_namespace.decode()
            with self._lock:
                if sha256 in self._copies.get(namespace, {}):
                    self._tally(namespace, sha256, None)

    def sweep(self, namespaces: list[str]) -> int:
        """Delete copies a previous run left (an SSD copy the planner demoted is
        worth nothing, and the tally starts empty); returns how many. At start-up."""
        catalog = self._store.catalog
        swept = 0
        for namespace in namespaces:
            scope = key_prefix(namespace, Kind.BLOB, PREFIX)
            for encoded, _record in list(catalog.scan_records(scope)):
                self._objects.delete(ObjectKey.decode(encoded), internal=True)
                swept += 1
        return swept

    @property
    def max_bytes(self) -> int:
        if not self.enabled:
            return 0
        dram = self._store.memory[Tier.DRAM].capacity_bytes
        return min(int(self._config.cache_max_bytes), dram // 2)

    def tier(self, namespace: str, sha256: bytes) -> Tier | None:
        """Where the content's copy is, None if there is none. Only a copy a fill
        made and the tally holds counts: an object that replaced it is none."""
        encoded = cache_key(namespace, sha256).encode()
        with self._store.lock:
            with self._lock:
                if sha256 not in self._copies.get(namespace, {}):
                    return None
            entry = self._store.catalog.find(encoded)
            return None if entry is None else entry.tier

    def open(self, namespace: str, sha256: bytes) -> ObjectRead | None:
        """The cached copy, read-leased (``release`` it), or None. Counts as a read
        for placement."""
        if not self.enabled:
            return None
        tier = self.tier(namespace, sha256)
        if tier is None:
            return None
        key = cache_key(namespace, sha256)
        if tier != Tier.DRAM:
            # demoted: an SSD copy of a payload already on SSD
            self._objects.delete(key, internal=True)
            return None
        try:
            reader = self._objects.read(key)
        except NotFound:
            return None
        if reader.tier != Tier.DRAM:
            reader.release()
            return None
        return reader

    def note_read(self, namespace: str, sha256: bytes) -> tuple[float, int]:
        """Count a read of a content; returns (decayed rate, reads counted)."""
        now = time.time()
        key = (namespace, sha256)
        with self._lock:
            rate, atime, count = self._reads.pop(key, (0.0, now, 0))
            entry = (self._access.record_one(rate, atime, now), now, count + 1)
            self._reads[key] = entry
            while len(self._reads) > MAX_TRACKED:
                self._reads.popitem(last=False)
        return entry[0], entry[2]

    def wants(self, size: int, rate: float, reads: int) -> float | None:
        """The density a content read ``reads`` times at ``rate`` would have in DRAM
        if the planner admits it there now, else None."""
        if not self.enabled or reads < self._config.cache_min_reads:
            return None
        if size < self._config.cache_min_bytes or size > self.max_bytes:
            return None
        # The payload stays on SSD: the DRAM copy is an extra copy of durable data,
        # so admission is asked as for a DURABLE object (floor SSD; the copy must
        # pay back its memory write within the horizon), not as a droppable CACHE
        # object whose floor would be a miss.
        admissions = self._placement.planner.admit(
            size, int(Kind.BLOB), rate, True, self._store.tier_states()
        )
        if not admissions or admissions[0].tier != int(Tier.DRAM):
            return None
        return float(admissions[0].displace_below)

    def fill(
        self, namespace: str, sha256: bytes, size: int, density: float,
        copy_into: Callable[[memoryview], None],
    ) -> bool:  # fmt: skip
        """Copy a content into DRAM (``copy_into`` fills the buffer with verified
        bytes). False when no room could be made for it."""
        engine = self._store.memory[Tier.DRAM]
        need = engine.used_bytes + engine.cost_of(size) - engine.capacity_bytes
        if need > 0:
            self._placement.make_room(Tier.DRAM, need, density)
        reservation = engine.reserve(size)
        if reservation is None:
            return False
        # preferred DRAM: admission (``wants``) already chose DRAM at the measured
        # read rate; without it the put's own admission (a COLD blob's learned
        # prior) would drop the copy right after its commit
        profile = Profile(durability=Durability.CACHE, preferred_tier=Tier.DRAM).resolved(Kind.BLOB)
        spec = PutSpec(cache_key(namespace, sha256), size, profile)
        try:
            copy_into(reservation.buffer)
            checksum = xxhash.xxh3_64_intdigest(reservation.buffer)
        except BaseException:
            engine.abort(reservation)
            raise
        # path "shm": the bytes were written into the shared-memory arena.
        # ``admitted``: the copy adds nothing to the namespace (the blob counts,
        # once), so it takes no quota admission, and a reader needs no WRITE role
        # for it; its memory is the reservation's, not the in-flight budget's.
        self._objects.commit_filled(spec, profile, reservation, checksum, path="shm", admitted=True)
        # Tallied under the store lock, as the removal observer runs: only while
        # the catalog still holds this copy (not removed, nor replaced by another
        # object, since the commit).
        encoded = spec.key.encode()
        with self._store.lock:
            entry = self._store.catalog.find(encoded)
            if entry is not None and entry.size == size and entry.checksum == checksum:
                with self._lock:
                    self._tally(namespace, sha256, size)
        return True

    def drop(self, namespace: str, sha256: bytes) -> None:
        """Forget a cached copy (its content is gone from the namespace)."""
        with self._lock:
            self._reads.pop((namespace, sha256), None)
        if self.enabled:
            self._objects.delete(cache_key(namespace, sha256), internal=True)

    def cached_bytes(self, namespaces: list[str]) -> int:
        """Bytes of blob copies in DRAM now (lists the cache keys: for stats only)."""
        if not self.enabled:
            return 0
        total = 0
        for ns in namespaces:
            token = ""
            while True:
                metas, token = self._objects.list(ns, Kind.BLOB, PREFIX, "", 1000, token)
                total += sum(m.size_bytes for m in metas if m.tier == Tier.DRAM)
                if not token:
                    break
        return total
