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
import logging
import threading
import time
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import xxhash

from tiermem.placement import admission_order
from tiermem.server.catalog.catalog import Entry
from tiermem.server.catalog.index import SEG_INLINE, SEG_NONE
from tiermem.server.errors import (
    AlreadyExists,
    CapacityExceeded,
    Corrupted,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    OutOfRange,
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
)
from tiermem.server.services.guard import Role, Ticket
from tiermem.server.services.mover import Mover
from tiermem.server.services.store import Store, ValueRead
from tiermem.server.tiers.base import Reservation
from tiermem.server.tiers.ssd import SsdCopy

log = logging.getLogger(__name__)

CHECKSUM_XXH3_64 = 1
CHECKSUM_CRC32 = 2


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


@dataclass(slots=True)
class ObjectRead:
    """An object being read: its metadata and a view of the requested range.
    ``release`` must be called once the view is no longer used."""

    meta: ObjectMeta
    view: memoryview
    _value: ValueRead
    _ticket: Ticket

    def release(self) -> None:
        self._value.release()
        self._ticket.release()

    def chunks(self, chunk_bytes: int) -> Iterator[bytes]:
        """The range as ``bytes`` chunks (copies, so the lease can end early)."""
        view = self.view
        for start in range(0, len(view), chunk_bytes):
            yield bytes(view[start : start + chunk_bytes])


class ObjectService:
    def __init__(self, store: Store, mover: Mover) -> None:
        self.store = store
        self.mover = mover
        self.catalog = store.catalog
        self._pressure = threading.Event()

    @property
    def pressure(self) -> threading.Event:
        """Set when a put pushed a tier above its high watermark (wakes the mover)."""
        return self._pressure

    # -- put ----------------------------------------------------------------------
    def validate(self, spec: PutSpec) -> Entry | None:
        """Check a put before any byte arrives; returns the entry it would replace."""
        limit = self.store.config.limits.max_object_bytes
        if spec.size_bytes > limit:
            raise InvalidArgument(
                f"object is {spec.size_bytes} bytes; the limit is {limit} (limits.max_object_bytes)"
            )
        if spec.tensor is not None:
            spec.tensor.checked(spec.size_bytes)
        validate_session(spec.session)
        if spec.profile.preferred_tier == Tier.REMOTE:
            raise InvalidArgument("preferred_tier REMOTE is not available on this daemon")
        if spec.checksum is not None and spec.checksum[0] not in (CHECKSUM_XXH3_64, CHECKSUM_CRC32):
            raise InvalidArgument(f"unknown checksum algorithm {spec.checksum[0]}")
        self.store.guard.authorize(spec.key.namespace, Role.WRITE)
        with self.store.lock:
            self.catalog.namespace_id(spec.key.namespace)
            old = self.catalog.find(spec.key.encode())
            if spec.if_absent and old is not None:
                raise AlreadyExists(f"object {spec.key} exists (if_absent was set)")
        return old

    def put(self, spec: PutSpec, chunks: Iterable[bytes | memoryview]) -> ObjectMeta:
        """Store an object from its byte chunks; returns its metadata once committed.

        Durability on return: a DURABLE object (and a put that replaced one) is on
        stable storage when ``tiers.ssd.fsync`` is set: segment bytes fdatasynced,
        catalog WAL synced. A CACHE object survives a process crash only if it
        was written to SSD; see docs/reliability.md."""
        old = self.validate(spec)
        profile = spec.profile.resolved(spec.key.kind)
        durable = profile.durability == Durability.DURABLE
        if durable and not self.store.config.tiers.ssd.enabled:
            raise FailedPrecondition("DURABLE objects need the SSD tier, which is disabled")
        with self.store.guard.admit(
            spec.key.namespace,
            Role.WRITE,
            put_bytes=spec.size_bytes,
            replaced_bytes=old.size if old is not None else 0,
            new_objects=0 if old is not None else 1,
            session=spec.session,
        ):
            return self._put(spec, profile, durable, chunks)

    def _put(
        self, spec: PutSpec, profile: Profile, durable: bool, chunks: Iterable[bytes | memoryview]
    ) -> ObjectMeta:
        reservation = self._reserve(spec.size_bytes, profile)
        ssd_copy: SsdCopy | None = None
        location: int | None = None
        encoded = spec.key.encode()
        try:
            checksum = self._receive(spec, chunks, reservation.buffer)
            if reservation.tier == Tier.SSD or durable:
                ssd_copy = self._write_ssd(encoded, reservation.buffer, checksum, durable)
                self.store.faults.point("put.after_ssd_write")
            if reservation.tier in self.store.memory:
                location = self.store.memory[reservation.tier].commit(reservation)
            meta, replaced_durable = self._commit(
                spec, profile, encoded, checksum, reservation, location, ssd_copy
            )
        except BaseException:
            if location is not None:
                self.store.memory[reservation.tier].free(location, reservation.size)
            elif reservation.tier in self.store.memory:
                self.store.memory[reservation.tier].abort(reservation)
            if ssd_copy is not None:
                self.store.ssd.discard(encoded, ssd_copy)
            raise
        self.store.faults.point("put.after_commit")
        if (durable or replaced_durable) and self.store.config.tiers.ssd.fsync:
            self.store.catalog.rocks.flush()  # group commit: syncs the WAL up to our batch
        self.store.metrics.data_bytes.labels("grpc", "in").inc(spec.size_bytes)
        return meta

    def _reserve(self, size: int, profile: Profile) -> Reservation:
        states = self.store.tier_states()
        order = admission_order(size, int(profile.hint), profile.preferred_tier, states)
        for tier_value in order:
            tier = Tier(tier_value)
            if tier == Tier.SSD:
                if not self.store.ssd.fits(size):
                    self.mover.evict_ssd_cache(size)
                if self.store.ssd.fits(size):
                    buf = np.empty(size, dtype=np.uint8)
                    return Reservation(Tier.SSD, -1, size, buf.data)
                continue
            engine = self.store.memory[tier]
            reservation = engine.reserve(size)
            if reservation is None and not profile.pin:
                self.mover.make_room(tier, engine.cost_of(size))
                reservation = engine.reserve(size)
            if reservation is not None:
                state = states[tier_value]
                if engine.used_bytes > state.high_bytes:
                    self._pressure.set()
                return reservation
        raise CapacityExceeded(
            f"no tier can take {size} more bytes: "
            + ", ".join(
                f"{Tier(t).name} {s.used_bytes}/{s.capacity_bytes}" for t, s in states.items()
            )
        )

    def _receive(
        self, spec: PutSpec, chunks: Iterable[bytes | memoryview], buffer: memoryview
    ) -> int:
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
        if spec.checksum is not None:
            algorithm, expected = spec.checksum
            actual = crc if algorithm == CHECKSUM_CRC32 else checksum
            if actual != expected:
                self.store.metrics.checksum_failures.labels("upload").inc()
                raise Corrupted(
                    f"checksum mismatch on upload of {spec.key}: client sent {expected:x}, "
                    f"received bytes hash to {actual:x}; nothing was stored"
                )
        return checksum

    def _write_ssd(self, encoded: bytes, data: memoryview, checksum: int, durable: bool) -> SsdCopy:
        ssd = self.store.ssd
        if not ssd.fits(len(data)):
            self.mover.evict_ssd_cache(len(data))
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
    ) -> tuple[ObjectMeta, bool]:
        """Make the object visible; returns its metadata and whether it replaced a
        DURABLE object (whose removal must then be synced too)."""
        now_ms = int(time.time() * 1000)
        meta = ObjectMeta(
            key=spec.key,
            size_bytes=spec.size_bytes,
            checksum=checksum,
            profile=profile,
            tier=reservation.tier,
            session=spec.session,
            tensor=spec.tensor,
            created_unix_ms=now_ms,
            accessed_unix_ms=now_ms,
            persisted=ssd_copy is not None,
            expires_unix_ms=now_ms + profile.ttl_s * 1000 if profile.ttl_s else 0,
        )
        seg = ssd_copy.segment if ssd_copy is not None else SEG_NONE
        seg_off = ssd_copy.offset if ssd_copy is not None else 0
        store, catalog = self.store, self.catalog
        with store.lock:
            old = catalog.find(encoded)
            if old is not None and spec.if_absent:
                raise AlreadyExists(f"object {spec.key} exists (if_absent was set)")
            batch = catalog.rocks.batch()
            if old is not None:
                old_rec = catalog.record(encoded)
                meta.version = (old_rec.meta.version if old_rec else 0) + 1
                catalog.stage_removal(
                    batch, encoded, old_rec.meta.session if old_rec else "", old.expires_ms
                )
                if old.persisted:
                    replaced_inline = old.seg == SEG_INLINE and seg == SEG_INLINE
                    store.ssd.release(
                        encoded, old.seg, old.size, None if replaced_inline else batch
                    )
            catalog.stage_record(batch, encoded, meta, seg, seg_off)
            if ssd_copy is not None:
                store.ssd.stage(ssd_copy, encoded, batch)
            batch.commit(sync=False)
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
        return meta, old is not None and old.durable

    # -- get / stat ---------------------------------------------------------------------
    def read(self, key: ObjectKey, offset: int = 0, length: int = 0) -> ObjectRead:
        """Open an object for reading ``[offset, offset+length)`` (length 0 = to the end).
        The caller must ``release()`` the result."""
        ticket = self.store.guard.admit(key.namespace, Role.READ)
        try:
            return self._read(key, offset, length, ticket)
        except BaseException:
            ticket.release()
            raise

    def _read(self, key: ObjectKey, offset: int, length: int, ticket: Ticket) -> ObjectRead:
        encoded = key.encode()
        metas: list[ObjectMeta] = []

        def found(entry: Entry) -> None:
            metas.append(self.catalog.meta(encoded, entry))
            self.catalog.touch(entry.row)

        try:
            entry, value = self.store.read(encoded, found)
        except NotFound:
            self.store.metrics.misses.labels(key.kind.name).inc()
            raise
        meta = metas[-1]
        self.store.metrics.hits.labels(entry.tier.name, key.kind.name).inc()
        end = meta.size_bytes if length == 0 else offset + length
        if offset > meta.size_bytes or end > meta.size_bytes:
            value.release()
            raise OutOfRange(
                f"range [{offset}, {end}) is outside object {key} of {meta.size_bytes} bytes"
            )
        return ObjectRead(meta, value.view[offset:end], value, ticket)

    def get_bytes(self, key: ObjectKey) -> tuple[ObjectMeta, bytes]:
        reader = self.read(key)
        try:
            return reader.meta, bytes(reader.view)
        finally:
            reader.release()

    def stat(self, key: ObjectKey) -> ObjectMeta:
        encoded = key.encode()
        with self.store.guard.admit(key.namespace, Role.READ), self.store.lock:
            entry = self.catalog.find(encoded)
            if entry is None:
                raise NotFound(f"object {key} not found")
            return self.catalog.meta(encoded, entry)

    # -- delete -------------------------------------------------------------------------
    def delete(self, key: ObjectKey) -> int | None:
        """Delete an object; returns the bytes freed, or None if it did not exist."""
        encoded = key.encode()
        with self.store.guard.admit(key.namespace, Role.WRITE):
            with self.store.lock:
                entry = self.catalog.find(encoded)
                if entry is None:
                    return None
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
    ) -> tuple[list[ObjectMeta], str]:
        validate_namespace(namespace)
        with self.store.guard.admit(namespace, Role.READ):
            return self._list(namespace, kind, prefix, session, page_size, page_token)

    def _list(
        self,
        namespace: str,
        kind: Kind | None,
        prefix: str,
        session: str,
        page_size: int,
        page_token: str,
    ) -> tuple[builtins.list[ObjectMeta], str]:
        check_deadline = self.store.guard.check_deadline
        limit = self.store.config.limits.list_page_max
        if page_size > limit:
            raise InvalidArgument(f"page_size {page_size} exceeds the limit of {limit}")
        page_size = page_size or min(100, limit)
        start = _decode_token(page_token)
        with self.store.lock:
            self.catalog.namespace_id(namespace)
        scope = key_prefix(namespace, kind, prefix)
        out: builtins.list[ObjectMeta] = []
        last = b""
        if session:
            keys = (k for k in self.catalog.session_keys(session, _session_start(session, start)))
            candidates = (k for k in keys if k.startswith(scope) and (start is None or k > start))
            for encoded in candidates:
                check_deadline("the listing")
                with self.store.lock:
                    entry = self.catalog.find(encoded)
                    rec = self.catalog.record(encoded) if entry is not None else None
                    if entry is None or rec is None:
                        continue
                    out.append(self.catalog.meta_from_record(rec, entry))
                last = encoded
                if len(out) >= page_size:
                    break
        else:
            for encoded, rec in self.catalog.scan_records(scope, start):
                if start is not None and encoded <= start:
                    continue
                check_deadline("the listing")
                with self.store.lock:
                    entry = self.catalog.find(encoded)
                    if entry is None:
                        continue
                    out.append(self.catalog.meta_from_record(rec, entry))
                last = encoded
                if len(out) >= page_size:
                    break
        next_token = _encode_token(last) if len(out) >= page_size else ""
        return out, next_token


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
