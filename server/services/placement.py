"""Placement in the daemon: the pure planner (``tiermem.placement``) wired to
the catalog, the tier engines and the mover.

* **admission** — ``reserve`` asks ``Planner.admit`` which tier a new object
  goes to; a full memory tier makes room by moving out residents worth less
  per byte than the newcomer (never pinned ones), cascading HBM -> DRAM ->
  SSD/drop as the planner says. A CACHE object admission does not keep
  (``Admission(DROP)``: e.g. a KV chunk its client marked COLD) is received into
  free memory, committed like any put and evicted right after (``after_put``):
  never written to SSD; a later read is a miss;
* **access tracking** — every read counts in the catalog's ``rate``/``atime``
  columns (``Catalog.touch``); its hook asks ``Planner.promotion_target``
  whether the object should move up now and queues the promotion. The object
  service then promotes from the bytes it just read (no second read); other
  readers' promotions are done by the migrator;
* **rebalancing** — ``plan`` snapshots the index columns (vectorised, under the
  lock) and asks ``Planner.plan`` for ordered moves; the migrator applies them;
* **Prefetch / Pin / Unpin** and the **cost report**.

Rows name objects in plans; keys come from ``Catalog.key_of`` (resident rows
and recently used SSD rows). SSD rows whose key is unknown are found by one
record scan when they must be dropped, and are promoted once they are read.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from tiermem.placement import (
    Admission,
    CostModel,
    Objects,
    Plan,
    Planner,
    PlannerConfig,
    TierCost,
    TierState,
)
from tiermem.placement.access import session_kv
from tiermem.placement.cost import DEFAULT_KIND_COSTS, CostReport, cost_report
from tiermem.placement.model import DROP
from tiermem.server.catalog.catalog import Entry
from tiermem.server.catalog.index import (
    FLAG_LIVE,
    FLAG_PINNED,
    FLAG_SEEN,
    HINT_MASK,
    HINT_SHIFT,
    SEG_NONE,
)
from tiermem.server.config import PlacementConfig
from tiermem.server.errors import (
    CapacityExceeded,
    InvalidArgument,
    InvariantViolation,
    NotFound,
    PermissionDenied,
)
from tiermem.server.model import Durability, Kind, ObjectKey, Profile, Tier
from tiermem.server.services.mover import Mover
from tiermem.server.services.store import Store
from tiermem.server.tiers.base import MemoryTierEngine, Reservation

if TYPE_CHECKING:  # (the object service imports this module)
    from tiermem.server.services.objects import ObjectGuard

log = logging.getLogger(__name__)

#: Most promotions waiting for the migrator; more are dropped (a later read asks again).
MAX_QUEUED_PROMOTIONS = 10_000
#: Most pending next-access deadlines remembered (oldest dropped first).
MAX_DEADLINES = 100_000
#: Most rounds of making room for one CACHE put when the bytes freed do not
#: coalesce into an extent the value fits (each round frees the value's cost);
#: past it the put is refused (RESOURCE_EXHAUSTED).
MAX_ROOM_ROUNDS = 16


def cost_model(config: PlacementConfig, remote_kinds: Collection[Kind] = ()) -> CostModel:
    """The planner's cost model from the config; only ``remote_kinds`` (those of an
    enabled remote tier, ``tiers.remote.kinds``) may be placed on REMOTE."""
    c = config.costs
    tiers = {
        int(Tier.HBM): c.hbm,
        int(Tier.DRAM): c.dram,
        int(Tier.SSD): c.ssd,
        int(Tier.REMOTE): c.remote,
    }
    return CostModel(
        tiers={
            t: TierCost(v.latency_s, v.bandwidth_bytes_per_s, v.price_per_gib_hour)
            for t, v in tiers.items()
        },
        kinds={
            k: kc
            if k in remote_kinds
            else dataclasses.replace(kc, tiers=kc.tiers - {int(Tier.REMOTE)})
            for k, kc in DEFAULT_KIND_COSTS.items()
        },
    )


def _room_needed(engine: MemoryTierEngine, size: int) -> int:
    """Bytes to move out of ``engine`` for a value of ``size`` its ``reserve``
    just refused: what the budget lacks, or, when the free bytes add up but no
    free extent fits the value (freed extents between residents), the value's
    own cost (callers free that much again until an extent fits)."""
    need = engine.used_bytes + engine.cost_of(size) - engine.capacity_bytes
    return need if need > 0 else engine.cost_of(size)


@dataclass(frozen=True, slots=True)
class PrefetchResult:
    queued: int
    resident: int
    missing: int


@dataclass(frozen=True, slots=True)
class Promotion:
    target: Tier
    below: float  # residents less dense than this may be moved out for it


#: Index columns a planner snapshot reads (copied under the store lock).
_SNAPSHOT_COLUMNS = (
    "flags", "rate", "atime", "kind", "sess", "size", "tier", "seg", "ns", "check",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Columns:
    """What a snapshot copies under the lock: the live rows, their columns and
    the pending read deadlines (rows and times), if any."""

    rows: npt.NDArray[np.int64]
    cols: dict[str, npt.NDArray[Any]]
    deadline_rows: npt.NDArray[np.int64] | None
    deadline_when: npt.NDArray[np.float64] | None


class PlacementService:
    def __init__(self, store: Store, mover: Mover, config: PlacementConfig) -> None:
        self.store = store
        self.mover = mover
        self.catalog = store.catalog
        self.config = config
        remote = store.config.tiers.remote
        kinds = [Kind[name] for name in remote.kinds] if remote.enabled else []
        self.cost = cost_model(config, kinds)
        self.planner = Planner(
            self.cost,
            PlannerConfig(
                horizon_s=config.horizon_s,
                keep_horizon_s=config.keep_horizon_s,
                hysteresis=config.hysteresis,
                max_move_bytes=int(config.migrate_bandwidth_bytes_per_s * config.plan_interval_s),
                remote_policy=remote.demote,
            ),
        )
        self.access = self.catalog.access
        #: set when the migrator should run now (put pressure, prefetch, queued promotions)
        self.wake = threading.Event()
        #: Wall time of the last rebalancing plan (paces the migrator).
        self.last_plan_seconds = 0.0
        self.deadlines: OrderedDict[int, float] = OrderedDict()
        #: row -> (key hash, tier) of each row the last plan moves (``still_planned``)
        self._planned: dict[int, tuple[int, int]] = {}
        self.promotions: OrderedDict[bytes, Promotion] = OrderedDict()
        # objects on this tier or a faster one have nowhere to be promoted to
        # (the memory engines are fixed at start): reads skip the planner
        self._top_tier = min(
            (int(t) for t in store.memory if store.tier_config(t)[0]), default=int(Tier.SSD) + 1
        )
        self.catalog.on_access = self._on_access

    def _quotas_locked(self) -> dict[tuple[int, int], int]:
        """Configured quotas by (namespace id, tier); namespaces not created yet have none."""
        out: dict[tuple[int, int], int] = {}
        for q in self.config.quotas:
            ns = self.catalog.namespaces.get(q.namespace)
            if ns is not None:
                tier = Tier.HBM if q.tier == "hbm" else Tier.DRAM
                out[(ns, int(tier))] = int(q.max_bytes)
        return out

    # -- snapshots --------------------------------------------------------------------
    def snapshot(self, tier: Tier | None = None, now: float | None = None) -> Objects:
        """The planner's view of live objects (of one tier, or all). Call with the lock."""
        now = time.time() if now is None else now
        return self._estimate(self._gather(tier, now), now)

    def _gather(self, tier: Tier | None, now: float) -> _Columns:
        """The index columns a snapshot needs, copied for the live rows (of one
        tier, or all), and the pending read deadlines. Call with the lock; the
        rest of the work (``_estimate``) needs none."""
        idx = self.catalog.index
        n = idx.high_water_row
        c = idx.cols
        live = (c["flags"][:n] & FLAG_LIVE) != 0
        if tier is not None:
            live &= c["tier"][:n] == int(tier)
        rows = np.flatnonzero(live).astype(np.int64)
        deadline_rows = deadline_when = None
        if self.deadlines:
            self._prune_deadlines(now)
            deadline_rows = np.fromiter(self.deadlines.keys(), dtype=np.int64)
            deadline_when = np.fromiter(self.deadlines.values(), dtype=np.float64)
        return _Columns(
            rows, {name: c[name][rows] for name in _SNAPSHOT_COLUMNS}, deadline_rows, deadline_when
        )

    def _estimate(self, g: _Columns, now: float) -> Objects:
        """The planner's view from gathered columns: each object's expected access
        rate (the learner's estimate plus read-deadline boosts)."""
        rows, c = g.rows, g.cols
        flags = c["flags"]
        seen = (flags & FLAG_SEEN) != 0
        rate = self.catalog.learner.estimate(
            c["rate"],
            c["atime"],
            seen,
            c["kind"],
            (flags & HINT_MASK) >> HINT_SHIFT,
            now,
            session_kv(c["kind"], c["sess"]),
        )
        evidence = seen
        if g.deadline_rows is not None and g.deadline_when is not None:
            dl = np.zeros(len(rows))
            pos = np.searchsorted(rows, g.deadline_rows)
            ok = pos < len(rows)
            ok[ok] &= rows[pos[ok]] == g.deadline_rows[ok]
            dl[pos[ok]] = g.deadline_when[ok]
            rate = rate + self.access.deadline_boost(dl, now)
            evidence = seen | (dl > 0)
        return Objects(
            rows=rows,
            size=c["size"],
            kind=c["kind"],
            tier=c["tier"],
            flags=flags,
            rate=rate,
            persisted=c["seg"] != SEG_NONE,
            ns=c["ns"],
            evidence=evidence,
        )

    def _prune_deadlines(self, now: float) -> None:
        grace = self.access.deadline_grace_s
        stale = [row for row, d in self.deadlines.items() if d + grace < now]
        for row in stale:
            del self.deadlines[row]

    def _rate(self, row: int, now: float) -> float:
        c = self.catalog.index.cols
        flags = int(c["flags"][row])
        atime = float(c["atime"][row])
        if flags & FLAG_SEEN:
            rate = self.access.estimate_one(
                float(c["rate"][row]), atime, now, self.catalog.session_kv(row)
            )
        else:
            hint = (flags & HINT_MASK) >> HINT_SHIFT
            rate = self.catalog.learner.estimate_unseen(int(c["kind"][row]), hint, atime, now)
        deadline = self.deadlines.get(row)
        if deadline is not None:
            rate += self.access.deadline_boost_one(deadline, now)
        return rate

    # -- admission --------------------------------------------------------------------
    def _admit(
        self, size: int, profile: Profile, kind: Kind, states: Mapping[int, TierState]
    ) -> list[Admission]:
        """``Planner.admit`` for a new object of ``profile`` at its class's learned rate."""
        # Read without the store lock: this was about a quarter of all its
        # acquisitions in the soak (one per put shape), and a prior read while a
        # put or a first read updates the class is off by about one sample, which
        # an admission estimate can take (the learner's writers hold the lock).
        prior = self.catalog.learner.prior(int(kind), int(profile.hint))
        durable = profile.durability == Durability.DURABLE
        return self.planner.admit(
            size,
            int(kind),
            prior,
            durable,
            states,
            int(profile.preferred_tier) if profile.preferred_tier is not None else None,
            fresh_rate=self.access.fresh_rate(int(kind), int(profile.hint), durable, prior),
        )

    def reserve(self, size: int, profile: Profile, kind: Kind) -> Reservation:
        """Space for a new object in the tier the planner admits it to. When
        admission would rather not keep it (DROP first), the reservation says so
        (``recheck``): ``after_put`` asks again once it is committed."""
        states = self.store.tier_states()
        admissions = self._admit(size, profile, kind, states)
        reservation = self._reserve(size, profile, admissions, states)
        reservation.recheck = bool(admissions) and admissions[0].tier == DROP
        return reservation

    def _reserve(
        self,
        size: int,
        profile: Profile,
        admissions: Sequence[Admission],
        states: Mapping[int, TierState],
    ) -> Reservation:
        store = self.store
        for adm in admissions:
            if adm.tier == DROP:
                reservation = self._receive_buffer(size)
                if reservation is not None:
                    return reservation
                continue
            tier = Tier(adm.tier)
            if tier == Tier.SSD:
                if not store.ssd.fits(size):
                    self.free_ssd(size)
                if store.ssd.fits(size):
                    buf = np.empty(size, dtype=np.uint8)
                    return Reservation(Tier.SSD, -1, size, buf.data)
                continue
            engine = store.memory[tier]
            reservation = engine.reserve(size)
            if reservation is None and not profile.pin and adm.displace_below > 0:
                reservation = self._reserve_making_room(tier, size, adm.displace_below)
            if reservation is not None:
                if engine.used_bytes > states[int(tier)].high_bytes:
                    self.wake.set()
                return reservation
        if admissions and admissions[-1].tier == DROP and store.ssd.fits(size):
            # no free memory to receive a put that will not be kept: an SSD copy
            # (the planner's simulator does the same) rather than displacing
            # residents for it
            return Reservation(Tier.SSD, -1, size, np.empty(size, dtype=np.uint8).data)
        if profile.durability != Durability.DURABLE and not profile.pin:
            # A cache always takes a new entry: when no tier would admit it on its
            # merits (e.g. no SSD, memory full of equally valued objects), the least
            # valuable residents of the first memory tier make way, as in any cache.
            for tier, engine in store.memory.items():
                if size > engine.capacity_bytes:
                    continue
                reservation = engine.reserve(size)
                for _ in range(MAX_ROOM_ROUNDS):
                    if reservation is not None:
                        return reservation
                    if self.make_room(tier, _room_needed(engine, size)) <= 0:
                        break
                    reservation = engine.reserve(size)
                if reservation is not None:
                    return reservation
        raise CapacityExceeded(
            f"no tier can take {size} more bytes: "
            + ", ".join(
                f"{Tier(t).name} {s.used_bytes}/{s.capacity_bytes}" for t, s in states.items()
            )
        )

    def _reserve_making_room(
        self, tier: Tier, size: int, below: float = float("inf"), attempts: int = 2
    ) -> Reservation | None:
        """Reserve ``size`` in a full memory tier, moving out residents worth less
        than ``below`` first. A second round when the first freed its bytes but
        the reservation still failed: a victim's space is freed only when its
        last reader lets go (``Leases.free``), which a reader that just finished
        may not have done yet."""
        engine = self.store.memory[tier]
        reservation = None
        for _ in range(attempts):
            if self.make_room(tier, _room_needed(engine, size), below) <= 0:
                return engine.reserve(size)
            reservation = engine.reserve(size)
            if reservation is not None:
                return reservation
        return reservation

    def _receive_buffer(self, size: int) -> Reservation | None:
        """Free memory (DRAM first) to receive a put admission will not keep; None
        when no memory tier has room without displacing anything."""
        for tier in (Tier.DRAM, Tier.HBM):
            engine = self.store.memory.get(tier)
            if engine is not None and size <= engine.capacity_bytes:
                reservation = engine.reserve(size)
                if reservation is not None:
                    return reservation
        return None

    def reserve_many(self, wanted: Sequence[tuple[int, Profile, Kind]]) -> list[Reservation]:
        """``reserve`` for each ``(size, profile, kind)`` of a batch, all or none.

        The tier states and the learned prior are read once per batch and the
        planner is asked once per distinct (size, kind, profile); an object whose
        first admitted tier is a memory tier with room right now is reserved there
        directly. Anything else (making room, SSD, a full tier) goes through
        ``reserve`` one by one, so the outcome is what ``reserve`` would choose
        for the batch's first object."""
        store = self.store
        states = store.tier_states()
        first: dict[tuple[object, ...], Tier | None] = {}
        out: list[Reservation] = []
        try:
            for size, profile, kind in wanted:
                k = (size, kind, profile.hint, profile.durability, profile.preferred_tier)
                if k not in first:
                    adm = self._admit(size, profile, kind, states)
                    # DROP (received, then not kept) and the rest: ``reserve`` decides
                    first[k] = Tier(adm[0].tier) if adm and adm[0].tier != DROP else None
                tier = first[k]
                reservation = None
                if tier is not None and tier in store.memory:
                    engine = store.memory[tier]
                    reservation = engine.reserve(size)
                    if reservation is not None:
                        reservation.recheck = False  # where admission put it
                        if engine.used_bytes > states[int(tier)].high_bytes:
                            self.wake.set()
                if reservation is None:
                    reservation = self.reserve(size, profile, kind)
                out.append(reservation)
        except BaseException:
            for reservation in out:
                if reservation.tier in store.memory:
                    store.memory[reservation.tier].abort(reservation)
            raise
        return out

    def first_tier(self, size: int, profile: Profile, kind: Kind) -> Tier | None:
        """The tier admission would try first for a new object (None: none can hold
        it). A put admission will not keep is received in DRAM (then dropped)."""
        return self.first_tiers([(size, profile, kind)])[0]

    def first_tiers(self, wanted: Sequence[tuple[int, Profile, Kind]]) -> list[Tier | None]:
        """``first_tier`` for each ``(size, profile, kind)`` of a batch: the tier
        states read once and the planner asked once per distinct shape (as in
        ``reserve_many``; admission costs ~0.1 ms a question)."""
        states = self.store.tier_states()
        memo: dict[tuple[object, ...], Tier | None] = {}
        out: list[Tier | None] = []
        for size, profile, kind in wanted:
            k = (size, kind, profile.hint, profile.durability, profile.preferred_tier)
            if k not in memo:
                memo[k] = self._first_of(self._admit(size, profile, kind, states))
            out.append(memo[k])
        return out

    def _first_of(self, admissions: Sequence[Admission]) -> Tier | None:
        if not admissions:
            return None
        if admissions[0].tier == DROP:
            return Tier.DRAM if Tier.DRAM in self.store.memory else None
        return Tier(admissions[0].tier)

    def reserve_in(self, tier: Tier, size: int, profile: Profile) -> Reservation:
        """Space in one given memory tier (e.g. a shared-memory staging area),
        making room there when it is full. Raises CapacityExceeded."""
        engine = self.store.memory.get(tier)
        if engine is None:
            raise CapacityExceeded(f"tier {tier.name} is not enabled")
        reservation = engine.reserve(size)
        if reservation is None and not profile.pin:
            reservation = self._reserve_making_room(tier, size)
        if reservation is None:
            raise CapacityExceeded(
                f"{tier.name} cannot take {size} more bytes "
                f"({engine.used_bytes} of {engine.capacity_bytes} used)"
            )
        return reservation

    def after_put(self, encoded: bytes, profile: Profile, recheck: bool = True) -> None:
        """After a put committed: remember its next-access deadline
        (``profile.next_access_unix_ms``), or, when its reservation says
        admission did not want it (``recheck``), drop it at once if it is a CACHE
        object admission still does not keep (see ``keeps``)."""
        self.after_puts([(encoded, profile, recheck)])

    def after_puts(self, puts: Sequence[tuple[bytes, Profile, bool]]) -> None:
        """``after_put`` for each (key, profile, recheck) of a committed batch,
        with the tier states read once and admission asked once per distinct
        (size, kind, profile), as ``reserve_many`` does."""
        states: Mapping[int, TierState] | None = None
        kept: dict[tuple[object, ...], bool] = {}
        for encoded, profile, recheck in puts:
            if profile.next_access_unix_ms:
                with self.store.lock:
                    row = self.catalog.index.find(encoded)
                    if row is not None:
                        self._set_deadline(row, profile.next_access_unix_ms / 1000)
                continue
            if not recheck or profile.durability == Durability.DURABLE or profile.pin:
                continue
            with self.store.lock:
                entry = self.catalog.find(encoded)
            if entry is None or entry.tier not in self.store.memory:
                continue
            k = (entry.size, entry.kind, profile.hint, profile.preferred_tier)
            if k not in kept:
                if states is None:
                    states = self.store.tier_states()
                kept[k] = self.keeps(entry, profile, states)
            if kept[k]:
                continue
            # the bytes were received in free memory (``_receive_buffer``); they go now
            if self.mover.evict(encoded, entry.tier, recompute=True, only_from=True) > 0:
                self.store.metrics.placement_admission_drops.labels(entry.kind.name).inc()

    def keeps(
        self, entry: Entry, profile: Profile, states: Mapping[int, TierState] | None = None
    ) -> bool:
        """Whether admission, asked now (or on ``states``), keeps a new CACHE
        object: its first choice (``Planner.admit``, the put's preferred tier
        included) is not DROP."""
        cache = dataclasses.replace(profile, durability=Durability.CACHE)
        if states is None:
            states = self.store.tier_states()
        admissions = self._admit(entry.size, cache, entry.kind, states)
        return not admissions or admissions[0].tier != DROP

    def _set_deadline(self, row: int, when_s: float) -> None:
        self.deadlines[row] = when_s
        self.deadlines.move_to_end(row)
        while len(self.deadlines) > MAX_DEADLINES:
            self.deadlines.popitem(last=False)

    # -- making room ------------------------------------------------------------------
    def make_room(self, tier: Tier, nbytes: int, below: float = float("inf")) -> int:
        """Move residents worth less than ``below`` per byte out of a memory tier
        until ``nbytes`` were freed (or nothing movable is left). Returns bytes freed."""
        if nbytes <= 0:
            return 0
        store = self.store
        now = time.time()
        # Copies under the lock; the estimates and the choice of victims (1.6 ms
        # at the median in the soak, each time a put finds no room) after it, so
        # that reads and puts do not queue behind them. The victims are then
        # checked again under the lock: still resident here, not leased.
        with store.lock:
            states = store.tier_states()
            gathered = self._gather(tier, now)
            leased = store.leases.leased_locations(tier)
            locs = self.catalog.index.cols["loc"][gathered.rows] if leased else None
        residents = self._estimate(gathered, now)
        if locs is not None:  # being read or copied: choose among the others
            residents = residents.take(np.flatnonzero(~np.isin(locs, leased)))
        victims = self.planner.victims(residents, int(tier), nbytes, states, below)
        chosen = []
        with store.lock:
            c = self.catalog.index.cols
            for row, dst, dens in zip(
                victims.rows.tolist(), victims.dst.tolist(), victims.dst_density.tolist(),
                strict=True,
            ):  # fmt: skip
                if int(c["tier"][row]) != int(tier) or not int(c["flags"][row]) & FLAG_LIVE:
                    continue  # moved or removed since the copy
                key = self.catalog.resident_keys.get(row)
                if key is None or store.leases.is_leased(tier, int(c["loc"][row])):
                    continue
                chosen.append((key, int(c["size"][row]), dst, dens))
        freed = 0
        for key, size, dst, dens in chosen:
            if freed >= nbytes:
                break
            if self._move_out(key, tier, size, dst, dens):
                freed += size
        return freed

    def _move_out(self, key: bytes, tier: Tier, size: int, dst: int, density: float) -> bool:
        store = self.store
        if dst in (int(Tier.HBM), int(Tier.DRAM)):
            target = Tier(dst)
            engine = store.memory.get(target)
            if engine is not None:
                high = store.tier_states()[dst].high_bytes
                need = engine.used_bytes + engine.cost_of(size) - high
                if need > 0:
                    self.make_room(target, need, density)
                if self.mover.move(key, target):
                    return True
            dst = int(Tier.SSD)
        if dst == DROP:
            # with an SSD to go to, dropping was the planner's choice (recomputing is
            # cheaper); without one it is a plain eviction for lack of room
            ssd_enabled = self.store.tier_config(Tier.SSD)[0]
            return self.mover.evict(key, tier, recompute=ssd_enabled) > 0
        if dst == int(Tier.REMOTE):
            # the remote store down or refusing: a CACHE object is dropped instead
            moved = self.mover.move(key, Tier.REMOTE)
            return moved or self.mover.evict(key, tier, only_from=True) > 0
        if self.mover.move(key, Tier.SSD):
            return True
        # a CACHE object SSD cannot take: drop it (unless another thread moved it)
        return self.mover.evict(key, tier, only_from=True) > 0

    def free_ssd(self, nbytes: int) -> int:
        """Drop the least valuable CACHE objects served from SSD to free ``nbytes``."""
        with self.store.lock:
            rows = self.planner.ssd_victims(self.snapshot(Tier.SSD), nbytes)
            keys = [self.catalog.key_of(int(r)) for r in rows]
        known = [k for k in keys if k is not None]
        unknown = {int(r) for r, k in zip(rows.tolist(), keys, strict=True) if k is None}
        freed = sum(self.mover.evict(k, Tier.SSD) for k in known)
        return freed + self.mover.evict_rows(unknown, Tier.SSD)[1]

    # -- promotion on read ------------------------------------------------------------
    def _on_access(self, row: int, encoded: bytes | None) -> None:
        """Catalog hook, under the lock: the read a deadline announced happened (its
        boost ends); queue a promotion the planner wants."""
        self.deadlines.pop(row, None)
        if not self.config.promote_on_read or encoded is None:
            return
        promotion = self._promotion_for(row, time.time())
        if promotion is not None:
            self._queue(encoded, promotion)

    def _promotion_for(self, row: int, now: float) -> Promotion | None:
        c = self.catalog.index.cols
        tier = int(c["tier"][row])
        if tier <= self._top_tier or int(c["flags"][row]) & FLAG_PINNED:
            return None
        adm = self.planner.promotion_target(
            int(c["size"][row]),
            int(c["kind"][row]),
            self._rate(row, now),
            tier,
            int(c["seg"][row]) != SEG_NONE,
            self.store.tier_states(),
        )
        return None if adm is None else Promotion(Tier(adm.tier), adm.displace_below)

    def _queue(self, encoded: bytes, promotion: Promotion) -> None:
        self.promotions[encoded] = promotion
        self.promotions.move_to_end(encoded)
        while len(self.promotions) > MAX_QUEUED_PROMOTIONS:
            self.promotions.popitem(last=False)
            self.store.metrics.placement_dropped_promotions.inc()
        self.wake.set()

    def take_promotion(self, encoded: bytes) -> Promotion | None:
        """Claim a queued promotion of ``encoded`` (the reader will do it)."""
        with self.store.lock:
            return self.promotions.pop(encoded, None)

    def promote(
        self,
        encoded: bytes,
        promotion: Promotion,
        entry: Entry | None = None,
        view: memoryview | None = None,
    ) -> bool:
        """Carry out a promotion: make room (residents worth less than the object),
        then move it up — from ``view`` (the complete value of ``entry``, just read)
        if given, else by reading its current copy."""
        store = self.store
        target = promotion.target
        engine = store.memory.get(target)
        if engine is None:
            return False
        with store.lock:
            now = self.catalog.find(encoded)
            if now is None or now.tier == target or now.pinned:
                return False
            size = now.size
        high = store.tier_states()[int(target)].high_bytes
        need = engine.used_bytes + engine.cost_of(size) - high
        if need > 0:
            self.make_room(target, need, promotion.below)
        if engine.used_bytes + engine.cost_of(size) > engine.capacity_bytes:
            return False
        if entry is not None and view is not None:
            ok = self.mover.move_from(encoded, entry, view, target)
        else:
            ok = self.mover.move(encoded, target)
        store.metrics.placement_moves.labels("promote", "done" if ok else "skipped").inc()
        return ok

    # -- rebalancing ------------------------------------------------------------------
    def plan(self) -> Plan:
        started = time.perf_counter()
        now = time.time()
        with self.store.lock:  # copies only: the estimates are computed after it
            gathered = self._gather(None, now)
            states = self.store.tier_states()
            quotas = self._quotas_locked()
        objs = self._estimate(gathered, now)
        if quotas != self.planner.config.quotas:
            self.planner.config = dataclasses.replace(self.planner.config, quotas=quotas)
        plan = self.planner.plan(objs, states)
        # what each planned row held when the plan was made (its key's hash and
        # tier): rows are reused at once, and a move applied later must not land
        # on another object that took the row meanwhile (``still_planned``)
        at = np.searchsorted(gathered.rows, plan.rows)
        self._planned = dict(
            zip(
                plan.rows.tolist(),
                zip(
                    gathered.cols["check"][at].tolist(),
                    gathered.cols["tier"][at].tolist(),
                    strict=True,
                ),
                strict=True,
            )
        )
        m = self.store.metrics
        m.placement_plans.inc()
        self.last_plan_seconds = time.perf_counter() - started
        m.planner_seconds.observe(self.last_plan_seconds)
        return plan

    def key_of(self, row: int) -> bytes | None:
        with self.store.lock:
            return self.catalog.key_of(row)

    def still_planned(self, row: int) -> bool:
        """Whether ``row`` still holds the object the last plan saw there, on the
        tier it saw (live, the same key hash and tier); False for another object
        that took the row since, or the same one moved meanwhile."""
        seen = self._planned.get(row)
        if seen is None:
            return False
        cols = self.catalog.index.cols
        with self.store.lock:
            if row >= self.catalog.index.high_water_row:
                return False
            live = int(cols["flags"][row]) & FLAG_LIVE
            return bool(live) and (int(cols["check"][row]), int(cols["tier"][row])) == seen

    # -- prefetch, pin ----------------------------------------------------------------
    def _check_count(self, keys: list[ObjectKey]) -> None:
        limit = self.config.max_keys_per_request
        if len(keys) > limit:
            raise InvalidArgument(
                f"{len(keys)} keys in one request; the limit is {limit} "
                "(placement.max_keys_per_request)"
            )

    def prefetch(
        self,
        keys: list[ObjectKey],
        deadline_unix_ms: int,
        caller: str = "",
        guard: ObjectGuard | None = None,
    ) -> PrefetchResult:
        """Promote objects ahead of a read expected by the deadline (0 = now). Missing
        keys are counted, not an error (schedulers prefetch speculatively).

        A ``caller`` acting as a session prefetches only what an object read
        made as it could read, by the object service's ``guard``: objects that
        do not exist for it (a sibling's) count as missing and get no deadline.
        The owner comes from the index's session column; only an object another
        session owns has its record read, for the guard. Every key is checked,
        under the same hold of the store lock, before any deadline is set. Each
        call made as a session renews its lease (``ObjectGuard.renew``),
        whatever it finds."""
        self._check_count(keys)
        if caller:
            if guard is None:
                raise InvariantViolation("a prefetch made as a session needs the object guard")
            guard.renew(caller)
        now = time.time()
        when = deadline_unix_ms / 1000 if deadline_unix_ms else now
        queued = resident = missing = 0
        with self.store.lock:
            found: list[tuple[bytes, int]] = []
            for key in keys:
                encoded = key.encode()
                row = self.catalog.index.find(encoded)
                if row is None or (
                    guard is not None and caller and not self._readable(encoded, row, caller, guard)
                ):
                    missing += 1
                    continue
                found.append((encoded, row))
            for encoded, row in found:
                self._set_deadline(row, when)
                if row not in self.catalog.resident_keys:
                    self.catalog.remember(row, encoded)
                promotion = self._promotion_for(row, now)
                if promotion is None:
                    resident += 1
                else:
                    self._queue(encoded, promotion)
                    queued += 1
        self.store.metrics.placement_prefetches.inc(len(keys))
        return PrefetchResult(queued, resident, missing)

    def _readable(self, encoded: bytes, row: int, caller: str, guard: ObjectGuard) -> bool:
        """Whether a read made as ``caller`` would find the object at ``row``
        (``_allowed_locked`` with a read's rules; a read-only refusal is a
        False here). Call with the store lock held."""
        try:
            return self._allowed_locked(encoded, self.catalog.entry(row), caller, guard, False)
        except PermissionDenied:
            return False

    def _changeable_locked(
        self, encoded: bytes, entry: Entry, caller: str, guard: ObjectGuard | None
    ) -> bool:
        """Whether a change (a pin or an unpin) made as ``caller`` may touch the
        object ``entry``, by the rules of an object delete made as it: False
        when the object does not exist for it (a sibling's); an ancestor's
        shared with it read-only raises PermissionDenied. No caller: a trusted
        tool, True. Call with the store lock held."""
        if not caller:
            return True
        if guard is None:
            raise InvariantViolation("a pin or unpin made as a session needs the object guard")
        return self._allowed_locked(encoded, entry, caller, guard, True)

    def _allowed_locked(
        self, encoded: bytes, entry: Entry, caller: str, guard: ObjectGuard, write: bool
    ) -> bool:
        """``ObjectGuard.check_access`` of the object ``entry`` for ``caller``
        (a session), its record read only when another session owns it (the
        owner comes from the index): False when the object does not exist for
        the caller; raises what the guard raises otherwise (PermissionDenied).
        Call with the store lock held."""
        owner = int(self.catalog.index.cols["sess"][entry.row])
        if owner == 0 or self.catalog.sessions.name(owner) == caller:
            return True
        try:
            guard.check_access(self.catalog.meta(encoded, entry), caller, write=write)
        except NotFound:
            return False
        return True

    def pin(
        self,
        keys: list[ObjectKey],
        tier: Tier | None,
        caller: str = "",
        guard: ObjectGuard | None = None,
    ) -> list[Tier]:
        """Pin objects (on ``tier`` if given: moved there first). All keys must
        exist; if one cannot be placed on ``tier`` nothing is pinned.

        A ``caller`` acting as a session pins by the rules of an object change
        made as it (``_changeable_locked``): an object that does not exist for
        it (a sibling's) is refused with the NotFound of a missing key, so the
        answer tells it nothing about another session's keys; one shared with it
        read-only by a grant is PermissionDenied. Every key is checked before
        anything is moved or pinned; each call made as a session renews its
        lease (``ObjectGuard.renew``)."""
        self._check_count(keys)
        if tier is not None and (
            tier not in (Tier.HBM, Tier.DRAM, Tier.SSD) or not self.store.tier_config(tier)[0]
        ):
            raise InvalidArgument(f"cannot pin on tier {tier.name}: it is not enabled here")
        if caller and guard is not None:
            guard.renew(caller)
        encoded = [k.encode() for k in keys]
        with self.store.lock:
            for key, enc in zip(keys, encoded, strict=True):
                entry = self.catalog.find(enc)
                if entry is None or not self._changeable_locked(enc, entry, caller, guard):
                    raise NotFound(f"object {key} not found; nothing was pinned")
        if tier is not None:
            for key, enc in zip(keys, encoded, strict=True):
                self._place_for_pin(key, enc, tier)
        with self.store.lock:
            # re-checked, every key before any is pinned: one may have been
            # deleted, or another object taken its key, meanwhile; a refusal
            # (NotFound, PermissionDenied) then leaves nothing pinned
            found: list[tuple[bytes, Entry]] = []
            for key, enc in zip(keys, encoded, strict=True):
                entry = self.catalog.find(enc)
                if entry is None or not self._changeable_locked(enc, entry, caller, guard):
                    raise NotFound(
                        f"object {key} was deleted while being pinned; nothing was pinned"
                    )
                found.append((enc, entry))
            for enc, entry in found:
                self._set_pin_locked(enc, entry, True)
            return [entry.tier for _enc, entry in found]

    def _place_for_pin(self, key: ObjectKey, enc: bytes, tier: Tier) -> None:
        with self.store.lock:
            entry = self.catalog.find(enc)
            if entry is None:
                raise NotFound(f"object {key} was deleted while being pinned")
            if entry.tier == tier:
                return
            size = entry.size
        engine = self.store.memory.get(tier)
        if engine is not None and engine.used_bytes + engine.cost_of(size) > engine.capacity_bytes:
            self.make_room(tier, engine.used_bytes + engine.cost_of(size) - engine.capacity_bytes)
        if not self.mover.move(enc, tier, force=True):
            raise CapacityExceeded(
                f"could not place {key} ({size} bytes) on {tier.name} to pin it; nothing was pinned"
            )

    def unpin(
        self, keys: list[ObjectKey], caller: str = "", guard: ObjectGuard | None = None
    ) -> int:
        """Unpin objects; returns how many were pinned. Missing keys are not
        counted. A ``caller`` acting as a session unpins by the rules of an
        object change made as it (``_changeable_locked``): objects that do not
        exist for it are not counted, as missing ones; one shared with it
        read-only by a grant is PermissionDenied, and then nothing is
        unpinned. Each call made as a session renews its lease."""
        self._check_count(keys)
        if caller and guard is not None:
            guard.renew(caller)
        count = 0
        with self.store.lock:
            found: list[tuple[bytes, Entry]] = []
            for key in keys:
                enc = key.encode()
                entry = self.catalog.find(enc)
                if entry is not None and self._changeable_locked(enc, entry, caller, guard):
                    found.append((enc, entry))
            for enc, entry in found:
                if entry.pinned:
                    self._set_pin_locked(enc, entry, False)
                    count += 1
        if count:
            self.wake.set()
        return count

    def _set_pin_locked(self, enc: bytes, entry: Entry, pinned: bool) -> None:
        self.catalog.set_pinned(entry.row, pinned)
        self.catalog.store_pinned(enc, pinned)

    # -- cost -------------------------------------------------------------------------
    def cost_report(self) -> CostReport:
        store = self.store
        with store.lock:
            idx = self.catalog.index
            n = idx.high_water_row
            c = idx.cols
            rows = np.flatnonzero((c["flags"][:n] & FLAG_LIVE) != 0)
            columns = {
                name: c[name][rows].copy() for name in ("size", "tier", "kind", "ns", "sess", "seg")
            }
            namespaces = {v: k for k, v in self.catalog.namespaces.items()}
            sessions = self.catalog.sessions.names()
            capacities = {
                int(t): (e.capacity_bytes, e.used_bytes)
                for t, e in store.engines()
                if store.tier_config(t)[0]
            }
        return cost_report(
            self.cost,
            size=columns["size"],
            tier=columns["tier"],
            kind=columns["kind"],
            ssd_copy=columns["seg"] != SEG_NONE,
            ns=columns["ns"],
            session=columns["sess"],
            capacities=capacities,
            namespace_names=namespaces,
            session_names=sessions,
            top_sessions=self.config.top_sessions,
        )
