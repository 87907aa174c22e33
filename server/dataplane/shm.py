"""Shared-memory data plane: clients on this host read and write objects in the
DRAM arena in place, under leases.

The arena is one ``/dev/shm`` file (``tiers.dram.DramEngine``), pre-faulted at
start. A client maps the whole file once and then only exchanges small gRPC
messages with the daemon::

    arena file (MAP_SHARED in the daemon and in every local client)
    ┌──────────┬─────────────────────┬───────┬──────────────────────┬────────┐
    │ object A │ write lease W       │ free  │ staging copy of B    │ ...    │
    │ (leased  │ (reserved, client   │       │ (read lease R2: B    │        │
    │  by R1)  │  fills it, commits) │       │  lives on SSD/HBM)   │        │
    └──────────┴─────────────────────┴───────┴──────────────────────┴────────┘
     offset, length of every region come with its lease

Write: ``reserve`` allocates arena extents (making room by demotion like any
put) and grants write leases; the client copies its bytes in; ``commit``
hashes the extent, checks the client's checksum if it sent one, and commits
it through ``ObjectService.commit_filled`` — the object is then exactly what
a gRPC Put would have stored (catalog record, DURABLE → SSD copy + WAL sync).
When admission would not place the object in DRAM (COLD, or another tier
preferred), the extent is a staging area and commit stores from it through
the ordinary put path instead, then frees it.

Read: ``lease`` opens each object like a gRPC Get. An object served from the
arena is leased where it is (its copy is referenced, so a move or delete
defers the free, and ``make_room`` skips it); any other object (SSD, HBM, a
small value) is copied into a staging extent owned by the lease. Values up to
``inline_max_bytes`` come inline in the reply instead of by lease. An object
this daemon does not hold, found in the remote tier (``remote``), is fetched
straight into a staging extent (received there from the socket on Redis,
transferred there by Mooncake), verified there, and that extent is leased;
it becomes the adopted object's storage (no second copy, and no catalog work
before the reply) when that lease ends, or, for a Lease on a bulk session,
right after the reply (the extent pinned for the reader until its lease ends).

A lease ends once: released, committed, or reaped after its TTL by the
background worker. Clients must finish using a region before the TTL they
were granted runs out (the client library checks its own deadline, measured
from before its request, after every copy) — after that the region may hold
another object.
"""

from __future__ import annotations

import os
import threading
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Protocol

import xxhash

from tiermem.server.config import DataPlaneConfig
from tiermem.server.dataplane import after_reply
from tiermem.server.dataplane.limits import ByteBudget, check_batch
from tiermem.server.errors import FailedPrecondition, InvalidArgument, TiermemError
from tiermem.server.metrics import Metrics
from tiermem.server.model import Kind, ObjectKey, ObjectMeta, Profile, Tier
from tiermem.server.protoconv import meta_from_proto, meta_to_proto
from tiermem.server.services.leases import Lease, LeaseKind, LeaseTable, Region
from tiermem.server.services.objects import FilledPut, ObjectRead, ObjectService, PutSpec
from tiermem.server.tiers.base import Reservation
from tiermem.server.tiers.dram import DramEngine
from tiermem.v1 import common_pb2 as pb


class RemoteStager(Protocol):
    """What the plane needs of the remote tier (``RemoteService``) to serve
    objects it does not hold straight from the remote store."""

    def stage(
        self,
        keys: Sequence[ObjectKey],
        reserve: Callable[[ObjectKey, int, int], Reservation | None],
        drop: Callable[[Reservation], None],
        trim: Callable[[Reservation, int], Reservation],
        caller: str | None = None,
    ) -> dict[ObjectKey, tuple[ObjectMeta, Reservation]]: ...

    def adopt_filled(self, meta: ObjectMeta, reservation: Reservation) -> None: ...

    def adopt_filled_many(self, items: Sequence[tuple[ObjectMeta, Reservation]]) -> None: ...


@dataclass(frozen=True, slots=True)
class ArenaInfo:
    path: str
    size_bytes: int
    arena_id: str
    device: int
    inode: int


@dataclass(slots=True)
class PendingPut:
    """What a write lease will commit."""

    spec: PutSpec
    profile: Profile
    reservation: Reservation
    in_place: bool  # admission puts it in DRAM: the extent becomes the object's copy


@dataclass(frozen=True, slots=True)
class ReadGrant:
    """One object of a Lease reply: a lease on its bytes, or the bytes inline."""

    wire: pb.ObjectMeta  # the object's metadata, as the reply sends it
    lease: Lease | None
    inline: bytes | None

    @property
    def meta(self) -> ObjectMeta:
        """``wire`` as the domain metadata, converted on each use (replies send
        ``wire``; this is for callers inside the daemon and tests)."""
        return meta_from_proto(self.wire)


class StagedExtent:
    """An arena extent leased to a client while the daemon fills it
    (``SharedMemoryPlane.stage_streamed``). The filler calls ``begin`` before
    writing (False: the lease has already ended, write nothing) and ``done``
    when it stops writing; the extent is freed when both the lease has ended
    and the filling is done."""

    def __init__(self, buffer: memoryview, drop: Callable[[], None]) -> None:
        self.buffer = buffer
        self.lease: Lease | None = None
        self._drop = drop
        self._lock = threading.Lock()
        self._filling = False
        self._ended = False
        self._freed = False

    def begin(self) -> bool:
        with self._lock:
            if self._ended:
                return False
            self._filling = True
            return True

    def done(self) -> None:
        with self._lock:
            self._filling = False
            free = self._ended and not self._freed
            self._freed = self._freed or free
        if free:
            self._drop()

    def lease_ended(self) -> None:
        with self._lock:
            self._ended = True
            free = not self._filling and not self._freed
            self._freed = self._freed or free
        if free:
            self._drop()


class SharedMemoryPlane:
    def __init__(
        self,
        objects: ObjectService,
        config: DataPlaneConfig,
        leases: LeaseTable,
        budget: ByteBudget,
        metrics: Metrics,
    ) -> None:
        self._objects = objects
        self._config = config
        self._leases = leases
        self._budget = budget
        self._metrics = metrics
        engine = objects.store.memory.get(Tier.DRAM)
        self.arena = engine if config.shm_enabled and isinstance(engine, DramEngine) else None
        #: brings objects not held here in from the remote tier before a read
        #: (``RemoteService.fill``; set by the daemon when it has one)
        self.fill: Callable[[Sequence[ObjectKey], str | None], None] | None = None
        #: serves objects not held here straight from the remote tier, in staging
        #: extents adopted when their leases end (set by the daemon; else ``fill``)
        self.remote: RemoteStager | None = None
        self._info: ArenaInfo | None = None
        #: staged remote objects whose leases ended in this thread's ``release``,
        #: adopted together when it returns (``_adopt``)
        self._adopting = threading.local()

    # -- what clients need to map the arena ---------------------------------------------
    def info(self) -> ArenaInfo | None:
        """The arena file's identity (fixed for the daemon's life: read once; every
        Lease and Reserve reply names it)."""
        if self.arena is None:
            return None
        if self._info is None:
            st = os.stat(self.arena.arena_path)
            path = self.arena.arena_path
            self._info = ArenaInfo(str(path), st.st_size, path.name, st.st_dev, st.st_ino)
        return self._info

    def _require_arena(self) -> DramEngine:
        if self.arena is None:
            raise FailedPrecondition(
                "the shared-memory path is off on this daemon (dataplane.shm_enabled or the "
                "DRAM tier is disabled); use the bulk channel or Put/Get"
            )
        return self.arena

    def ttl_s(self, ttl_ms: int) -> float:
        """The TTL granted for a request asking ``ttl_ms`` (0 = default), capped."""
        if ttl_ms == 0:
            return self._config.lease_ttl_s
        return min(ttl_ms / 1000.0, self._config.max_lease_ttl_s)

    def _check_batch(self, n: int, what: str) -> None:
        check_batch(n, self._config.max_batch_objects, what)

    # -- write: reserve → fill in place → commit -----------------------------------------
    def reserve(self, owner: str, specs: Sequence[PutSpec], ttl_s: float) -> list[Lease]:
        """Reserve arena extents for new objects; one write lease each, all or none."""
        arena = self._require_arena()
        self._check_batch(len(specs), "Reserve")
        pending: list[Region] = []
        try:
            profiles = [self._objects.prepare(spec) for spec in specs]
            # whether each lands in place: admission asked once per shape, not per object
            firsts = self._objects.first_tiers(
                [(s.size_bytes, p, s.key.kind) for s, p in zip(specs, profiles, strict=True)]
            )
            for spec, profile, first in zip(specs, profiles, firsts, strict=True):
                pending.append(self._reserve_one(arena, spec, profile, first == Tier.DRAM))
            leases = self._leases.grant_many(owner, LeaseKind.WRITE, ttl_s, pending)
        except BaseException:
            for _off, _len, end, _payload in pending:
                end()
            raise
        self._metrics.dataplane_leases.labels("write").inc(len(leases))
        return leases

    def _reserve_one(
        self, arena: DramEngine, spec: PutSpec, profile: Profile, in_place: bool
    ) -> Region:
        size = spec.size_bytes
        if size < arena.arena_min_bytes:
            raise InvalidArgument(
                f"{spec.key} is {size} bytes, below tiers.dram.arena_min_bytes="
                f"{arena.arena_min_bytes}: small values do not live in the arena; send it with Put"
            )
        if size > arena.capacity_bytes:
            raise InvalidArgument(
                f"{spec.key} is {size} bytes; the shared-memory arena holds at most "
                f"{arena.capacity_bytes} (tiers.dram.capacity_bytes); use the bulk channel or Put"
            )
        self._budget.take(size)
        try:
            reservation = self._objects.reserve(size, profile, spec.key.kind, only=Tier.DRAM)
        except BaseException:
            self._budget.give(size)
            raise
        put = PendingPut(spec, profile, reservation, in_place)
        return reservation.location, size, lambda: self._drop(reservation), put

    def _drop(self, reservation: Reservation) -> None:
        self._objects.abort(reservation)
        self._budget.give(reservation.size)

    def commit(
        self, owner: str, items: Sequence[tuple[int, tuple[int, int] | None]]
    ) -> list[ObjectMeta]:
        """Commit filled write leases ``(lease_id, checksum or None)`` in order.

        Every extent is hashed and checked first: a mismatch anywhere aborts the
        whole batch (DATA_LOSS, nothing stored, leases ended). Then each object
        is committed like a put; should one fail (e.g. ``if_absent`` lost a race)
        the ones before it stay committed, it and the rest are aborted, and the
        error says so."""
        self._check_batch(len(items), "Commit")
        leases = self._leases.take_many([lease_id for lease_id, _ in items], owner, LeaseKind.WRITE)
        puts: list[tuple[PendingPut, int]] = []
        try:
            for lease, (_lease_id, checksum) in zip(leases, items, strict=True):
                put = lease.payload
                if not isinstance(put, PendingPut):
                    raise FailedPrecondition(f"lease {lease.lease_id:#x} has no pending put")
                if checksum is not None:
                    put.spec.checksum = checksum
                buffer = put.reservation.buffer
                xxh3 = xxhash.xxh3_64_intdigest(buffer)
                crc = zlib.crc32(buffer) if self._objects.upload_crc(put.spec) else None
                self._objects.check_upload(put.spec, xxh3, crc)
                puts.append((put, xxh3))
        except BaseException:
            self._leases.end_each(leases)  # (one that raises never hides this error)
            self._ended(leases, "aborted")
            raise
        if all(put.in_place for put, _ in puts):
            return self._commit_in_place(leases, puts)
        metas: list[ObjectMeta] = []
        for i, (put, xxh3) in enumerate(puts):
            try:
                metas.append(self._commit_one(put, xxh3))
            except BaseException as exc:
                for later, _ in puts[i + 1 :]:
                    self._drop(later.reservation)
                self._ended(leases[:i], "committed")
                self._ended(leases[i:], "aborted")
                if i and isinstance(exc, TiermemError):
                    raise type(exc)(
                        f"{exc.message} (objects 0..{i - 1} of the batch were committed, "
                        f"{i}.. were not)"
                    ) from exc
                raise
        self._ended(leases, "committed")
        return metas

    def _commit_in_place(
        self, leases: Sequence[Lease], puts: Sequence[tuple[PendingPut, int]]
    ) -> list[ObjectMeta]:
        """Commit extents that become the objects' DRAM copies as one unit
        (``ObjectService.commit_filled_many``: all or none)."""
        try:
            metas = self._objects.commit_filled_many(
                [FilledPut(p.spec, p.profile, p.reservation, xxh3) for p, xxh3 in puts],
                path="shm",
            )
        except BaseException:
            self._ended(leases, "aborted")
            raise
        finally:  # committed or aborted, the reservations are consumed
            self._budget.give(sum(p.reservation.size for p, _ in puts))
        self._ended(leases, "committed")
        return metas

    def _commit_one(self, put: PendingPut, xxh3: int) -> ObjectMeta:
        """Commit one filled extent; its budget and reservation are consumed either way."""
        reservation = put.reservation
        try:
            if put.in_place:
                return self._objects.commit_filled(
                    put.spec, put.profile, reservation, xxh3, path="shm"
                )
            # Admission wants another tier: store from the staging extent like a Put.
            try:
                return self._objects.put(put.spec, [reservation.buffer])
            finally:
                self._objects.abort(reservation)
        finally:
            self._budget.give(reservation.size)

    # -- read: lease → read in place → release ----------------------------------------------
    def lease(
        self,
        owner: str,
        keys: Sequence[ObjectKey],
        ttl_s: float,
        inline_max_bytes: int,
        caller: str = "",
    ) -> list[ReadGrant]:
        """Read leases on objects (small values inline); all or none. ``caller`` is
        the session the client acts as (what it may read is checked as for Get)."""
        arena = self._require_arena()
        self._check_batch(len(keys), "Lease")
        inline_max = min(inline_max_bytes or self._config.inline_max_bytes, self._inline_cap())
        staged = self._fill(arena, keys, inline_max, caller)
        opened: list[tuple[pb.ObjectMeta, Region | None, bytes | None]] = []
        readers: list[ObjectRead] = []
        try:
            rest = [key for key in keys if key not in staged]
            readers = self._objects.read_many(rest, caller=caller) if rest else []
            readers.reverse()  # popped from the end, in key order
            for key in keys:
                hit = staged.pop(key, None)
                opened.append(hit or self._open_one(arena, readers.pop(), inline_max))
            regions = [region for _meta, region, _inline in opened if region is not None]
            granted = iter(self._leases.grant_many(owner, LeaseKind.READ, ttl_s, regions))
        except BaseException:
            for reader in readers:  # opened but not yet given a region
                reader.release()
            for _meta, region, _inline in [*opened, *staged.values()]:
                if region is not None:
                    region[2]()
            raise
        grants = [
            ReadGrant(wire, next(granted) if region is not None else None, inline)
            for wire, region, inline in opened
        ]
        leased_bytes = sum(region[1] for region in regions)
        self._metrics.dataplane_leases.labels("read").inc(len(regions))
        self._metrics.data_bytes.labels("shm", "out").inc(leased_bytes)
        return grants

    def _fill(
        self, arena: DramEngine, keys: Sequence[ObjectKey], inline_max: int, caller: str
    ) -> dict[ObjectKey, tuple[pb.ObjectMeta, Region | None, bytes | None]]:
        """Bring in the objects not held here from the remote tier before they are
        opened: straight into staging extents (returned, ready to lease: their
        end adopts them) when a remote stager is set and the keys are distinct,
        else into the local tiers (``fill``). Objects a session owns that were
        demoted to the remote tier are brought in only if ``caller`` may read
        them: the read that follows refuses the others before fetching them."""
        # (a staged object has no owning session: values in the remote store carry
        # none, so any caller allowed to read the namespace may read it)
        remote = self.remote
        if remote is None or len(set(keys)) != len(keys):
            if self.fill is not None:
                self.fill(keys, caller)
            return {}

        def reserve(key: ObjectKey, size: int, head: int) -> Reservation | None:
            # judged by the payload: room for a head (a value landing whole) is
            # given back once it landed (``trim``)
            if size <= inline_max or size < arena.arena_min_bytes:
                return None  # comes inline: adopted first, then read
            try:
                return self._reserve_staging(head + size, key.kind)
            except TiermemError:
                return None  # no room to stage: adopted (or not) the ordinary way

        def trim(reservation: Reservation, head: int) -> Reservation:
            trimmed = arena.trim_front(reservation, head)
            self._budget.give(head)
            return trimmed

        # every extent it reserved and does not return, it gives to _drop
        staged = remote.stage(keys, reserve, self._drop, trim, caller)
        if staged and after_reply.can_defer():
            return self._adopt_after_reply(remote, staged)
        return {
            key: (
                meta_to_proto(meta),
                (r.location, r.size, partial(self._adopt, remote, meta, r), None),
                None,
            )
            for key, (meta, r) in staged.items()
        }

    def _adopt_after_reply(
        self, remote: RemoteStager, staged: dict[ObjectKey, tuple[ObjectMeta, Reservation]]
    ) -> dict[ObjectKey, tuple[pb.ObjectMeta, Region | None, bytes | None]]:
        """Lease staged extents that are adopted (one batch) as soon as the reply
        is sent, while the client copies out of them, instead of when their
        leases end. Each extent is pinned for its reader as a read pins an
        object's storage (``Leases``), so once adopted the object is never
        moved or freed under the lease, and an extent whose adoption fails is
        given back only when its lease ends."""
        pins = self._objects.store.leases
        for _meta, r in staged.values():
            pins.acquire(Tier.DRAM, r.location)
        after_reply.defer(partial(remote.adopt_filled_many, list(staged.values())))
        return {
            key: (
                meta_to_proto(meta),
                (r.location, r.size, partial(self._unpin_staged, r), None),
                None,
            )
            for key, (meta, r) in staged.items()
        }

    def _unpin_staged(self, reservation: Reservation) -> None:
        """A lease on an extent adopted after its reply ended: let go of the pin
        (the extent is freed now if its adoption failed or the object went)."""
        self._budget.give(reservation.size)
        self._objects.store.leases.release(Tier.DRAM, reservation.location)

    def _adopt(self, remote: RemoteStager, meta: ObjectMeta, reservation: Reservation) -> None:
        """A staged remote object's lease ended: its extent becomes the object's
        (with the others of the same ``release``, in one batch)."""
        self._budget.give(reservation.size)
        batch: list[tuple[ObjectMeta, Reservation]] | None = getattr(self._adopting, "batch", None)
        if batch is not None:
            batch.append((meta, reservation))
        else:  # reaped, or ended at shutdown
            remote.adopt_filled(meta, reservation)

    def _inline_cap(self) -> int:
        return int(self._config.inline_max_bytes)

    def _open_one(
        self, arena: DramEngine, reader: ObjectRead, inline_max: int
    ) -> tuple[pb.ObjectMeta, Region | None, bytes | None]:
        """An opened object as a grant: inline bytes, its arena extent, or a staging copy."""
        size = reader.size_bytes
        if size <= inline_max or size < arena.arena_min_bytes:
            try:
                return reader.wire, None, bytes(reader.view)
            finally:
                reader.release()
        if reader.tier == Tier.DRAM and reader.location >= 0:
            return reader.wire, (reader.location, size, reader.release, None), None
        return reader.wire, self._staging_copy(reader), None

    def _staging_copy(self, reader: ObjectRead) -> Region:
        """Copy an object that is not in the arena into an extent the lease owns."""
        size = reader.size_bytes
        try:
            reservation = self._reserve_staging(size, Kind(reader.wire.key.kind))
            try:
                reservation.buffer[:] = reader.view
            except BaseException:
                self._drop(reservation)
                raise
        finally:
            reader.release()
        return reservation.location, size, lambda: self._drop(reservation), None

    def stage(
        self, owner: str, size: int, kind: Kind, fill: Callable[[memoryview], None], ttl_s: float
    ) -> Lease:
        """A read lease on a fresh extent of ``size`` bytes that ``fill`` writes
        (e.g. a blob range read and verified straight from its payload file), so
        a local client copies it once instead of receiving it over a socket. The
        extent is freed when the lease ends."""
        reservation = self._reserve_staging(size, kind)
        try:
            fill(reservation.buffer)
            region = (reservation.location, size, lambda: self._drop(reservation), None)
            (lease,) = self._leases.grant_many(owner, LeaseKind.READ, ttl_s, [region])
        except BaseException:
            self._drop(reservation)
            raise
        self._metrics.dataplane_leases.labels("read").inc()
        return lease

    def stage_streamed(self, owner: str, size: int, kind: Kind, ttl_s: float) -> StagedExtent:
        """Like ``stage``, but the lease is granted before the extent is filled:
        the caller fills it (``StagedExtent.begin`` ... ``done``) while telling
        the client how much of it is ready, so the client copies the first
        units while the last are read. The extent is freed once the lease has
        ended and the filling has stopped, whichever comes last, so it is never
        reused while being written."""
        reservation = self._reserve_staging(size, kind)
        extent = StagedExtent(reservation.buffer, lambda: self._drop(reservation))
        try:
            region = (reservation.location, size, extent.lease_ended, None)
            (lease,) = self._leases.grant_many(owner, LeaseKind.READ, ttl_s, [region])
        except BaseException:
            self._drop(reservation)
            raise
        extent.lease = lease
        self._metrics.dataplane_leases.labels("read").inc()
        return extent

    def _reserve_staging(self, size: int, kind: Kind) -> Reservation:
        """A fresh arena extent for a staged read, its bytes taken from the budget."""
        self._require_arena()
        self._budget.take(size)
        try:
            return self._objects.reserve(size, Profile(), kind, only=Tier.DRAM)
        except BaseException:
            self._budget.give(size)
            raise

    def release(self, owner: str, lease_ids: Sequence[int]) -> int:
        """End leases: read leases released, uncommitted write leases aborted."""
        self._check_batch(len(lease_ids), "Release")
        remote = self.remote
        if remote is None:
            return self._leases.release_many(lease_ids, owner)
        batch: list[tuple[ObjectMeta, Reservation]] = []
        self._adopting.batch = batch
        try:
            return self._leases.release_many(lease_ids, owner)
        finally:
            self._adopting.batch = None
            if batch:
                remote.adopt_filled_many(batch)

    def _ended(self, leases: Sequence[Lease], how: str) -> None:
        self._leases.finish(leases, how)
