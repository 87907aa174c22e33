"""Moving values between tiers: the move and evict primitives, and compaction.

Which objects move where is the planner's business (``services/placement.py``);
this module only carries moves out.

Every move is copy, then switch the catalog entry, then free: the object stays
readable throughout, and a crash mid-move leaves the old copy in charge (the
catalog record only ever names a copy that was completely written). The switch
happens only if the entry still describes the copy that was read; otherwise the
object changed meanwhile and the new copy is thrown away.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Protocol

from tiermem.server.catalog.catalog import SEG_NONE, Entry
from tiermem.server.errors import (
    CapacityExceeded,
    Corrupted,
    InvariantViolation,
    NotFound,
    Unavailable,
)
from tiermem.server.model import Tier
from tiermem.server.services.pacer import BytePacer
from tiermem.server.services.store import Store, ValueRead
from tiermem.server.tiers.ssd import SsdCopy

log = logging.getLogger(__name__)


class RemoteWrites(Protocol):
    """The remote writer's side of a demotion's upload (``RemoteService``): its
    queued deletes and publishes of a key never interleave with a demotion
    uploading that key and recording the copy in the catalog."""

    def claim(self, key: bytes, *, private: bool = False) -> bool:
        """Reserve ``key`` before uploading it (under the private name if
        ``private``; False: not now). The name is journaled, so a restart that
        purges the object deletes the upload."""
        ...

    def release(self, key: bytes, *, orphaned: bool, private: bool = False) -> None:
        """End the claim; ``orphaned``: the upload (under the private name if
        ``private``) was not recorded (delete it)."""
        ...

    def private_row(self, row: int) -> bool:
        """Whether the object in index row ``row`` is a session's, uploaded
        private: under this daemon's private name (a plain owner tag's are
        shared like unowned ones). Call with the store lock."""
        ...

    def recorded(self, key: bytes, *, private: bool) -> None:
        """The upload of ``key`` was recorded in the catalog (call with the
        store lock): ``private``, under the private name."""
        ...

    def evicted(self, key: bytes, entry: Entry) -> None:
        """``key``'s object (``entry``) was evicted (call with the store lock)."""
        ...


class Mover:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.catalog = store.catalog
        self._compaction_lock = threading.Lock()
        #: Set by the remote service: demotions that upload claim their key there.
        self.remote_writes: RemoteWrites | None = None

    # -- one object ---------------------------------------------------------------------
    def move(self, encoded: bytes, target: Tier, *, force: bool = False) -> bool:
        """Move an object's serving copy to ``target``. False if it is gone, pinned
        (unless ``force``: Pin moving it first), already there, changed during the
        copy, or the target has no room. A move to the remote tier also releases
        the object's SSD copy (a CACHE object served remotely keeps none)."""
        store = self.store
        with store.lock:
            entry = self.catalog.find(encoded)
            if entry is None or entry.tier == target or (entry.pinned and not force):
                return False
            if target == Tier.REMOTE and (entry.durable or store.remote is None):
                return False  # a remote copy may be evicted at any time: never DURABLE
            value = store.lease_memory(entry) if entry.tier in store.memory else None
        try:
            return self._copy_and_switch(encoded, entry, value, target, force=force)
        finally:
            if value is not None:
                value.release()

    def move_from(self, encoded: bytes, entry: Entry, view: memoryview, target: Tier) -> bool:
        """Promote using bytes a reader already holds (``view`` is the complete
        value of the copy ``entry`` describes): no second read of the source."""
        if entry.pinned or entry.tier == target:
            return False
        return self._copy_and_switch(encoded, entry, ValueRead(view), target)

    def _copy_and_switch(
        self,
        encoded: bytes,
        entry: Entry,
        value: ValueRead | None,
        target: Tier,
        *,
        force: bool = False,
    ) -> bool:
        store = self.store
        if value is None and entry.tier == Tier.REMOTE:
            try:
                value = store.read_remote(encoded, entry)
            except (Corrupted, Unavailable):  # counted and logged by the remote tier
                return False
            if value is None:
                store.forget_stale(encoded, entry)
                return False
            try:
                return self._copy_and_switch(encoded, entry, value, target, force=force)
            finally:
                value.release()
        if value is not None:
            view = value.view
        else:
            try:
                view = store.read_ssd(encoded, entry)
            except Corrupted as exc:
                # the copy read may have gone meanwhile (a demotion to the remote
                # tier releases it, an overwrite frees it): damage only if it is
                # still the object's SSD copy
                with store.lock:
                    now = self.catalog.find(encoded)
                    if now is not None and now.same_ssd_copy(entry):
                        store.report_damage(encoded, entry, exc.message)
                return False
        # A demotion that uploads (no copy of this version in the store yet) claims
        # the key from the upload to the switch: the remote writer's deletes are
        # queued, not ordered with this upload, and one queued for an older
        # version checks the catalog when it runs (it spares a key whose current
        # version has a remote copy), so neither it nor a publish may run between
        # the upload and the switch that records it. An upload that is not
        # recorded is deleted again (it may have landed even if the put failed):
        # the object changed or went meanwhile, and a read finding no entry for
        # it would adopt that version.
        writes = self.remote_writes
        if target != Tier.REMOTE or writes is None:
            return self._copy_then_switch(encoded, entry, view, target, force=force)
        if store.remote is None or not store.remote.fits(entry.size):
            return False
        reupload = entry.remote_copy
        if reupload:
            # a copy is there already (a publish's or adoption's shared one, or a
            # promoted private one) unless the store lost it (evicted, restarted):
            # ask, under the name that copy has; a lost one is sent again like a
            # first upload, under the claim (ordered with the writer's deletes and
            # publishes, deleted again if the switch does not happen)
            private = store.remote_private(encoded)
            try:
                there = store.remote.exists([encoded], [private])[0]
            except Unavailable:
                return False
            if there:
                return self._copy_then_switch(
                    encoded, entry, view, target, force=force, private=private
                )
        else:
            # a session's object goes under this daemon's private name (``codec``);
            # the claim journals the name the upload uses, so say which beforehand
            with store.lock:
                now = self.catalog.find(encoded)
                private = now is not None and now.same_copy(entry) and writes.private_row(now.row)
        if not writes.claim(encoded, private=private):
            return False  # the remote writer is busy with this key: not now
        # the entry was read before the claim: a newer version may have reached
        # the store meanwhile (published, or uploaded by another demotion), and
        # uploading this one over it would leave the store holding an older
        # value than the catalog says, which the delete check then spares.
        # While the claim is held nobody else writes the key remotely, so a
        # check now holds until the switch.
        with store.lock:
            now = self.catalog.find(encoded)
            current = (
                now is not None
                and now.same_copy(entry)
                and now.tier != Tier.REMOTE
                and now.remote_copy == reupload
                and (store.remote_private(encoded) if reupload else writes.private_row(now.row))
                == private
            )
        if not current:
            writes.release(encoded, orphaned=False)  # nothing was uploaded
            return False
        moved = False
        try:
            moved = self._copy_then_switch(
                encoded, entry, view, target, force=force, private=private, reupload=reupload
            )
        finally:
            writes.release(encoded, orphaned=not moved, private=private)
        return moved

    def _copy_then_switch(
        self,
        encoded: bytes,
        entry: Entry,
        view: memoryview,
        target: Tier,
        *,
        force: bool,
        private: bool = False,
        reupload: bool = False,
    ) -> bool:
        """Copy ``view`` (the value of the copy ``entry`` describes) to ``target``
        and switch the entry to it if it still describes that copy. ``private``:
        a demotion uploads it as a session's value, under this daemon's
        private name."""
        store = self.store
        new_loc = -1
        ssd_copy: SsdCopy | None = None
        target_engine = store.memory.get(target)
        if target_engine is not None:
            reservation = target_engine.reserve(entry.size)
            if reservation is None:
                return False
            reservation.buffer[:] = view
            new_loc = target_engine.commit(reservation)
        elif target == Tier.SSD and not entry.persisted:
            try:
                ssd_copy = store.ssd.write(encoded, view, entry.checksum, durable=False)
            except CapacityExceeded:
                return False
        elif target == Tier.REMOTE and not self._upload(encoded, entry, view, private, reupload):
            return False
        store.faults.point("move.after_copy")
        with store.lock:
            now = self.catalog.find(encoded)
            # a pin set during the copy stops the move (the pin is the newer word)
            if now is None or not now.same_copy(entry) or (now.pinned and not force):
                if target_engine is not None:
                    target_engine.free(new_loc, entry.size)
                if ssd_copy is not None:
                    store.ssd.discard(encoded, ssd_copy)
                return False
            seg, seg_off = entry.seg, entry.seg_off
            released_ssd = False
            if ssd_copy is not None:
                batch = self.catalog.rocks.batch()
                if not self.catalog.stage_ssd_location(
                    batch, encoded, ssd_copy.segment, ssd_copy.offset
                ):
                    store.ssd.discard(encoded, ssd_copy)  # no record to point at it
                    return False
                store.ssd.stage(ssd_copy, encoded, batch)
                try:
                    batch.commit(sync=False)
                except BaseException:
                    # nothing names the new copy: its space is free again
                    store.ssd.discard(encoded, ssd_copy)
                    raise
                seg, seg_off = ssd_copy.segment, ssd_copy.offset
            elif target == Tier.REMOTE and entry.persisted:
                # Served from the remote store now: the SSD copy goes (the planner
                # sends SSD CACHE objects remote to free SSD; a read never uses it).
                # Counted free once the record no longer names it.
                # No record (gone meanwhile): no move, as for a demotion to SSD; the
                # entry would otherwise serve remotely while naming the SSD copy.
                batch = self.catalog.rocks.batch()
                if not self.catalog.stage_ssd_location(batch, encoded, SEG_NONE, 0):
                    return False
                store.ssd.stage_release(encoded, entry.seg, batch)
                batch.commit(sync=False)
                seg, seg_off, released_ssd = SEG_NONE, 0, True
            self.catalog.place(
                entry.row, encoded, tier=target, loc=new_loc, seg=seg, seg_off=seg_off
            )
            if released_ssd:
                store.ssd.count_release(encoded, entry.seg, entry.size)
            if target == Tier.REMOTE:
                self.catalog.set_remote(entry.row, True)
                if not entry.remote_copy and self.remote_writes is not None:
                    self.remote_writes.recorded(encoded, private=private)
            store.faults.point("move.after_switch")
            if entry.tier in store.memory:
                store.leases.free(entry.tier, entry.loc, entry.size)
        kind = entry.kind.name
        store.metrics.migrations.labels(entry.tier.name, target.name, kind).inc()
        store.metrics.migrated_bytes.labels(entry.tier.name, target.name, kind).inc(entry.size)
        return True

    def _upload(
        self, encoded: bytes, entry: Entry, view: memoryview, private: bool, reupload: bool
    ) -> bool:
        """Make sure the remote store holds this version of the object. Nothing is
        sent when a copy was written earlier (publish, adoption) and ``move`` found
        it still there; ``reupload``: the store lost it (evicted, restarted), send
        the value again (``move`` holds the claim; the flag saying a copy is there
        is never cleared otherwise, and demoting without sending turned a block
        this daemon still held into a miss, here and on every other daemon).
        ``private``: a session's object, written under this
        daemon's private name (``codec``), which other daemons never read; else
        under the shared name, with no owner (an owner tag is shared like no
        owner). False when the store is down or refuses the value (the caller
        drops or keeps the object)."""
        remote = self.store.remote
        if remote is None or not remote.fits(entry.size):
            return False
        if entry.remote_copy and not reupload:
            return True
        try:
            with self.store.lock:
                meta = self.catalog.meta(encoded, entry)
            if not private:
                meta = dataclasses.replace(meta, session="")
            elif not meta.session:
                raise InvariantViolation(f"private upload of {meta.key}, which no session owns")
            return remote.put([(meta, remote.pack(meta, view))])[0]
        except (Unavailable, NotFound):
            return False

    def evict(
        self, encoded: bytes, tier: Tier, *, recompute: bool = False, only_from: bool = False
    ) -> int:
        """Drop a CACHE object entirely. ``recompute``: the planner chose to drop it
        because recomputing it costs less than keeping it (counted apart from
        evictions for lack of room). ``only_from``: only while it is still served
        from ``tier`` (a fallback after a failed move: another thread may have
        moved it meanwhile). Returns bytes freed."""
        with self.store.lock:
            entry = self.catalog.find(encoded)
            if entry is None or entry.durable or entry.pinned:
                return 0
            if only_from and entry.tier != tier:
                return 0
            # an eviction: a remote copy stays for the other daemons of the deployment
            # (a private one is deleted: ``RemoteService.evicted``)
            freed = self.store.remove_locked(encoded, entry, keep_remote=True)
            if self.remote_writes is not None:
                self.remote_writes.evicted(encoded, entry)
        metrics = self.store.metrics
        if recompute:
            metrics.drops_to_recompute.labels(tier.name, entry.kind.name).inc()
        else:
            metrics.evictions.labels(tier.name, entry.kind.name).inc()
        metrics.evicted_bytes.labels(tier.name, entry.kind.name).inc(freed)
        return freed

    def evict_rows(self, rows: set[int], tier: Tier, *, recompute: bool = False) -> tuple[int, int]:
        """Evict the CACHE objects of ``rows`` (index rows whose keys are not known
        without a scan: SSD rows), each only while still on ``tier``. Walks the
        catalog records once; returns (objects evicted, bytes freed)."""
        if not rows:
            return 0, 0
        idx = self.catalog.index
        keys: list[bytes] = []
        for encoded, _raw in self.catalog.rocks.scan("objects", bulk=True):
            with self.store.lock:
                row = idx.find(encoded)
            if row is not None and row in rows:
                keys.append(encoded)
                if len(keys) == len(rows):
                    break
        freed = [self.evict(k, tier, recompute=recompute, only_from=True) for k in keys]
        return sum(1 for n in freed if n > 0), sum(freed)

    # -- compaction ---------------------------------------------------------------------
    def compact(self, pacer: BytePacer | None = None) -> int:
        """Compact every segment below the live-ratio threshold; returns how many.
        ``pacer`` (the background pass's) spreads the copying over time. Passes never
        overlap: one waits for another (say, ``Daemon.maintain`` during the
        background thread's) to finish."""
        ratio = self.store.config.tiers.ssd.compaction_live_ratio
        done = 0
        with self._compaction_lock:
            for seg_id in self.store.ssd.segments.compaction_candidates(ratio):
                if pacer is not None and pacer.stopped:
                    break
                if self.compact_segment(seg_id, pacer):
                    done += 1
        return done

    def compact_segment(self, seg_id: int, pacer: BytePacer | None = None) -> bool:
        """Copy a segment's live values to the active segment, switch their catalog
        entries and retire it. False (segment kept) if any live value could not move.
        The caller holds no compaction of the same segment (``compact`` serialises)."""
        store = self.store
        started = time.monotonic()
        waited_before = pacer.waited_s if pacer is not None else 0.0
        segments = store.ssd.segments
        fsync = store.config.tiers.ssd.fsync
        failed = False
        moved_bytes = 0
        written: set[int] = set()
        log.debug("compacting segment %d", seg_id)
        for info in segments.walk(seg_id):
            if pacer is not None and pacer.stopped:
                # safe to leave half done: moved values are switched one by one and
                # the segment goes only once nothing in it is live
                log.info("compaction of segment %d left for later: stopping", seg_id)
                return False
            with store.lock:
                entry = self.catalog.find(info.key)
            if entry is None or entry.seg != seg_id or entry.seg_off != info.data_offset:
                continue  # dead entry: deleted, overwritten or already moved
            if info.key in store.damage:
                failed = True  # known damaged: stays where fsck can find it
                continue
            try:
                data = store.read_ssd(info.key, entry)
            except Corrupted as exc:
                store.report_damage(info.key, entry, exc.message)
                failed = True
                continue
            new_seg, new_off = segments.append(
                info.key, data, entry.checksum, sync=entry.durable and fsync
            )
            written.add(new_seg)
            store.faults.point("compaction.after_append")
            with store.lock:
                now = self.catalog.find(info.key)
                batch = self.catalog.rocks.batch()
                # the serving copy may have been promoted or demoted meanwhile: what
                # matters is that the SSD copy in this segment is still the object's
                if (
                    now is None
                    or not now.same_ssd_copy(entry)
                    or not self.catalog.stage_ssd_location(batch, info.key, new_seg, new_off)
                ):
                    segments.release(new_seg, len(info.key), entry.size)
                    continue
                try:
                    batch.commit(sync=False)
                except BaseException:
                    # the record still names the old copy: the new one is not live
                    segments.release(new_seg, len(info.key), entry.size)
                    raise
                self.catalog.place(
                    entry.row, info.key, tier=now.tier, loc=now.loc, seg=new_seg, seg_off=new_off
                )
                segments.release(seg_id, len(info.key), entry.size)
            store.faults.point("compaction.after_switch")
            moved_bytes += entry.size
            if pacer is not None:
                pacer.spend(entry.size)
        if failed:
            log.warning("segment %d kept: some live values could not be moved", seg_id)
            return False
        left = segments.live_bytes(seg_id)
        if left > 0:
            # Records still name entries the walk did not find: never delete them.
            log.error("segment %d kept: %d live bytes were not found by its walk", seg_id, left)
            return False
        # The moved bytes (CACHE ones were written without sync), then the records
        # naming them, are on stable storage before the old file goes.
        if fsync:
            segments.sync(written)
        self.catalog.rocks.flush()
        store.faults.point("compaction.before_retire")
        segments.retire(seg_id)
        store.metrics.compactions.inc()
        store.metrics.compacted_bytes.inc(moved_bytes)
        log.info(
            "compacted segment %d (%d live bytes moved in %.2f s, %.2f s of it paced)",
            seg_id,
            moved_bytes,
            time.monotonic() - started,
            (pacer.waited_s if pacer is not None else 0.0) - waited_before,
        )
        return True
