"""The object service: put, get, stat, delete and list of any kind of object.

Put is streamed: space is reserved in the admitted tier first and the bytes are
copied straight into it as chunks arrive, hashed on the way (xxh3-64). Nothing
becomes visible until the catalog commit; any failure before that returns the
space, so a rejected or broken upload stores nothing and changes nothing.

DURABLE objects get an SSD copy (fsynced when ``tiers.ssd.fsync``) and a synced
catalog record before the put returns, wherever else they are placed.
"""

from __future__ import annotations

import base64
import binascii
import builtins
import contextlib
import itertools
import logging
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import xxhash

from tiermem.server.catalog.catalog import Entry
from tiermem.server.catalog.index import SEG_INLINE, SEG_NONE
from tiermem.server.catalog.records import StoredRecord
from tiermem.server.errors import (
    AlreadyExists,
    CapacityExceeded,
    Corrupted,
    FailedPrecondition,
    InvalidArgument,
    InvariantViolation,
    NotFound,
    OutOfRange,
    PermissionDenied,
)
from tiermem.server.model import (
    Durability,
    Kind,
    ObjectKey,
    ObjectMeta,
    Profile,
    TensorInfo,
    Tier,
    key_prefix,
    validate_namespace,
    validate_session,
    validate_ttl,
)
from tiermem.server.protoconv import meta_from_proto, meta_to_proto
from tiermem.server.services.guard import Role, Ticket
from tiermem.server.services.mover import Mover
from tiermem.server.services.placement import PlacementService, Promotion
from tiermem.server.services.store import Store, ValueRead
from tiermem.server.tiers.base import Reservation
from tiermem.server.tiers.ssd import SsdCopy
from tiermem.v1 import common_pb2 as pb

log = logging.getLogger(__name__)

CHECKSUM_XXH3_64 = 1
CHECKSUM_CRC32 = 2
#: Most reads waiting to be counted (``Catalog.pending_touches``) before reads
#: take the store lock again (and count them): a bound on that queue's memory
#: when the lock is not taken for a while.
MAX_PENDING_TOUCHES = 8192
#: Keys of the daemon's own objects (the blob cache's copies, ``blobs/cache.py``):
#: clients may read them, never put or delete them.
RESERVED_PREFIX = ".tiermem/"


def check_client_key(key: ObjectKey) -> None:
    """Raise InvalidArgument if clients may not put or delete ``key``."""
    if key.key.startswith(RESERVED_PREFIX):
        raise InvalidArgument(
            f"object key {key.key!r} is reserved: keys beginning with {RESERVED_PREFIX!r} "
            "are the daemon's own objects (the blob cache's copies), which clients may "
            "read but not put or delete"
        )


def _group_totals(
    puts: Sequence[FilledPut], replaced: Sequence[int | None]
) -> dict[tuple[str, str], list[int]]:
    """Per (namespace, session) group of a batch of puts: [bytes put, bytes of
    the objects they replace, objects they add]; ``replaced[i]``: the size of
    the object put ``i`` replaces, None when it adds one."""
    groups: dict[tuple[str, str], list[int]] = {}
    for p, old_size in zip(puts, replaced, strict=True):
        g = groups.setdefault((p.spec.key.namespace, p.spec.session), [0, 0, 0])
        g[0] += p.spec.size_bytes
        g[1] += old_size or 0
        g[2] += 0 if old_size is not None else 1
    return groups


class _Contended(Exception):
    """An unlocked read met a queued promotion or an HBM copy: read under the lock."""


class _Busy(Exception):
    """An unlocked read met a writer (the lock taken, a location freed): try again."""


#: What ``_read_resident_unlocked`` did: read everything; met the lock held (or
#: taken meanwhile: worth another try once it is free); must read under the lock.
_READ, _BUSY, _LOCK = 0, 1, 2
#: How long an unlocked read that met the lock held waits for it to be free
#: before it reads under it (seconds): most holds are far shorter, and a reader
#: queued for the lock waits behind every writer queued before it.
UNLOCKED_READ_WAIT_S = 0.002
#: Unlocked tries of a read after its first met the lock held.
UNLOCKED_READ_RETRIES = 2


@dataclass(slots=True)
class PutSpec:
    """What a client announces before the bytes of a put."""

    key: ObjectKey
    size_bytes: int
    profile: Profile
    tensor: TensorInfo | None = None
    session: str = ""
    checksum: tuple[int, int] | None = None  # (algorithm, value)
    if_absent: bool = False
    caller: str = ""  # the session the client acts as ("" = a trusted tool)
    #: Codec the bytes are already encoded with ("" = raw). With a codec,
    #: ``tensor`` describes the decoded value, so its size is not checked here.
    codec: str = ""


@dataclass(slots=True)
class StagedPut:
    """A put whose space is reserved (``ObjectService.stage``) and, after
    ``receive``, filled and verified, but not yet visible. It must end in
    ``finish`` (commit) or ``abort`` (space returned, nothing changed)."""

    spec: PutSpec
    profile: Profile
    reservation: Reservation
    checksum: int | None = None


@dataclass(slots=True)
class ObjectRead:
    """An object being read: its metadata and a view of the requested range.
    ``release`` must be called once the view is no longer used.

    The metadata arrives as its wire message (``wire``, the catalog record's
    own, with the live fields set); the domain ``meta`` is converted from it
    only when asked for, since most replies send ``wire`` as it is."""

    #: the metadata as a message; replies reuse it as is: not to be modified
    wire: pb.ObjectMeta
    view: memoryview
    _value: ValueRead
    tier: Tier = Tier.SSD
    #: Engine location of the whole value's serving copy when it is in memory
    #: (DRAM: >= 0 is an arena offset), else -1. Valid until ``release``.
    location: int = -1
    #: set when the planner wants the object moved up: done from the bytes just
    #: read when the reader releases them (no second read of the slow copy)
    _promote: Callable[[], object] | None = None
    #: the guard's admission of this read (in-flight limits), ended by ``release``
    #: (a share of one admission when the read was opened by ``read_many``)
    ticket: Ticket | SharedAdmission | None = None
    _meta: ObjectMeta | None = None

    @property
    def meta(self) -> ObjectMeta:
        """The object's metadata (converted from ``wire`` on first use)."""
        if self._meta is None:
            self._meta = meta_from_proto(self.wire)
        return self._meta

    @property
    def size_bytes(self) -> int:
        """The whole object's size (not the view's, for a range read)."""
        return int(self.wire.size_bytes)

    def release(self) -> None:
        try:
            if self._promote is not None:
                self._promote()
        finally:
            self._value.release()
            if self.ticket is not None:
                self.ticket.release()

    def chunks(self, chunk_bytes: int) -> Iterator[bytes]:
        """The range as ``bytes`` chunks (copies, so the lease can end early)."""
        view = self.view
        for start in range(0, len(view), chunk_bytes):
            yield bytes(view[start : start + chunk_bytes])


@dataclass(slots=True)
class FilledPut:
    """A reservation filled with a put's bytes and verified (``checksum`` is the
    xxh3-64 of the buffer), ready for ``ObjectService.commit_filled_many``."""

    spec: PutSpec
    profile: Profile
    reservation: Reservation
    checksum: int


class SharedAdmission:
    """One guard admission shared by the readers ``read_many`` opened in one
    namespace: the admission ends when the last of them is released."""

    def __init__(self, ticket: Ticket, holders: int) -> None:
        self._ticket = ticket
        self._left = holders
        self._lock = threading.Lock()

    def release(self) -> None:
        with self._lock:
            self._left -= 1
            last = self._left == 0
        if last:
            self._ticket.release()

    def end(self) -> None:
        """End the admission now (its readers were never handed out)."""
        self._ticket.release()


class ObjectGuard(Protocol):
    """Extension point: who may put, read or delete what (the session service
    installs one to enforce isolation and per-session quotas). ``check_put`` is
    called with the store lock held; ``check_access`` and ``renew`` may be
    called with or without it (reads of objects in memory), so they must not
    take the store lock. Both checks refuse by raising a TiermemError; a
    refused put has stored nothing."""

    def check_put(
        self, spec: PutSpec, tier: Tier, replaced: Entry | None, replaced_owner: str
    ) -> None:
        """A put of ``spec`` admitted to ``tier``, replacing ``replaced`` if set."""
        ...

    def check_access(self, meta: ObjectMeta, caller: str, write: bool) -> None:
        """A caller acting as session ``caller`` (never "") reads or deletes ``meta``."""
        ...

    def renew(self, caller: str) -> None:
        """A call made as session ``caller`` (never "") renews its lease, whatever
        it finds: every such call does, also one that checks no object (all
        missing, or all the caller's own). Refuses nothing."""
        ...


class OpenAccess:
    """The default guard: every put and access is allowed."""

    def check_put(
        self, spec: PutSpec, tier: Tier, replaced: Entry | None, replaced_owner: str
    ) -> None:
        return None

    def check_access(self, meta: ObjectMeta, caller: str, write: bool) -> None:
        return None

    def renew(self, caller: str) -> None:
        return None


class ObjectService:
    def __init__(self, store: Store, mover: Mover, placement: PlacementService) -> None:
        self.store = store
        self.mover = mover
        self.placement = placement
        self.catalog = store.catalog
        #: Put/access checks (see ObjectGuard); replaced by the session service.
        self.guard: ObjectGuard = OpenAccess()
        #: Called after every committed put (outside the lock); the remote service
        #: publishes shared kinds from it.
        self.on_commit: Callable[[ObjectMeta], None] | None = None
        #: Called under the lock with the keys of objects a put replaced whose old
        #: version has a remote copy (the remote service deletes it unless the new
        #: version is published over it).
        self.on_remote_replaced: Callable[[list[bytes]], None] | None = None

    @property
    def pressure(self) -> threading.Event:
        """Set when a put pushed a tier above its high watermark (wakes the migrator)."""
        return self.placement.wake

    # -- put ----------------------------------------------------------------------
    def validate(self, spec: PutSpec) -> Entry | None:
        """Check a put before any byte arrives; returns the entry it would replace."""
        self._check_fields(spec)
        self.store.guard.authorize(spec.key.namespace, Role.WRITE)
        with self.store.lock:
            self.catalog.namespace_id(spec.key.namespace)
            old = self.catalog.find(spec.key.encode())
            if spec.if_absent and old is not None:
                raise AlreadyExists(f"object {spec.key} exists (if_absent was set)")
        return old

    def _check_fields(self, spec: PutSpec) -> None:
        """The checks of a put that need neither the catalog nor the caller."""
        check_client_key(spec.key)
        limit = self.store.config.limits.max_object_bytes
        if spec.size_bytes > limit:
            raise CapacityExceeded(
                f"object is {spec.size_bytes} bytes; the limit is {limit} (limits.max_object_bytes)"
            )
        kv_limit = self.store.config.kv.max_block_bytes
        if spec.key.kind == Kind.KV_BLOCK and spec.size_bytes > kv_limit and not spec.codec:
            # KV blocks put as objects (the clients' fast paths) keep PutBlocks' limit
            raise CapacityExceeded(
                f"KV block is {spec.size_bytes} bytes; the limit is {kv_limit} (kv.max_block_bytes)"
            )
        if spec.tensor is not None and not spec.codec:
            spec.tensor.checked(spec.size_bytes)
        validate_session(spec.session)
        validate_session(spec.caller)
        validate_ttl(spec.profile.ttl_s, "profile.ttl_s")
        if spec.caller and not spec.session:
            spec.session = spec.caller  # what a session puts, it owns
        if spec.profile.preferred_tier == Tier.REMOTE:
            raise InvalidArgument("preferred_tier REMOTE is not available on this daemon")
        if spec.checksum is not None and spec.checksum[0] not in (CHECKSUM_XXH3_64, CHECKSUM_CRC32):
            raise InvalidArgument(f"unknown checksum algorithm {spec.checksum[0]}")

    def prepare(self, spec: PutSpec) -> Profile:
        """Validate an announced put; returns its resolved profile. Raises on bad input."""
        self.validate(spec)
        return self._profile_of(spec)

    def prepare_many(self, specs: Sequence[PutSpec]) -> list[Profile]:
        """``prepare`` for a batch: the caller is authorized once per namespace and
        the catalog is consulted under one hold of the lock."""
        for spec in specs:
            self._check_fields(spec)
        for namespace in dict.fromkeys(spec.key.namespace for spec in specs):
            self.store.guard.authorize(namespace, Role.WRITE)
        index = self.catalog.index
        with self.store.lock:
            for spec in specs:
                self.catalog.namespace_id(spec.key.namespace)
                if spec.if_absent and index.find(spec.key.encode()) is not None:
                    raise AlreadyExists(f"object {spec.key} exists (if_absent was set)")
        return [self._profile_of(spec) for spec in specs]

    def _profile_of(self, spec: PutSpec) -> Profile:
        profile = spec.profile.resolved(spec.key.kind)
        if profile.durability == Durability.DURABLE and not self.store.config.tiers.ssd.enabled:
            raise FailedPrecondition("DURABLE objects need the SSD tier, which is disabled")
        return profile

    def admit_put(self, spec: PutSpec) -> Ticket:
        """Admit a put under the namespace's quotas and in-flight limits (see
        services/guard.py); ``release()`` the ticket when the put is done."""
        with self.store.lock:
            old = self.catalog.find(spec.key.encode())
        return self.store.guard.admit(
            spec.key.namespace,
            Role.WRITE,
            put_bytes=spec.size_bytes,
            replaced_bytes=old.size if old is not None else 0,
            new_objects=0 if old is not None else 1,
            session=spec.session,
        )

    def put(self, spec: PutSpec, chunks: Iterable[bytes | memoryview]) -> ObjectMeta:
        """Store an object from its byte chunks; returns its metadata once committed.

        Durability on return: a DURABLE object (and a put that replaced one) is on
        stable storage when ``tiers.ssd.fsync`` is set: segment bytes fdatasynced,
        catalog WAL synced. A CACHE object survives a process crash only if it
        was written to SSD; see docs/reliability.md."""
        profile = self.prepare(spec)
        with self.admit_put(spec) as ticket:
            reservation = self.reserve(spec.size_bytes, profile, spec.key.kind)
            try:
                checksum = self.receive_into(spec, chunks, reservation.buffer)
            except BaseException:
                self.abort(reservation)
                raise
            return self.commit_filled(spec, profile, reservation, checksum, ticket=ticket)

    def commit_filled(
        self,
        spec: PutSpec,
        profile: Profile,
        reservation: Reservation,
        checksum: int,
        path: str = "grpc",
        *,
        sync: bool = True,
        publish: bool = True,
        admitted: bool = False,
        owed_sync: list[bool] | None = None,
        ticket: Ticket | None = None,
    ) -> ObjectMeta:
        """Make a filled reservation visible exactly like a put: SSD copy when the
        object is DURABLE or admitted to SSD, engine commit, catalog commit, then
        (DURABLE, or replacing a DURABLE object, unless ``sync`` is False: the
        caller calls ``sync()`` once for a batch, and ``owed_sync`` gets True
        appended when it must) the WAL sync. ``checksum`` is the xxh3-64 of the buffer, already
        checked against the client's (``check_upload``). Consumes the reservation:
        on failure its space is returned and nothing stored changes. ``path``
        labels the bytes metric (grpc, shm, bulk, remote). ``publish``: tell
        ``on_commit`` (False for values that came from the remote tier).
        ``admitted``: the caller holds the guard's admission for this put (else it
        is admitted here, so quotas hold on every path); ``ticket``: that
        admission, which the commit checks again (``Guard.readmit``: the object
        it replaces may have been deleted meanwhile). A ticket implies
        ``admitted``."""
        if not admitted and ticket is None:
            try:
                ticket = self.admit_put(spec)
            except BaseException:
                self.abort(reservation)
                raise
            with ticket:
                return self.commit_filled(
                    spec,
                    profile,
                    reservation,
                    checksum,
                    path,
                    sync=sync,
                    publish=publish,
                    owed_sync=owed_sync,
                    ticket=ticket,
                )
        durable = profile.durability == Durability.DURABLE
        encoded = spec.key.encode()
        ssd_copy: SsdCopy | None = None
        location: int | None = None
        try:
            if reservation.tier == Tier.SSD or durable:
                ssd_copy = self._write_ssd(encoded, reservation.buffer, checksum, durable)
                self.store.faults.point("put.after_ssd_write")
            if reservation.tier in self.store.memory:
                location = self.store.memory[reservation.tier].commit(reservation)
            meta, replaced_durable = self._commit(
                spec, profile, encoded, checksum, reservation, location, ssd_copy, ticket
            )
        except BaseException:
            if location is not None:  # freed once no reader holds it (``abort``)
                self.store.leases.free(reservation.tier, location, reservation.size)
            else:
                self.abort(reservation)
            if ssd_copy is not None:
                self.store.ssd.discard(encoded, ssd_copy)
            raise
        self.store.faults.point("put.after_commit")
        if durable or replaced_durable:
            if sync:
                self.sync()
            elif owed_sync is not None:
                owed_sync.append(True)
        self.placement.after_put(encoded, profile, reservation.recheck)
        self.store.metrics.child(self.store.metrics.data_bytes, path, "in").inc(spec.size_bytes)
        if publish and self.on_commit is not None:
            self.on_commit(meta)
        return meta

    def commit_filled_many(
        self,
        puts: Sequence[FilledPut],
        path: str,
        *,
        publish: bool = True,
        wires: list[pb.ObjectMeta] | None = None,
    ) -> list[ObjectMeta]:
        """Commit a batch of filled reservations, each exactly as ``commit_filled``
        would, as one unit: the guard admits each (namespace, session) group once,
        every catalog change goes into ONE RocksDB write batch under ONE hold of the
        store lock, and DURABLE puts are synced once. All or none: a refusal
        anywhere (quota, ``if_absent``, a session's check) aborts the whole batch
        and nothing stored changes. Consumes every reservation either way.

        A batch naming one key twice is committed one object after another (the
        later put replaces the earlier), as separate ``commit_filled`` calls.
        ``publish``: as for ``commit_filled``. ``wires``: if given, receives each
        committed object's metadata as its message (what its record holds), for
        replies."""
        encoded = [p.spec.key.encode() for p in puts]
        if len(set(encoded)) != len(encoded):
            metas = self._commit_one_by_one(puts, path, publish)
            if wires is not None:
                wires.extend(meta_to_proto(m) for m in metas)
            return metas
        try:
            admissions = self._admit_puts(puts, encoded)
        except BaseException:
            for p in puts:
                self.abort(p.reservation)
            raise
        with contextlib.ExitStack() as held:
            for ticket in admissions.values():
                held.enter_context(ticket)
            return self._commit_admitted(puts, encoded, admissions, path, publish, wires)

    def _commit_one_by_one(
        self, puts: Sequence[FilledPut], path: str, publish: bool
    ) -> list[ObjectMeta]:
        metas: list[ObjectMeta] = []
        for i, p in enumerate(puts):
            try:
                metas.append(
                    self.commit_filled(
                        p.spec, p.profile, p.reservation, p.checksum, path=path, publish=publish
                    )
                )
            except BaseException:
                for later in puts[i + 1 :]:
                    self.abort(later.reservation)
                raise
        return metas

    def _admit_puts(
        self, puts: Sequence[FilledPut], encoded: Sequence[bytes]
    ) -> dict[tuple[str, str], Ticket]:
        """One guard admission per (namespace, session) group of a batch of puts."""
        index = self.catalog.index
        with self.store.lock:
            sizes = index.cols["size"]
            rows = [index.find(enc) for enc in encoded]
            groups = _group_totals(
                puts, [int(sizes[row]) if row is not None else None for row in rows]
            )
        tickets: dict[tuple[str, str], Ticket] = {}
        try:
            for (namespace, session), (put_bytes, replaced, new) in groups.items():
                tickets[(namespace, session)] = self.store.guard.admit(
                    namespace,
                    Role.WRITE,
                    put_bytes=put_bytes,
                    replaced_bytes=replaced,
                    new_objects=new,
                    session=session,
                )
        except BaseException:
            for ticket in tickets.values():
                ticket.release()
            raise
        return tickets

    def _commit_admitted(
        self,
        puts: Sequence[FilledPut],
        encoded: Sequence[bytes],
        admissions: dict[tuple[str, str], Ticket],
        path: str,
        publish: bool,
        wires: list[pb.ObjectMeta] | None = None,
    ) -> list[ObjectMeta]:
        n = len(puts)
        ssd_copies: list[SsdCopy | None] = [None] * n
        locations: list[int | None] = [None] * n
        memory = self.store.memory
        try:
            for i, p in enumerate(puts):
                durable = p.profile.durability == Durability.DURABLE
                if p.reservation.tier == Tier.SSD or durable:
                    ssd_copies[i] = self._write_ssd(
                        encoded[i], p.reservation.buffer, p.checksum, durable
                    )
            if any(c is not None for c in ssd_copies):
                self.store.faults.point("put.after_ssd_write")
            for i, p in enumerate(puts):
                if p.reservation.tier in memory:
                    locations[i] = memory[p.reservation.tier].commit(p.reservation)
            metas, staged, replaced_durable = self._commit_batch(
                puts, encoded, locations, ssd_copies, admissions
            )
        except BaseException:
            for i, p in enumerate(puts):
                loc = locations[i]
                if loc is not None:  # freed once no reader holds it (``abort``)
                    self.store.leases.free(p.reservation.tier, loc, p.reservation.size)
                else:
                    self.abort(p.reservation)
                copy = ssd_copies[i]
                if copy is not None:
                    self.store.ssd.discard(encoded[i], copy)
            raise
        self.store.faults.point("put.after_commit")
        if replaced_durable or any(p.profile.durability == Durability.DURABLE for p in puts):
            self.sync()
        self.placement.after_puts(
            [(enc, p.profile, p.reservation.recheck) for p, enc in zip(puts, encoded, strict=True)]
        )
        self.store.metrics.child(self.store.metrics.data_bytes, path, "in").inc(
            sum(p.spec.size_bytes for p in puts)
        )
        if publish and self.on_commit is not None:
            for meta in metas:
                self.on_commit(meta)
        if wires is not None:
            wires.extend(staged)
        return metas

    def _commit_batch(
        self,
        puts: Sequence[FilledPut],
        encoded: Sequence[bytes],
        locations: Sequence[int | None],
        ssd_copies: Sequence[SsdCopy | None],
        admissions: dict[tuple[str, str], Ticket],
    ) -> tuple[list[ObjectMeta], list[pb.ObjectMeta], bool]:
        """``_commit`` of a whole batch: checks first, then one write batch.
        Returns the metas, the same as the messages their records hold, and
        whether a DURABLE object was replaced."""
        now_ms = int(time.time() * 1000)
        store, catalog = self.store, self.catalog
        metas: list[ObjectMeta] = []
        for p, copy in zip(puts, ssd_copies, strict=True):
            spec, profile = p.spec, p.profile
            metas.append(
                _new_meta(spec, profile, p.checksum, p.reservation.tier, copy is not None, now_ms)
            )
        replaced_durable = False
        with store.lock:
            olds: list[tuple[Entry | None, str, int]] = []
            for p, enc in zip(puts, encoded, strict=True):
                old = catalog.find(enc)
                if old is not None and p.spec.if_absent:
                    raise AlreadyExists(f"object {p.spec.key} exists (if_absent was set)")
                old_session, old_version = catalog.replaced(enc, old)
                self.guard.check_put(p.spec, p.reservation.tier, old, old_session)
                olds.append((old, old_session, old_version))
            # what each group adds as found now, against what it was admitted for
            found = _group_totals(puts, [old.size if old is not None else None for old, *_ in olds])
            for group, (put_bytes, replaced, new) in found.items():
                store.guard.readmit(
                    admissions[group], put_bytes=put_bytes, replaced_bytes=replaced, new_objects=new
                )
            batch = catalog.rocks.batch()
            staged: list[pb.ObjectMeta] = []
            released: list[tuple[bytes, int, int]] = []  # counted once committed
            for i, (old, old_session, old_version) in enumerate(olds):
                copy = ssd_copies[i]
                seg = copy.segment if copy is not None else SEG_NONE
                if old is not None:
                    metas[i].version = old_version + 1
                    catalog.stage_removal(batch, encoded[i], old_session, old.expires_ms)
                    if old.persisted:
                        replaced_inline = old.seg == SEG_INLINE and seg == SEG_INLINE
                        store.ssd.stage_release(
                            encoded[i], old.seg, None if replaced_inline else batch
                        )
                        released.append((encoded[i], old.seg, old.size))
                staged.append(
                    catalog.stage_record(
                        batch, encoded[i], metas[i], seg, copy.offset if copy is not None else 0
                    )
                )
                if copy is not None:
                    store.ssd.stage(copy, encoded[i], batch)
            batch.commit(sync=False)
            for key, old_seg, old_size in released:
                store.ssd.count_release(key, old_seg, old_size)
            gone: list[tuple[bytes, Entry]] = []
            for i, (old, _session, _version) in enumerate(olds):
                copy = ssd_copies[i]
                loc = locations[i]
                catalog.set_row(
                    encoded[i],
                    metas[i],
                    tier=puts[i].reservation.tier,
                    loc=loc if loc is not None else -1,
                    seg=copy.segment if copy is not None else SEG_NONE,
                    seg_off=copy.offset if copy is not None else 0,
                )
                if old is not None:
                    replaced_durable = replaced_durable or old.durable
                    store.damage.discard(encoded[i])
                    if old.tier in store.memory:
                        store.leases.free(old.tier, old.loc, old.size)
                    gone.append((encoded[i], old))
            if gone:
                for observe in store.removal_observers:  # the replaced objects are gone
                    observe(gone)
            remote = [
                enc
                for enc, (old, _s, _v) in zip(encoded, olds, strict=True)
                if old is not None and old.remote_copy
            ]
            if remote and self.on_remote_replaced is not None:
                self.on_remote_replaced(remote)
        return metas, staged, replaced_durable

    def sync(self) -> None:
        """Make committed DURABLE puts durable: sync the catalog WAL (group commit)."""
        if self.store.config.tiers.ssd.fsync:
            self.store.catalog.rocks.flush()

    # -- staged puts: batches that must be received whole before any commit (KV) --------
    def stage(self, spec: PutSpec) -> StagedPut:
        """Validate a put and reserve its space in the admitted tier."""
        profile = self.prepare(spec)
        return StagedPut(spec, profile, self.reserve(spec.size_bytes, profile, spec.key.kind))

    def receive(self, staged: StagedPut, chunks: Iterable[bytes | memoryview]) -> None:
        """Copy the value's bytes into the reservation, hashing and verifying them."""
        staged.checksum = self.receive_into(staged.spec, chunks, staged.reservation.buffer)

    def finish(self, staged: StagedPut, owed_sync: list[bool]) -> ObjectMeta:
        """Commit a received put (see ``commit_filled``). A put that is DURABLE,
        or replaces a DURABLE object, appends True to ``owed_sync``: it is
        acknowledged only after the caller's ``sync()``."""
        if staged.checksum is None:
            raise InvariantViolation(f"finish of {staged.spec.key} before its bytes arrived")
        return self.commit_filled(
            staged.spec,
            staged.profile,
            staged.reservation,
            staged.checksum,
            sync=False,
            owed_sync=owed_sync,
        )

    def abort_staged(self, staged: StagedPut) -> None:
        """Give back a staged put's space; nothing stored changes."""
        self.abort(staged.reservation)

    def abort(self, reservation: Reservation) -> None:
        """Return an unused reservation's space (when a reader has it pinned, e.g.
        a remote block adopted while its lease runs, once that reader lets go)."""
        tier = reservation.tier
        if tier not in self.store.memory:
            return
        leases = self.store.leases
        # only a staged arena extent is ever pinned before it is committed (a
        # small value's or an HBM reservation's ``abort`` also undoes more)
        location = reservation.location
        if tier == Tier.DRAM and location >= 0 and leases.is_leased(tier, location):
            leases.free(tier, location, reservation.size)
        else:
            self.store.memory[tier].abort(reservation)

    def first_tier(self, size: int, profile: Profile, kind: Kind) -> Tier | None:
        """The tier admission would try first for a new value (None: no tier can hold it)."""
        return self.placement.first_tier(size, profile, kind)

    def first_tiers(self, wanted: Sequence[tuple[int, Profile, Kind]]) -> list[Tier | None]:
        """``first_tier`` for each ``(size, profile, kind)`` of a batch (asked once per shape)."""
        return self.placement.first_tiers(wanted)

    def reserve_many(self, wanted: Sequence[tuple[int, Profile, Kind]]) -> list[Reservation]:
        """``reserve`` for each ``(size, profile, kind)`` of a batch, all or none
        (``PlacementService.reserve_many``)."""
        return self.placement.reserve_many(wanted)

    def reserve(
        self, size: int, profile: Profile, kind: Kind, only: Tier | None = None
    ) -> Reservation:
        """Space for a new value in the tier the planner admits it to (or in
        ``only``), making room when a memory tier is full. Raises CapacityExceeded."""
        if only is not None:
            return self.placement.reserve_in(only, size, profile)
        return self.placement.reserve(size, profile, kind)

    def receive_into(
        self, spec: PutSpec, chunks: Iterable[bytes | memoryview], buffer: memoryview
    ) -> int:
        """Copy exactly ``spec.size_bytes`` from ``chunks`` into ``buffer``; returns
        the xxh3-64 of the bytes. Raises InvalidArgument on a short or long stream
        and Corrupted if ``spec.checksum`` does not match."""
        size = spec.size_bytes
        hasher = xxhash.xxh3_64()
        crc = 0
        want_crc = spec.checksum is not None and spec.checksum[0] == CHECKSUM_CRC32
        pos = 0
        check_deadline = self.store.guard.check_deadline
        for chunk in chunks:
            check_deadline("the put stream")
            n = len(chunk)
            if pos + n > size:
                raise InvalidArgument(
                    f"chunk stream is longer than the announced size_bytes={size} "
                    f"(at least {pos + n} bytes sent)"
                )
            buffer[pos : pos + n] = chunk
            hasher.update(chunk)
            if want_crc:
                crc = zlib.crc32(chunk, crc)
            pos += n
        if pos != size:
            raise InvalidArgument(f"chunk stream ended after {pos} of {size} announced bytes")
        checksum = hasher.intdigest()
        self.check_upload(spec, checksum, crc)
        return checksum

    @staticmethod
    def upload_crc(spec: PutSpec) -> bool:
        """Whether the client announced a CRC-32 (the receiver must compute one)."""
        return spec.checksum is not None and spec.checksum[0] == CHECKSUM_CRC32

    def check_upload(self, spec: PutSpec, xxh3: int, crc32: int | None = None) -> None:
        """Raise Corrupted (DATA_LOSS) unless the received bytes match the checksum
        the client announced. ``crc32`` (of the same bytes) must be given when the
        client announced a CRC-32; ``upload_crc`` tells whether it did."""
        if spec.checksum is None:
            return
        algorithm, expected = spec.checksum
        actual = crc32 if algorithm == CHECKSUM_CRC32 else xxh3
        if actual is None:
            raise InvariantViolation("a CRC-32 upload was checked without its CRC")
        if actual != expected:
            self.store.metrics.checksum_failures.labels("upload").inc()
            raise Corrupted(
                f"checksum mismatch on upload of {spec.key}: client sent {expected:x}, "
                f"received bytes hash to {actual:x}; nothing was stored"
            )

    def _write_ssd(self, encoded: bytes, data: memoryview, checksum: int, durable: bool) -> SsdCopy:
        ssd = self.store.ssd
        if not ssd.fits(len(data)):
            self.placement.free_ssd(len(data))
        return ssd.write(encoded, data, checksum, durable=durable)

    def _commit(
        self,
        spec: PutSpec,
        profile: Profile,
        encoded: bytes,
        checksum: int,
        reservation: Reservation,
        location: int | None,
        ssd_copy: SsdCopy | None,
        ticket: Ticket | None,
    ) -> tuple[ObjectMeta, bool]:
        """Make the object visible; returns its metadata and whether it replaced a
        DURABLE object (whose removal must then be synced too). ``ticket``: the
        put's admission, checked again against what it replaces now."""
        now_ms = int(time.time() * 1000)
        meta = _new_meta(spec, profile, checksum, reservation.tier, ssd_copy is not None, now_ms)
        seg = ssd_copy.segment if ssd_copy is not None else SEG_NONE
        seg_off = ssd_copy.offset if ssd_copy is not None else 0
        store, catalog = self.store, self.catalog
        with store.lock:
            old = catalog.find(encoded)
            if old is not None and spec.if_absent:
                raise AlreadyExists(f"object {spec.key} exists (if_absent was set)")
            old_session, old_version = catalog.replaced(encoded, old)
            self.guard.check_put(spec, reservation.tier, old, old_session)
            if ticket is not None:
                store.guard.readmit(
                    ticket,
                    put_bytes=spec.size_bytes,
                    replaced_bytes=old.size if old is not None else 0,
                    new_objects=0 if old is not None else 1,
                )
            batch = catalog.rocks.batch()
            if old is not None:
                meta.version = old_version + 1
                catalog.stage_removal(batch, encoded, old_session, old.expires_ms)
                if old.persisted:
                    replaced_inline = old.seg == SEG_INLINE and seg == SEG_INLINE
                    store.ssd.stage_release(encoded, old.seg, None if replaced_inline else batch)
            catalog.stage_record(batch, encoded, meta, seg, seg_off)
            if ssd_copy is not None:
                store.ssd.stage(ssd_copy, encoded, batch)
            batch.commit(sync=False)
            if old is not None and old.persisted:  # counted once the batch is in
                store.ssd.count_release(encoded, old.seg, old.size)
            catalog.set_row(
                encoded,
                meta,
                tier=reservation.tier,
                loc=location if location is not None else -1,
                seg=seg,
                seg_off=seg_off,
            )
            if old is not None:
                store.damage.discard(encoded)
                if old.tier in store.memory:
                    store.leases.free(old.tier, old.loc, old.size)
                if old.remote_copy and self.on_remote_replaced is not None:
                    self.on_remote_replaced([encoded])
                for observe in store.removal_observers:  # the replaced object is gone
                    observe([(encoded, old)])
        return meta, old is not None and old.durable

    # -- get / stat ---------------------------------------------------------------------
    def read(
        self, key: ObjectKey, offset: int = 0, length: int = 0, caller: str = ""
    ) -> ObjectRead:
        """Open an object for reading ``[offset, offset+length)`` (length 0 = to the end).
        The caller must ``release()`` the result."""
        ticket = self.store.guard.admit(key.namespace, Role.READ)
        try:
            reader = self._read(key, offset, length, caller)
        except BaseException:
            ticket.release()
            raise
        reader.ticket = ticket
        return reader

    def read_many(self, keys: Sequence[ObjectKey], caller: str = "") -> list[ObjectRead]:
        """Open whole objects for reading, each exactly as ``read`` would, with one
        guard admission per namespace (shared by its readers, ended by the last
        ``release``) and one hold of the store lock for every object served from
        memory; objects on SSD or in the remote tier are then read one by one.
        All or none: on error every reader opened so far is released. The caller
        must ``release()`` each reader."""
        guard = self.store.guard
        per_ns: dict[str, int] = {}  # (a Counter costs several times a dict here)
        for k in keys:
            per_ns[k.namespace] = per_ns.get(k.namespace, 0) + 1
        admissions: dict[str, SharedAdmission] = {}
        try:
            for namespace, holders in per_ns.items():
                admissions[namespace] = SharedAdmission(guard.admit(namespace, Role.READ), holders)
        except BaseException:
            for shared in admissions.values():
                shared.end()
            raise
        readers: list[ObjectRead | None] = [None] * len(keys)
        try:
            self._read_resident(keys, caller, readers)
            for i, key in enumerate(keys):
                if readers[i] is None:
                    readers[i] = self._read(key, 0, 0, caller)
        except BaseException:
            for reader in readers:
                if reader is not None:
                    reader.release()
            for shared in admissions.values():
                shared.end()
            raise
        out: list[ObjectRead] = []
        for key, reader in zip(keys, readers, strict=True):
            if reader is None:
                raise InvariantViolation(f"read_many left {key} unopened")
            reader.ticket = admissions[key.namespace]
            out.append(reader)
        return out

    def _read_resident(
        self, keys: Sequence[ObjectKey], caller: str, readers: list[ObjectRead | None]
    ) -> None:
        """Open the objects of ``keys`` served from a memory tier under one hold of
        the lock (``readers[i]`` set for those; the rest are left None). The
        index is searched and its rows read and touched for all keys at once."""
        store, catalog, memory = self.store, self.catalog, self.store.memory
        encoded = [key.encode() for key in keys]
        served: dict[tuple[str, str], int] = {}
        how = self._read_resident_unlocked(keys, encoded, caller, readers, served)
        tries = UNLOCKED_READ_RETRIES
        while how == _BUSY and tries and store.lock.wait_free(UNLOCKED_READ_WAIT_S) is not None:
            tries -= 1
            how = self._read_resident_unlocked(keys, encoded, caller, readers, served)
        if how == _READ:
            self._count_served(served)
            return
        found: list[tuple[int, Entry, pb.ObjectMeta, ObjectMeta | None]] = []
        with store.lock:
            entries = catalog.find_all(encoded)
            for i, entry in enumerate(entries):
                if entry is None or entry.tier not in memory:
                    continue
                wire = catalog.wire(encoded[i], entry)
                meta = None  # converted only if a check needs it
                if caller:
                    meta = meta_from_proto(wire)
                    self.guard.check_access(meta, caller, write=False)
                found.append((i, entry, wire, meta))
            # every check passed: count the reads, then lease the values
            catalog.touch_many([f[1].row for f in found], [encoded[f[0]] for f in found])
            for i, entry, wire, meta in found:
                promotion = self.placement.take_promotion(encoded[i])
                value = store.lease_memory(entry)
                promote = (
                    None
                    if promotion is None
                    else self._promoter(encoded[i], entry, value, promotion)
                )
                readers[i] = ObjectRead(
                    wire,
                    value.view[: entry.size],
                    value,
                    entry.tier,
                    entry.loc,
                    promote,
                    _meta=meta,
                )
                label = (keys[i].kind.name, entry.tier.name)
                served[label] = served.get(label, 0) + 1
        self._count_served(served)

    def _read_resident_unlocked(
        self,
        keys: Sequence[ObjectKey],
        encoded: list[bytes],
        caller: str,
        readers: list[ObjectRead | None],
        served: dict[tuple[str, str], int],
    ) -> int:
        """``_read_resident`` without taking the store lock (see ``StoreLock``):
        find and lease the objects, then check that nobody took the lock
        meanwhile. ``_READ``: done (reads counted through ``touch_later``).
        Otherwise nothing is done: ``_BUSY``, the lock was or became held (try
        again once it is free); ``_LOCK``, a read has a queued promotion or is
        on HBM, a check failed, or too many reads wait to be counted (read
        under the lock)."""
        store, catalog, memory = self.store, self.catalog, self.store.memory
        if len(catalog.pending_touches) >= MAX_PENDING_TOUCHES:
            return _LOCK
        version = store.lock.free_version()
        if version is None:
            return _BUSY
        promotions = self.placement.promotions
        found: list[tuple[int, Entry, pb.ObjectMeta, ObjectMeta | None, ValueRead]] = []
        try:
            entries = catalog.find_all(encoded)
            for i, entry in enumerate(entries):
                if entry is None or entry.tier not in memory:
                    continue
                if encoded[i] in promotions:  # claimed under the lock, as it is queued
                    raise _Contended
                if entry.tier is not Tier.DRAM:  # an HBM read copies to the host: not
                    raise _Contended  # worth doing twice when a writer comes by
                wire = catalog.wire(encoded[i], entry)
                meta = None
                if caller:
                    meta = meta_from_proto(wire)
                    self.guard.check_access(meta, caller, write=False)
                value = store.try_lease_memory(entry)
                if value is None:
                    raise _Busy
                found.append((i, entry, wire, meta, value))
            if not store.lock.unchanged(version):
                raise _Busy
        except Exception as exc:  # a refusal, or a state changing under the read
            for *_rest, value in found:
                value.release()
            return _BUSY if isinstance(exc, _Busy) else _LOCK
        catalog.touch_later([f[1].row for f in found], [encoded[f[0]] for f in found])
        for i, entry, wire, meta, value in found:
            readers[i] = ObjectRead(
                wire, value.view[: entry.size], value, entry.tier, entry.loc, None, _meta=meta
            )
            label = (keys[i].kind.name, entry.tier.name)
            served[label] = served.get(label, 0) + 1
        return _READ

    def _count_served(self, served: dict[tuple[str, str], int]) -> None:
        store = self.store
        tiers = store.tier_names()
        for (kind, tier), n in served.items():
            store.metrics.count_read(kind, tier, tiers, n)

    def _read(self, key: ObjectKey, offset: int, length: int, caller: str) -> ObjectRead:
        encoded = key.encode()
        metas: list[ObjectMeta] = []
        wires: list[pb.ObjectMeta] = []
        promotions: list[Promotion] = []

        def found(entry: Entry) -> None:
            meta, wire = self.catalog.meta_and_wire(encoded, entry)
            if caller:
                self.guard.check_access(meta, caller, write=False)
            metas.append(meta)
            wires.append(wire)
            self.catalog.touch(entry.row, encoded)
            # claimed under the same hold of the lock (one acquisition per read)
            promotion = self.placement.take_promotion(encoded)
            if promotion is not None:
                promotions.append(promotion)

        tiers = self.store.tier_names()
        try:
            entry, value = self.store.read(encoded, found)
        except NotFound:
            self.store.metrics.count_read(key.kind.name, None, tiers)
            raise
        meta = metas[-1]
        self.store.metrics.count_read(key.kind.name, entry.tier.name, tiers)
        end = meta.size_bytes if length == 0 else offset + length
        if offset > meta.size_bytes or end > meta.size_bytes:
            value.release()
            raise OutOfRange(
                f"range [{offset}, {end}) is outside object {key} of {meta.size_bytes} bytes"
            )
        location = entry.loc if entry.tier in self.store.memory else -1
        promotion = promotions[-1] if promotions else None
        promote = None if promotion is None else self._promoter(encoded, entry, value, promotion)
        return ObjectRead(
            wires[-1], value.view[offset:end], value, entry.tier, location, promote, _meta=meta
        )

    def _promoter(
        self, encoded: bytes, entry: Entry, value: ValueRead, promotion: Promotion
    ) -> Callable[[], object]:
        def promote() -> object:
            try:
                return self.placement.promote(encoded, promotion, entry, value.view)
            except Exception:  # a failed promotion must not fail the read that ended
                log.exception("promotion of %s on read failed", ObjectKey.decode(encoded))
                return False

        return promote

    def get_bytes(self, key: ObjectKey, caller: str = "") -> tuple[ObjectMeta, bytes]:
        reader = self.read(key, caller=caller)
        try:
            return reader.meta, bytes(reader.view)
        finally:
            reader.release()

    def stat(self, key: ObjectKey, caller: str = "") -> ObjectMeta:
        encoded = key.encode()
        with self.store.guard.admit(key.namespace, Role.READ), self.store.lock:
            entry = self.catalog.find(encoded)
            if entry is None:
                raise NotFound(f"object {key} not found")
            meta = self.catalog.meta(encoded, entry)
            if caller:
                self.guard.check_access(meta, caller, write=False)
            return meta

    # -- delete -------------------------------------------------------------------------
    def delete(self, key: ObjectKey, caller: str = "", *, internal: bool = False) -> int | None:
        """Delete an object; returns the bytes freed, or None if it did not exist.
        ``internal``: the daemon deletes an object of its own (a reserved key)."""
        if not internal:
            check_client_key(key)
        encoded = key.encode()
        with self.store.guard.admit(key.namespace, Role.WRITE):
            with self.store.lock:
                entry = self.catalog.find(encoded)
                if entry is None:
                    return None
                if caller:
                    self.guard.check_access(self.catalog.meta(encoded, entry), caller, write=True)
                freed = self.store.remove_locked(encoded, entry)
            self.store.faults.point("delete.after_commit")
        if entry.durable and self.store.config.tiers.ssd.fsync:
            self.catalog.rocks.flush()
        return freed

    # -- list ---------------------------------------------------------------------------
    def list(
        self,
        namespace: str,
        kind: Kind | None,
        prefix: str,
        session: str,
        page_size: int,
        page_token: str,
        caller: str = "",
    ) -> tuple[list[ObjectMeta], str]:
        """A page of objects; a caller acting as a session sees only what it may read."""
        page, token = self.list_wire(
            namespace, kind, prefix, session, page_size, page_token, caller
        )
        return [meta for meta, _wire in page], token

    def list_wire(
        self,
        namespace: str,
        kind: Kind | None,
        prefix: str,
        session: str,
        page_size: int,
        page_token: str,
        caller: str = "",
    ) -> tuple[builtins.list[tuple[ObjectMeta, pb.ObjectMeta]], str]:
        """``list``, each object with its wire metadata (the catalog record's own
        message with the live fields set), so a reply need not convert it back."""
        validate_namespace(namespace)
        with self.store.guard.admit(namespace, Role.READ):
            return self._list(namespace, kind, prefix, session, page_size, page_token, caller)

    def _list(
        self,
        namespace: str,
        kind: Kind | None,
        prefix: str,
        session: str,
        page_size: int,
        page_token: str,
        caller: str,
    ) -> tuple[builtins.list[tuple[ObjectMeta, pb.ObjectMeta]], str]:
        check_deadline = self.store.guard.check_deadline
        limit = self.store.config.limits.list_page_max
        if page_size > limit:
            raise InvalidArgument(f"page_size {page_size} exceeds the limit of {limit}")
        page_size = page_size or min(100, limit)
        start = _decode_token(page_token)
        with self.store.lock:
            self.catalog.namespace_id(namespace)
        scope = key_prefix(namespace, kind, prefix)
        records: Iterator[tuple[bytes, StoredRecord | None]]
        if session:
            keys = self.catalog.session_keys(session, _session_start(session, start))
            records = (
                (k, None) for k in keys if k.startswith(scope) and (start is None or k > start)
            )
        else:
            records = (
                (k, rec)
                for k, rec in self.catalog.scan_records(scope, start)
                if start is None or k > start
            )
        out: builtins.list[tuple[ObjectMeta, pb.ObjectMeta]] = []
        last = b""
        while len(out) < page_size:
            # as many candidates as the page still has room for; the store lock
            # is held once for all of them, only to find their entries
            chunk = list(itertools.islice(records, page_size - len(out)))
            if not chunk:
                break
            check_deadline("the listing")
            if session:  # a session's keys come from its index: read their records
                chunk = [(k, self.catalog.record(k)) for k, _ in chunk]
            with self.store.lock:
                found = [
                    (k, rec, entry, self.catalog.atime_of(entry))
                    for k, rec in chunk
                    if rec is not None and (entry := self.catalog.find(k)) is not None
                ]
            for encoded, rec, entry, atime in found:
                meta, wire = self.catalog.compose(rec, entry, atime)
                if self._visible(meta, caller):
                    out.append((meta, wire))
                    last = encoded
        next_token = _encode_token(last) if len(out) >= page_size else ""
        return out, next_token

    def _visible(self, meta: ObjectMeta, caller: str) -> bool:
        if not caller:
            return True
        try:
            self.guard.check_access(meta, caller, write=False)
        except (NotFound, PermissionDenied):
            return False
        return True


def _new_meta(
    spec: PutSpec, profile: Profile, checksum: int, tier: Tier, persisted: bool, now_ms: int
) -> ObjectMeta:
    """The metadata of a put being committed now (version 1 until it replaces one)."""
    return ObjectMeta(
        key=spec.key,
        size_bytes=spec.size_bytes,
        checksum=checksum,
        profile=profile,
        tier=tier,
        session=spec.session,
        codec=spec.codec,
        tensor=spec.tensor,
        created_unix_ms=now_ms,
        accessed_unix_ms=now_ms,
        persisted=persisted,
        expires_unix_ms=now_ms + profile.ttl_s * 1000 if profile.ttl_s else 0,
    )


def _encode_token(encoded_key: bytes) -> str:
    return base64.urlsafe_b64encode(encoded_key).decode()


def _decode_token(token: str) -> bytes | None:
    if not token:
        return None
    try:
        return base64.urlsafe_b64decode(token.encode())
    except (binascii.Error, ValueError):
        raise InvalidArgument("page_token is not one this server issued") from None


def _session_start(session: str, start: bytes | None) -> bytes | None:
    return None if start is None else session.encode() + b"\x00" + start
