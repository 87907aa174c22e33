"""Shared state of the storage services: catalog, tier engines, leases and the lock.

Services (objects, mover, reaper, and the per-kind services built on them) take
a ``Store`` instead of reaching into each other. The lock serialises catalog
and index mutations; it is never held across network I/O or large copies.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from tiermem.placement import TierState
from tiermem.server.catalog.catalog import Catalog, Entry
from tiermem.server.catalog.index import SEG_INLINE, SEG_NONE
from tiermem.server.config import Config
from tiermem.server.errors import Corrupted, InvariantViolation, NotFound, Unavailable
from tiermem.server.faults import Faults
from tiermem.server.metrics import Metrics
from tiermem.server.model import ObjectKey, Tier
from tiermem.server.services.damage import DamageLog
from tiermem.server.services.guard import Guard
from tiermem.server.services.leases import Leases
from tiermem.server.services.storelock import StoreLock
from tiermem.server.tiers.base import MemoryTierEngine, TierEngine
from tiermem.server.tiers.remote import RemoteTier
from tiermem.server.tiers.ssd import SsdEngine

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ValueRead:
    """Bytes of a value being read. Call ``release`` when done with ``view``."""

    view: memoryview
    release: Callable[[], None] = field(default=lambda: None)


def _chain_release(value: ValueRead, then: Callable[[], None]) -> ValueRead:
    """``value`` whose release also calls ``then``."""
    first = value.release

    def release() -> None:
        try:
            first()
        finally:
            then()

    return ValueRead(value.view, release)


class Store:
    def __init__(
        self,
        config: Config,
        catalog: Catalog,
        memory: dict[Tier, MemoryTierEngine],
        ssd: SsdEngine,
        metrics: Metrics,
        remote: RemoteTier | None = None,
    ) -> None:
        self.config = config
        self.catalog = catalog
        self.memory = memory
        self.ssd = ssd
        self.metrics = metrics
        #: the remote tier's engine when ``tiers.remote.enabled``
        self.remote = remote
        #: called under the lock with the keys of removed objects that had a remote
        #: copy (the remote service deletes those copies in the background)
        self.on_remote_removed: Callable[[list[bytes]], None] | None = None
        #: told of removed objects without a remote copy (``RemoteService._removed``)
        self.on_remote_unpublished: Callable[[list[bytes]], None] | None = None
        #: whether an object's remote copy is this daemon's private value (set by
        #: the remote service, which knows: ``RemoteService.private_copy``)
        self.remote_private: Callable[[bytes], bool] = lambda _key: False
        #: called under the lock with every batch of removed or replaced objects
        #: (the old entries), once their rows are gone or rewritten (e.g. the
        #: blob cache forgets its evicted or overwritten copies); must not block
        #: or take the lock again
        self.removal_observers: list[Callable[[list[tuple[bytes, Entry]]], None]] = []
        self.lock = StoreLock(on_acquire=catalog.apply_touches)
        self.leases = Leases(self._free_memory)
        #: Access control and limits: every service calls ``guard.admit(namespace, role)``.
        self.guard = Guard(config.limits, catalog, metrics)
        #: Objects known to be damaged (served as DATA_LOSS, listed by fsck).
        self.damage = DamageLog(metrics)
        #: Crash points for kill-9 tests (inert unless configured).
        self.faults = Faults(config.faults)
        ssd.segments.faults = self.faults

    def report_damage(self, encoded_key: bytes, entry: Entry, message: str) -> None:
        where = "inline" if entry.seg == SEG_INLINE else "segment"
        self.damage.add(encoded_key, where, message)

    def _free_memory(self, tier: Tier, location: int, size: int) -> None:
        self.memory[tier].free(location, size)

    def tier_config(self, tier: Tier) -> tuple[bool, float, float]:
        t = self.config.tiers
        cfg = {Tier.HBM: t.hbm, Tier.DRAM: t.dram, Tier.SSD: t.ssd, Tier.REMOTE: t.remote}[tier]
        return cfg.enabled, cfg.high_watermark, cfg.low_watermark

    @functools.cached_property
    def _tier_configs(self) -> dict[Tier, tuple[bool, float, float]]:
        """``tier_config`` of every tier (the config does not change while running)."""
        return {tier: self.tier_config(tier) for tier in Tier}

    def engines(self) -> list[tuple[Tier, TierEngine]]:
        """Every enabled engine, fastest tier first."""
        out: list[tuple[Tier, TierEngine]] = [*self.memory.items(), (Tier.SSD, self.ssd)]
        if self.remote is not None:
            out.append((Tier.REMOTE, self.remote))
        return out

    def tier_names(self) -> list[str]:
        """Names of the enabled tiers, fastest first (the order reads look in)."""
        configs = self._tier_configs
        return [tier.name for tier, _ in self.engines() if configs[tier][0]]

    def tier_states(self) -> dict[int, TierState]:
        out: dict[int, TierState] = {}
        configs = self._tier_configs
        for tier, engine in self.engines():
            enabled, high, low = configs[tier]
            if tier == Tier.REMOTE and self.remote is not None:
                enabled = enabled and self.remote.available()  # not while its breaker is open
            out[int(tier)] = TierState(
                int(tier), enabled, engine.capacity_bytes, engine.used_bytes, high, low
            )
        return out

    def remove_locked(self, encoded_key: bytes, entry: Entry, *, keep_remote: bool = False) -> int:
        """Delete an object everywhere (call with the lock held); returns its size.
        The record deletion is written without sync: callers that promised
        durability flush the WAL after releasing the lock. ``keep_remote``: leave
        its remote copy for other daemons (an eviction, not a delete)."""
        return self.remove_many_locked([(encoded_key, entry)], keep_remote=keep_remote)

    def remove_many_locked(
        self, victims: list[tuple[bytes, Entry]], *, keep_remote: bool = False
    ) -> int:
        """Delete objects everywhere in ONE catalog write batch (call with the lock
        held; e.g. everything a closing session owns); returns the bytes freed.
        Their remote copies are deleted in the background unless ``keep_remote``."""
        batch = self.catalog.rocks.batch()
        for encoded_key, entry in victims:
            rec = self.catalog.record(encoded_key)
            self.catalog.stage_removal(
                batch, encoded_key, rec.meta.session if rec is not None else "", entry.expires_ms
            )
            if entry.persisted:
                self.ssd.stage_release(encoded_key, entry.seg, batch)
        batch.commit(sync=False)
        for encoded_key, entry in victims:
            if entry.persisted:  # counted once the batch is in (a failed one changed nothing)
                self.ssd.count_release(encoded_key, entry.seg, entry.size)
            self.catalog.remove_row(encoded_key)
            self.damage.discard(encoded_key)
            if entry.tier in self.memory:
                self.leases.free(entry.tier, entry.loc, entry.size)
        for observe in self.removal_observers:
            observe(victims)
        if not keep_remote and self.on_remote_unpublished is not None:
            # (objects without a remote copy yet: their publish may be uploading)
            others = [k for k, e in victims if not e.remote_copy]
            if others:
                self.on_remote_unpublished(others)
        if not keep_remote and self.on_remote_removed is not None:
            remote = [k for k, e in victims if e.remote_copy]
            if remote:
                self.on_remote_removed(remote)
        return sum(entry.size for _, entry in victims)

    def lease_memory(self, entry: Entry) -> ValueRead:
        """View of an in-memory copy under a read lease. Call with the lock held
        (so the copy cannot be freed between lookup and lease); use the view after."""
        engine = self.memory.get(entry.tier)
        if engine is None:
            raise InvariantViolation(f"no memory engine for tier {entry.tier!r}")
        self.leases.acquire(entry.tier, entry.loc)
        return self._leased_view(engine, entry)

    def try_lease_memory(self, entry: Entry) -> ValueRead | None:
        """``lease_memory`` for an entry found without the lock: None (nothing
        leased) if its location was freed meanwhile. The caller checks that the
        lock was not taken since it found the entry (``StoreLock.unchanged``)
        and releases the lease if it was."""
        engine = self.memory.get(entry.tier)
        if engine is None or not self.leases.try_acquire(entry.tier, entry.loc):
            return None
        return self._leased_view(engine, entry)

    def _leased_view(self, engine: MemoryTierEngine, entry: Entry) -> ValueRead:
        """The view of a copy just leased; the lease is given back if it cannot
        be read (a small value's buffer is gone at once when it is freed)."""
        try:
            view = engine.read(entry.loc, entry.size)
        except BaseException:
            self.leases.release(entry.tier, entry.loc)
            raise
        return ValueRead(view, lambda: self.leases.release(entry.tier, entry.loc))

    def read_ssd(self, encoded_key: bytes, entry: Entry) -> memoryview:
        """The SSD copy's bytes, verified. Call without the lock (it does I/O)."""
        if entry.seg == SEG_NONE:
            raise InvariantViolation(f"SSD read of an object without an SSD copy: row {entry.row}")
        return self.ssd.read(
            encoded_key,
            entry.seg,
            entry.seg_off,
            entry.size,
            entry.checksum,
            str(ObjectKey.decode(encoded_key)),
        )

    def read_remote(self, encoded_key: bytes, entry: Entry) -> ValueRead | None:
        """The remote copy's bytes, verified against the catalog's checksum; None
        when the store no longer has this version (evicted, lost, replaced by
        another daemon's). Call without the lock (network I/O). Raises
        Unavailable (store down), Corrupted (bytes damaged)."""
        if self.remote is None:
            raise InvariantViolation(f"remote read without a remote tier: row {entry.row}")
        got = self.remote.get([encoded_key], [self.remote_private(encoded_key)])[0]
        if got is None:
            return None
        if isinstance(got, Corrupted):
            raise got
        if got.meta.checksum != entry.checksum or got.meta.size_bytes != entry.size:
            got.release()  # another version of the object: ours is gone
            return None
        try:
            self.remote.verify(got, entry.checksum, entry.size)
        except Corrupted:
            got.release()
            raise
        return ValueRead(got.payload, got.release)

    def forget_stale(self, encoded_key: bytes, entry: Entry) -> bool:
        """Drop a catalog entry whose only copy the remote store no longer has (the
        store evicted it: a miss, not an error). False if the entry changed."""
        with self.lock:
            now = self.catalog.find(encoded_key)
            if now is None or not now.same_copy(entry):
                return False
            self.remove_locked(encoded_key, now, keep_remote=True)
        self.metrics.remote_stale_entries.inc()
        log.info(
            "%s: the remote store no longer has it; entry removed", ObjectKey.decode(encoded_key)
        )
        return True

    def read(
        self, encoded_key: bytes, on_found: Callable[[Entry], None] | None = None
    ) -> tuple[Entry, ValueRead]:
        """Find and read an object's value from its serving tier.

        ``on_found`` runs under the lock with the entry that is read (e.g. to take
        metadata or count the access). An SSD or remote read that fails
        verification is retried if the object moved or changed meanwhile
        (compaction, overwrite, promotion); if it is still the same copy the error
        stands. An object whose remote copy the store evicted is removed and
        reported missing. Raises NotFound, Corrupted, Unavailable (remote down).
        """
        for _ in range(4):
            with self.lock:
                entry = self.catalog.find(encoded_key)
                if entry is None:
                    raise NotFound(f"object {ObjectKey.decode(encoded_key)} not found")
                if on_found is not None:
                    on_found(entry)
                if entry.tier in self.memory:
                    return entry, self.lease_memory(entry)
            # The SSD read buffer counts against limits.max_inflight_bytes until released.
            ticket = self.guard.reserve_bytes(entry.size)
            try:
                if entry.tier == Tier.REMOTE:
                    value = self.read_remote(encoded_key, entry)
                    if value is None:
                        ticket.release()
                        if self.forget_stale(encoded_key, entry):
                            raise NotFound(
                                f"object {ObjectKey.decode(encoded_key)} not found "
                                "(the remote store evicted it)"
                            )
                        continue
                    return entry, _chain_release(value, ticket.release)
                return entry, ValueRead(self.read_ssd(encoded_key, entry), ticket.release)
            except Corrupted as exc:
                ticket.release()
                with self.lock:
                    now = self.catalog.find(encoded_key)
                    if now is not None and now.same_copy(entry):
                        if entry.tier != Tier.REMOTE:  # the remote tier counted it already
                            self.report_damage(encoded_key, entry, exc.message)
                        raise
            except BaseException:
                ticket.release()
                raise
        raise Unavailable(f"object {ObjectKey.decode(encoded_key)} kept moving during the read")
