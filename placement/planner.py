"""The planner: where every object should live, and the moves that get it there.

Objective (DESIGN.md §5): minimise sum over objects of lambda_o * c_tier(o)
subject to each tier's byte budget, pins, quotas and durability rules, paying
each move's copy cost. It is solved as a greedy knapsack, fastest tier first:

1. every object's *floor* is where it goes when no memory tier takes it: SSD
   for DURABLE objects (they always have an SSD copy) and for CACHE objects
   whose SSD copy pays back its write; with a remote tier, REMOTE for the
   other CACHE objects of the kinds it takes whose remote read costs less than
   their miss (``PlannerConfig.remote_policy``); DROP (not stored: a later
   access recomputes or refetches) for the rest;
2. HBM, then DRAM, is filled by *benefit density*: accesses/s times the access
   time saved against the next tier down, per byte. An object already in the
   tier competes with its *keep value* (``keep_values``: that density plus the
   copy its eviction would need, per horizon); a challenger must first pay its move
   (``migration_cost / horizon_s``) and then beat the incumbents by the
   ``hysteresis`` margin, so estimates that wobble do not make objects flap;
3. the moves from current to target placement are ordered so that no tier
   ever holds more than its budget: forced demotions of tiers above their high
   watermark first, down to their low watermark, least valuable first; such a
   tier also drops, in the same order, the CACHE residents nothing else keeps
   (floor DROP: no SSD or remote tier, or a copy there does not pay); then
   promotions by benefit, each pulling the demotions that make its room,
   within a byte budget per plan (the migrator's bandwidth), then useless
   residents are cleared out. Only that forced step drops anything from a
   memory tier: below its high watermark a tier drops nothing, and a
   promotion into it that would need a drop waits for a later plan.

Pinned objects stay where they are. DURABLE objects are never dropped. Density
per byte is what protects one kind from another: a burst of KV blocks that are
read once cannot push out vector shards read a hundred times a second, since
the shards save more access time per byte held.

Admission (``admit``) and promotion on access (``promotion_target``) use the
per-tier thresholds of the last plan (the density of the least valuable
resident) so puts and reads between plans follow the same order; a fresh HOT
CACHE entry is also offered the memory tier above its floor, displacing
residents worth less than it would be just read (the cache rule, ``admit``).

Pure: numpy in, numpy out; the daemon and the simulator run the same code.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from tiermem.placement.cost import CostModel
from tiermem.placement.model import (
    DRAM,
    DROP,
    FLAG_DURABLE,
    FLAG_PINNED,
    FLAG_REMOTE,
    HBM,
    MEMORY_TIERS,
    REMOTE,
    SSD,
    TIERS,
    TierState,
)

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
Bool = npt.NDArray[np.bool_]

#: A tier counts as full for admission when its plan left less than this
#: fraction of its budget free.
_FULL_SLACK = 0.05

#: Entries ``Planner._fresh_value`` remembers before starting over (a learned
#: prior that drifts makes new keys; this bounds the memo, ~200 B an entry).
FRESH_VALUE_MEMO_MAX = 4096


@dataclass(frozen=True, slots=True)
class PlannerConfig:
    horizon_s: float = 30.0
    """A move must pay back its copy cost in access time saved within this time (s)."""
    keep_horizon_s: float = 300.0
    """A CACHE object's SSD copy must pay back its write in access time saved against
    recomputing within this time (s); the copy stays until the SSD needs room,
    so this may exceed ``horizon_s``."""
    hysteresis: float = 0.25
    """A challenger's density must exceed the incumbent's by this fraction."""
    max_move_bytes: int = 1 << 30
    """Bytes a plan may copy (promotions plus demotions that write an SSD copy)."""
    quotas: Mapping[tuple[int, int], int] = field(default_factory=dict)
    """(namespace id, tier) -> most bytes that namespace may hold on that tier."""
    incumbent_leave_cost: bool = True
    """Residents compete (in plans and as victims) with ``Planner.keep_values``: the
    access time they save plus the copy their eviction would need, so one without
    an SSD copy is worth keeping over one that leaves for free at the same rate.
    False: with their access density alone (the order before 2026-11-30)."""
    remote_policy: str = "instead_of_drop"
    """Which CACHE objects without an SSD place go to the REMOTE tier (when one is
    enabled and the kind may live there): "instead_of_drop" — every one whose remote
    read costs less than its miss (the copy also serves other daemons sharing the
    store); "pays_back" — only those whose own expected reads repay the upload
    within the horizon (objects with a remote copy already always qualify)."""


@dataclass(frozen=True, slots=True)
class Objects:
    """The objects to plan over: parallel columns, one entry per object."""

    rows: I64
    """Caller's ids (index rows); moves name these."""
    size: I64
    kind: npt.NDArray[Any]
    tier: npt.NDArray[Any]
    """Serving tier now (HBM/DRAM/SSD)."""
    flags: npt.NDArray[Any]
    """FLAG_DURABLE / FLAG_PINNED bits."""
    rate: F64
    """Expected accesses per second from now (AccessModel estimate plus boosts)."""
    persisted: Bool
    """An SSD copy exists (demoting to SSD copies nothing)."""
    ns: npt.NDArray[Any] | None = None
    """Namespace ids (only needed with quotas)."""
    evidence: Bool | None = None
    """True where the rate rests on more than a prior: read since written, or a
    next-access deadline. Only such objects are promoted by a plan (None = all)."""

    def __len__(self) -> int:
        return len(self.rows)

    def take(self, idx: Any) -> Objects:
        return Objects(
            self.rows[idx], self.size[idx], self.kind[idx], self.tier[idx], self.flags[idx],
            self.rate[idx], self.persisted[idx], None if self.ns is None else self.ns[idx],
            None if self.evidence is None else self.evidence[idx],
        )  # fmt: skip


@dataclass(slots=True)
class Plan:
    """Moves in the order to apply them: ``rows[i]`` from ``src[i]`` to ``dst[i]``
    (``DROP`` = evict). Applying them in order keeps every tier within its
    budget given the tier states the plan was made from."""

    rows: I64
    src: npt.NDArray[np.int64]
    dst: npt.NDArray[np.int64]
    size: I64
    thresholds: dict[int, float]
    planned_bytes: dict[int, int]
    copy_bytes: int = 0
    forced: int = 0
    deferred: int = 0

    def __len__(self) -> int:
        return len(self.rows)


@dataclass(frozen=True, slots=True)
class Admission:
    """A tier to try for a new object; ``displace_below`` > 0 allows making room
    by evicting residents of lower density than that."""

    tier: int
    displace_below: float = 0.0


@dataclass(slots=True)
class Victims:
    """Objects to move out of a tier: ``rows[i]`` to ``dst[i]``; where ``dst`` is
    a memory tier, ``dst_density`` is what the object is worth there."""

    rows: I64
    dst: npt.NDArray[np.int64]
    size: I64
    dst_density: F64

    @classmethod
    def empty(cls) -> Victims:
        e = np.empty(0, dtype=np.int64)
        return cls(e, e.copy(), e.copy(), np.empty(0))

    def __len__(self) -> int:
        return len(self.rows)


def _lowest_until(
    values: F64, sizes: I64, nbytes: int, below: float = np.inf
) -> npt.NDArray[np.intp]:
    """Indices of the smallest ``values`` (each < ``below``), in increasing
    order, until their sizes add up to ``nbytes`` (all eligible if they do not).
    Partial sorts of growing prefixes: cheap when few are needed of many."""
    eligible = np.flatnonzero(values < below)
    if len(eligible) == 0:
        return eligible
    k = 64
    while True:
        if k >= len(eligible):
            order = eligible[np.argsort(values[eligible], kind="stable")]
        else:
            part = eligible[np.argpartition(values[eligible], k)[:k]]
            order = part[np.argsort(values[part], kind="stable")]
        cum = np.cumsum(sizes[order])
        if (len(cum) and cum[-1] >= nbytes) or k >= len(eligible):
            count = min(int(np.searchsorted(cum, nbytes, side="left")) + 1, len(order))
            return order[:count]
        k *= 4


def _saved(rate: F64, delta: F64) -> F64:
    """Access time saved per second: ``rate * delta``. An infinite ``delta``
    (a DURABLE object with SSD disabled has nowhere to go) stays infinite at
    rate 0, where the product would be NaN and order as "never evict" only by
    accident of argsort, and fail every ``> 0`` test of a plan."""
    finite = np.isfinite(delta)
    return np.where(finite, rate * np.where(finite, delta, 0.0), np.inf)


class Planner:
    def __init__(self, cost: CostModel, config: PlannerConfig | None = None) -> None:
        self.cost = cost
        self.config = config or PlannerConfig()
        #: Per memory tier: density of the least valuable resident at the last
        #: plan if the tier was full, else 0 (anything worth anything fits).
        self.thresholds: dict[int, float] = {}
        #: ``_fresh_value`` results by (size, kind, rate, tier, enabled tiers):
        #: its numpy form costs ~0.2 ms for one object, and puts of one shape
        #: ask it the same question over and over (the cost model and config
        #: are frozen, so an entry never goes stale).
        self._fresh_values: dict[tuple[int, int, float, int, tuple[bool, ...]], float] = {}

    # -- helpers --------------------------------------------------------------------
    def _memory_tiers(self, tiers: Mapping[int, TierState]) -> list[int]:
        return [t for t in MEMORY_TIERS if t in tiers and tiers[t].enabled]

    def _floor(self, objs: Objects, tiers: Mapping[int, TierState]) -> tuple[F64, F64]:
        """(floor tier, access cost there) per object."""
        cost = self.cost
        ssd_ok = SSD in tiers and tiers[SSD].enabled
        c_drop = cost.access_cost(objs.size, objs.kind, DROP)
        durable = (objs.flags & FLAG_DURABLE) != 0
        if ssd_ok:
            c_ssd = cost.access_cost(objs.size, objs.kind, SSD)
            write = cost.write_cost(objs.size, SSD)
            pays = objs.rate * (c_drop - c_ssd) * self.config.keep_horizon_s > write
            to_ssd = durable | objs.persisted | pays
            floor = np.where(to_ssd, SSD, DROP).astype(np.float64)
            floor_cost = np.where(to_ssd, c_ssd, c_drop)
        else:
            to_ssd = durable
            floor = np.where(durable, SSD, DROP).astype(np.float64)
            floor_cost = np.where(durable, np.inf, c_drop)
        remote = self.remote_eligible(objs, tiers) & ~to_ssd
        if remote.any():
            c_remote = cost.access_cost(objs.size, objs.kind, REMOTE)
            floor = np.where(remote, REMOTE, floor)
            floor_cost = np.where(remote, c_remote, floor_cost)
        return floor, floor_cost

    def remote_eligible(self, objs: Objects, tiers: Mapping[int, TierState]) -> Bool:
        """Objects the REMOTE tier should keep rather than drop (see
        ``PlannerConfig.remote_policy``); all False without an enabled remote tier."""
        if REMOTE not in tiers or not tiers[REMOTE].enabled:
            return np.zeros(len(objs), dtype=bool)
        cost = self.cost
        c_drop = cost.access_cost(objs.size, objs.kind, DROP)
        c_remote = cost.access_cost(objs.size, objs.kind, REMOTE)
        ok = (objs.flags & FLAG_DURABLE) == 0
        ok &= cost.allowed(objs.kind, REMOTE) & (c_remote < c_drop)
        if self.config.remote_policy == "pays_back":
            has_copy = (objs.flags & FLAG_REMOTE) != 0
            gain = objs.rate * (c_drop - c_remote) * self.config.horizon_s
            ok &= has_copy | (gain > cost.write_cost(objs.size, REMOTE))
        return np.asarray(ok, dtype=bool)

    def floor_tiers(self, objs: Objects, tiers: Mapping[int, TierState]) -> I64:
        """Where each object goes when no memory tier keeps it: SSD, REMOTE or DROP."""
        return self._floor(objs, tiers)[0].astype(np.int64)

    def _next_cost(self, objs: Objects, tier: int, mem: list[int], floor_cost: F64) -> F64:
        """Access cost of each object on the next tier below ``tier`` that may hold it."""
        out = floor_cost.copy()
        for lower in reversed([t for t in mem if t > tier]):
            ok = self.cost.allowed(objs.kind, lower)
            out = np.where(ok, self.cost.access_cost(objs.size, objs.kind, lower), out)
        return out

    def keep_values(self, objs: Objects, tier: int, tiers: Mapping[int, TierState]) -> F64:
        """What holding each resident of ``tier`` is worth per second per byte:
        the access time it saves against where it would go, plus the copy its
        eviction would need. To the next memory tier down, that copy is paid over
        the horizon. To the floor, an object with an SSD copy (or DURABLE) leaves
        for free; one without either is dropped (a read then recomputes it) or
        written to SSD, whichever costs less over the horizon, so a session block
        that will be read back soon is not evicted as if it could leave for free,
        and the value moves continuously with the rate."""
        cost, cfg = self.cost, self.config
        mem = self._memory_tiers(tiers)
        floor, floor_cost = self._floor(objs, tiers)
        c_t = cost.access_cost(objs.size, objs.kind, tier)
        out = _saved(objs.rate, floor_cost - c_t)
        lower = None
        for t in reversed([x for x in mem if x > tier]):
            ok = cost.allowed(objs.kind, t)
            lower = ok if lower is None else (lower | ok)
        free = (objs.flags & FLAG_DURABLE) != 0
        free |= objs.persisted | (floor == REMOTE)
        if SSD in tiers and tiers[SSD].enabled:
            leave = ~free & (floor != REMOTE)
            if lower is not None:
                leave &= ~lower
            if leave.any():
                i = np.flatnonzero(leave)
                sub = objs.take(i)
                r = sub.rate
                c_drop = cost.access_cost(sub.size, sub.kind, DROP)
                c_ssd = cost.access_cost(sub.size, sub.kind, SSD)
                write = cost.write_cost(sub.size, SSD) + cost.access_cost(sub.size, sub.kind, tier)
                out[i] = np.minimum(r * c_drop, r * c_ssd + write / cfg.horizon_s) - r * c_t[i]
        if lower is not None and lower.any():
            i = np.flatnonzero(lower)
            sub = objs.take(i)
            nxt = self._next_cost(sub, tier, mem, floor_cost[i])
            dst = np.full(len(i), DROP, dtype=np.int64)
            for t in reversed([x for x in mem if x > tier]):
                dst = np.where(cost.allowed(sub.kind, t), t, dst)
            copy = np.zeros(len(i))
            for d in np.unique(dst).tolist():
                sel = dst == d
                copy[sel] = cost.migration_cost(
                    sub.size[sel], np.full(int(sel.sum()), tier), int(d), sub.persisted[sel]
                )
            out[i] = _saved(sub.rate, nxt - c_t[i]) + copy / cfg.horizon_s
        return np.asarray(out / np.maximum(objs.size, 1), dtype=np.float64)

    def densities(self, objs: Objects, tier: int, tiers: Mapping[int, TierState]) -> F64:
        """Access time saved per second per byte by holding each object on ``tier``
        rather than on the next tier down (the order victims are chosen in)."""
        mem = self._memory_tiers(tiers)
        _, floor_cost = self._floor(objs, tiers)
        nxt = self._next_cost(objs, tier, mem, floor_cost)
        gain = _saved(objs.rate, nxt - self.cost.access_cost(objs.size, objs.kind, tier))
        return np.asarray(gain / np.maximum(objs.size, 1), dtype=np.float64)

    # -- admission ------------------------------------------------------------------
    def admission_floor(
        self, size: int, kind: int, rate: float, durable: bool, tiers: Mapping[int, TierState]
    ) -> tuple[int, float]:
        """Where a new object goes when no memory tier takes it, and its access
        cost there (the per-object form of ``floor_tiers``): SSD for DURABLE
        objects and for CACHE objects whose SSD copy pays back its write within
        the horizon; REMOTE for CACHE objects the remote tier keeps instead of
        dropping; DROP (not stored) for the other CACHE objects."""
        cost = self.cost
        ssd_ok = SSD in tiers and tiers[SSD].enabled and size <= tiers[SSD].capacity_bytes
        if durable:
            return SSD, cost.access_cost_one(size, kind, SSD)
        c_drop = cost.access_cost_one(size, kind, DROP)
        if ssd_ok:
            c_ssd = cost.access_cost_one(size, kind, SSD)
            write = cost.write_cost_one(size, SSD)
            if rate * (c_drop - c_ssd) * self.config.keep_horizon_s > write:
                return SSD, c_ssd
        if REMOTE in tiers and tiers[REMOTE].enabled and cost.allowed_one(kind, REMOTE):
            c_remote = cost.access_cost_one(size, kind, REMOTE)
            gain = rate * (c_drop - c_remote) * self.config.horizon_s
            if c_remote < c_drop and (
                self.config.remote_policy == "instead_of_drop"
                or gain > cost.write_cost_one(size, REMOTE)
            ):
                return REMOTE, c_remote
        return DROP, c_drop

    def admit(
        self,
        size: int,
        kind: int,
        rate: float,
        durable: bool,
        tiers: Mapping[int, TierState],
        preferred_tier: int | None = None,
        fresh_rate: float | None = None,
    ) -> list[Admission]:
        """Tiers to try for a new object, best first. ``displace_below``: residents
        less dense than the newcomer may be moved out to make room.

        Memory tiers are offered while the object's density beats the tier's
        threshold (and, for DURABLE objects, the access time it saves within the
        horizon pays for the extra memory write); SSD closes the list.

        A CACHE object whose floor is DROP (``admission_floor``: its SSD copy
        would not pay back its write, e.g. a KV chunk its client marked COLD and
        whose class is rarely read back) is never written to SSD: it is offered
        the memory tiers like any object, only where its expected reuse also
        pays for the memory write, and the list ends with DROP: the object is
        not stored. A later read of it is a miss (the client recomputes the
        chunk), never wrong bytes. DURABLE objects never get DROP, nor does
        anything without an SSD tier to be spared (the list is then the memory
        tiers that take it on merit, possibly none).

        ``fresh_rate`` (``AccessModel.fresh_rate``: given for a new CACHE object
        whose profile is HOT, the rate it has right after one access) applies
        the cache rule: a fresh hot entry is worth more than the coldest old
        one. The memory tier just above its floor (DRAM, or HBM where only HBM
        may hold it) is offered before the floor whatever that tier's
        threshold, and may make room by moving out residents whose value there
        (``keep_values``, the measure ``victims`` orders by) is below the
        newcomer's valued the same way: a resident just read, with no SSD copy.
        Residents read again since, or hotter per byte (a vector shard read
        every second), keep their place; faster tiers still go by merit.
        Without it, a class prior that credits first reuse slowly
        (``AccessModel.min_reuse_s``) valued each new KV block below the blocks
        read once before it, so once DRAM was full every new block, however
        hot, was written to SSD and read from there."""
        cost = self.cost
        mem = self._memory_tiers(tiers)
        ssd_ok = SSD in tiers and tiers[SSD].enabled and size <= tiers[SSD].capacity_bytes
        out: list[Admission] = []
        if (
            preferred_tier is not None
            and preferred_tier in tiers
            and tiers[preferred_tier].enabled
            and size <= tiers[preferred_tier].capacity_bytes
        ):
            out.append(Admission(preferred_tier, np.inf))
        floor, floor_cost = self.admission_floor(size, kind, rate, durable, tiers)
        # dropping replaces an SSD write; without an SSD the daemon's cache rule
        # (a new entry displaces the least valuable residents) stays in charge
        droppable = floor == DROP and not durable and ssd_ok
        # the cache rule: the memory tier just above the floor, for a fresh HOT
        # CACHE entry that would otherwise go to its SSD (or REMOTE) floor
        cache_tier = None
        if fresh_rate is not None and not durable and not droppable:
            holders = [t for t in mem if cost.allowed_one(kind, t)]
            if holders and size <= tiers[holders[-1]].capacity_bytes:
                cache_tier = holders[-1]
        for t in mem:
            state = tiers[t]
            if not cost.allowed_one(kind, t) or size > state.capacity_bytes:
                continue
            nxt = floor_cost
            for lower in [x for x in mem if x > t]:
                if cost.allowed_one(kind, lower):
                    nxt = cost.access_cost_one(size, kind, lower)
                    break
            saved_per_s = rate * (nxt - cost.access_cost_one(size, kind, t))
            density = saved_per_s / max(size, 1)
            if t == cache_tier and fresh_rate is not None:
                fresh = self._fresh_value(size, kind, max(rate, fresh_rate), t, tiers)
                if fresh > 0:
                    out.append(Admission(t, max(density, fresh)))
                    continue
            if density <= 0:
                continue
            # a DURABLE object is written to SSD anyway: a memory copy is extra and
            # must pay its write back within the horizon; so must a droppable
            # CACHE object's (not storing it at all costs nothing)
            if (durable or droppable) and saved_per_s * self.config.horizon_s < (
                cost.write_cost_one(size, t)
            ):
                continue
            if density >= self.thresholds.get(t, 0.0):
                out.append(Admission(t, density))
        if droppable:
            out.append(Admission(DROP))
        elif ssd_ok:
            out.append(Admission(SSD))
        seen: set[int] = set()
        return [a for a in out if not (a.tier in seen or seen.add(a.tier))]  # type: ignore[func-returns-value]

    def _fresh_value(
        self, size: int, kind: int, rate: float, tier: int, tiers: Mapping[int, TierState]
    ) -> float:
        """What a new object at ``rate`` would be worth as a resident of ``tier``,
        in the measure ``victims`` compares residents by (``keep_values``, or
        ``densities`` without ``incumbent_leave_cost``)."""
        enabled = tuple(t in tiers and tiers[t].enabled for t in TIERS)
        key = (size, kind, rate, tier, enabled)
        value = self._fresh_values.get(key)
        if value is None:
            value = self._fresh_value_uncached(size, kind, rate, tier, tiers)
            if len(self._fresh_values) >= FRESH_VALUE_MEMO_MAX:
                self._fresh_values.clear()
            self._fresh_values[key] = value
        return value

    def _fresh_value_uncached(
        self, size: int, kind: int, rate: float, tier: int, tiers: Mapping[int, TierState]
    ) -> float:
        one = Objects(
            rows=np.zeros(1, dtype=np.int64),
            size=np.array([size], dtype=np.int64),
            kind=np.array([kind], dtype=np.int64),
            tier=np.array([tier], dtype=np.int64),
            flags=np.zeros(1, dtype=np.uint8),
            rate=np.array([rate], dtype=np.float64),
            persisted=np.zeros(1, dtype=bool),
        )
        if self.config.incumbent_leave_cost:
            return float(self.keep_values(one, tier, tiers)[0])
        return float(self.densities(one, tier, tiers)[0])

    # -- promotion on access --------------------------------------------------------
    def promotion_target(
        self,
        size: int,
        kind: int,
        rate: float,
        tier: int,
        persisted: bool,
        tiers: Mapping[int, TierState],
    ) -> Admission | None:
        """The memory tier an object just read from ``tier`` should move up to now,
        if its access rate pays for the copy and beats the tier's residents."""
        cost = self.cost
        here = cost.access_cost_one(size, kind, tier)
        h = self.config
        for t in self._memory_tiers(tiers):
            if t >= tier or not cost.allowed_one(kind, t):
                continue
            if size > tiers[t].capacity_bytes:
                continue
            move = cost.migration_cost_one(size, tier, t, persisted)
            gain = rate * (here - cost.access_cost_one(size, kind, t)) - move / h.horizon_s
            key = gain / max(size, 1) / (1.0 + h.hysteresis)
            if key <= 0:
                continue
            if key >= self.thresholds.get(t, 0.0):
                return Admission(t, key)
        return None

    # -- making room ----------------------------------------------------------------
    def victims(
        self,
        objs: Objects,
        tier: int,
        nbytes: int,
        tiers: Mapping[int, TierState],
        below_density: float = np.inf,
    ) -> Victims:
        """Residents of ``tier`` to move out to free ``nbytes``: least dense first,
        only those less dense than ``below_density``, never pinned ones.

        Each victim goes to the next memory tier down if it is worth a place
        there (its density there beats that tier's threshold; ``dst_density``
        says by how much, for making room there in turn), else to its floor:
        SSD, or DROP for CACHE objects whose SSD copy would not pay back."""
        sel = (objs.tier == tier) & ((objs.flags & FLAG_PINNED) == 0)
        sub = objs.take(np.flatnonzero(sel))
        if nbytes <= 0 or len(sub) == 0:
            return Victims.empty()
        if self.config.incumbent_leave_cost:
            dens = self.keep_values(sub, tier, tiers)
        else:
            dens = self.densities(sub, tier, tiers)
        pick = _lowest_until(dens, sub.size, nbytes, below_density)
        if len(pick) == 0:
            return Victims.empty()
        picked = sub.take(pick)
        floor, _ = self._floor(picked, tiers)
        dst = floor.astype(np.int64)
        dst_density = np.zeros(len(pick))
        lower = [t for t in self._memory_tiers(tiers) if t > tier]
        if lower:
            nxt = lower[0]
            there = self.densities(picked, nxt, tiers)
            worth = self.cost.allowed(picked.kind, nxt) & (there > 0)
            worth &= there >= self.thresholds.get(nxt, 0.0)
            dst = np.where(worth, nxt, dst)
            dst_density = np.where(worth, there, 0.0)
        return Victims(picked.rows, dst, picked.size, dst_density)

    # -- planning -------------------------------------------------------------------
    def plan(self, objs: Objects, tiers: Mapping[int, TierState]) -> Plan:
        """Target placement for ``objs`` and the ordered moves towards it."""
        cfg = self.config
        cost = self.cost
        n = len(objs)
        mem = self._memory_tiers(tiers)
        pinned = (objs.flags & FLAG_PINNED) != 0
        floor, floor_cost = self._floor(objs, tiers)
        target = objs.tier.astype(np.int64).copy()
        assigned = pinned.copy()
        key = np.zeros(n)
        density = np.zeros(n)
        thresholds: dict[int, float] = {}
        planned: dict[int, int] = {}
        for t in mem:
            state = tiers[t]
            in_t_pinned = pinned & (objs.tier == t)
            budget = state.plan_bytes - int(objs.size[in_t_pinned].sum())
            cand = ~assigned & cost.allowed(objs.kind, t) & (objs.size <= state.capacity_bytes)
            c_t = cost.access_cost(objs.size, objs.kind, t)
            gain = _saved(objs.rate, self._next_cost(objs, t, mem, floor_cost) - c_t)
            size_f = np.maximum(objs.size, 1).astype(np.float64)
            dens = gain / size_f
            incumbent = objs.tier == t
            mig = cost.migration_cost(objs.size, objs.tier, t, objs.persisted)
            challenger = (gain - mig / cfg.horizon_s) / size_f / (1.0 + cfg.hysteresis)
            k = np.where(incumbent, dens, challenger)
            if cfg.incumbent_leave_cost:  # a resident also saves the copy out
                inc = np.flatnonzero(incumbent)
                k[inc] = self.keep_values(objs.take(inc), t, tiers)
            if objs.evidence is not None:  # moving up needs evidence, not just a prior
                cand &= incumbent | (objs.tier < t) | objs.evidence
            idx = np.flatnonzero(cand & (k > 0))
            chosen = self._select(idx, k, objs, t, budget)
            target[chosen] = t
            assigned[chosen] = True
            key[chosen] = k[chosen]
            density[chosen] = dens[chosen]
            used = int(objs.size[chosen].sum())
            planned[t] = used + int(objs.size[in_t_pinned].sum())
            full = budget - used < _FULL_SLACK * max(budget, 1)
            thresholds[t] = float(dens[chosen].min()) if full and len(chosen) else 0.0
        rest = ~assigned
        in_memory_rest = rest & np.isin(objs.tier, mem)
        target[in_memory_rest] = floor[in_memory_rest].astype(np.int64)
        # objects already on SSD stay there (their floor may say DROP: only
        # drop them when SSD itself needs room, below)
        moves = np.flatnonzero(target != objs.tier)
        self.thresholds = thresholds
        remote_ok = self.remote_eligible(objs, tiers)
        plan = self._order(objs, moves, target, key, tiers, mem, remote_ok)
        plan.thresholds = thresholds
        plan.planned_bytes = planned
        if SSD in tiers and tiers[SSD].enabled:
            self._drop_cache(objs, tiers[SSD], plan, remote_ok)
        if REMOTE in tiers:
            self._drop_cache(objs, tiers[REMOTE], plan, np.zeros(len(objs), dtype=bool))
        return plan

    def _select(self, idx: I64, key: F64, objs: Objects, tier: int, budget: int) -> I64:
        """Greedy knapsack: highest key first within ``budget`` bytes (one extra
        pass fills the remainder with smaller items), honouring quotas."""
        if len(idx) == 0 or budget <= 0:
            return np.empty(0, dtype=np.int64)
        order = idx[np.argsort(-key[idx], kind="stable")]
        if self.config.quotas and objs.ns is not None:
            keep = np.ones(len(order), dtype=bool)
            for (ns, t), limit in self.config.quotas.items():
                if t != tier:
                    continue
                mine = objs.ns[order] == ns
                over = mine & (np.cumsum(np.where(mine, objs.size[order], 0)) > limit)
                keep &= ~over
            order = order[keep]
        sizes = objs.size[order]
        cum = np.cumsum(sizes)
        cut = int(np.searchsorted(cum, budget, side="right"))
        chosen = order[:cut]
        left = budget - (int(cum[cut - 1]) if cut else 0)
        rest = order[cut:]
        if left > 0 and len(rest):
            more = []
            for i, s in zip(rest.tolist(), objs.size[rest].tolist(), strict=True):
                if s <= left:
                    more.append(i)
                    left -= s
            chosen = np.concatenate([chosen, np.asarray(more, dtype=np.int64)])
        return chosen.astype(np.int64)

    def _order(
        self,
        objs: Objects,
        moves: I64,
        target: npt.NDArray[np.int64],
        key: F64,
        tiers: Mapping[int, TierState],
        mem: list[int],
        remote_ok: Bool,
    ) -> Plan:
        return _MoveOrder(self, objs, target, tiers, mem, remote_ok).run(moves, key)

    def ssd_victims(self, objs: Objects, nbytes: int, tier: int = SSD) -> I64:
        """CACHE objects served from SSD (or ``tier``: REMOTE) to drop to free
        ``nbytes`` there, least valuable first (never DURABLE or pinned ones).
        Returns caller rows."""
        sel = (objs.tier == tier) & ((objs.flags & (FLAG_DURABLE | FLAG_PINNED)) == 0)
        if tier == SSD:
            sel &= objs.persisted
        idx = np.flatnonzero(sel)
        if len(idx) == 0 or nbytes <= 0:
            return np.empty(0, dtype=np.int64)
        sub = objs.take(idx)
        c_here = self.cost.access_cost(sub.size, sub.kind, tier)
        c_drop = self.cost.access_cost(sub.size, sub.kind, DROP)
        dens = sub.rate * (c_drop - c_here) / np.maximum(sub.size, 1)
        return np.asarray(sub.rows[_lowest_until(dens, sub.size, nbytes)], dtype=np.int64)

    def _drop_cache(self, objs: Objects, state: TierState, plan: Plan, remote_ok: Bool) -> None:
        """SSD (or REMOTE) above its high watermark: the least valuable CACHE objects
        it serves leave until it is back at its low watermark (appended to the plan):
        to REMOTE where ``remote_ok`` (SSD only), else dropped."""
        if state.used_bytes <= state.high_bytes:
            return
        keep = ~np.isin(objs.rows, plan.rows)
        sub = objs.take(np.flatnonzero(keep))
        rows = self.ssd_victims(sub, state.used_bytes - state.low_bytes, state.tier)
        if len(rows) == 0:
            return
        sizes = (
            objs.size[np.searchsorted(objs.rows, rows)]
            if _sorted(objs.rows)
            else np.array(
                [int(objs.size[np.flatnonzero(objs.rows == r)[0]]) for r in rows], dtype=np.int64
            )
        )
        dst = np.full(len(rows), DROP, np.int64)
        if remote_ok.any():
            eligible = set(objs.rows[remote_ok].tolist())
            dst[[r in eligible for r in rows.tolist()]] = REMOTE
        plan.rows = np.concatenate([plan.rows, rows]).astype(np.int64)
        plan.src = np.concatenate([plan.src, np.full(len(rows), state.tier, np.int64)])
        plan.dst = np.concatenate([plan.dst, dst])
        plan.size = np.concatenate([plan.size, sizes]).astype(np.int64)
        plan.forced += len(rows)


class _MoveOrder:
    """Orders a target placement's moves so that applying them in sequence keeps
    every tier within its budget. A class rather than nested closures: the
    recursive ``demote_one`` as a closure would form a reference cycle holding
    the whole snapshot until a full GC pass (hundreds of MiB at 1M objects)."""

    def __init__(
        self,
        planner: Planner,
        objs: Objects,
        target: npt.NDArray[np.int64],
        tiers: Mapping[int, TierState],
        mem: list[int],
        remote_ok: Bool,
    ) -> None:
        self.planner = planner
        #: CACHE objects that go REMOTE rather than being dropped
        self.remote_ok = remote_ok
        self.objs = objs
        self.target = target
        self.tiers = tiers
        self.mem = mem
        self.src_all = objs.tier.astype(np.int64)
        self.used = {t: s.used_bytes for t, s in tiers.items()}
        self.limit = {t: s.plan_bytes for t, s in tiers.items()}
        ssd = tiers.get(SSD)
        self.ssd_limit = ssd.high_bytes if ssd is not None else 0
        self.budget = planner.config.max_move_bytes
        self.out: list[tuple[int, int, int]] = []
        self.done = np.zeros(len(objs), dtype=bool)
        self.copy_bytes = 0
        self.outgoing: dict[int, deque[int]] = {}
        #: Memory tiers above their high watermark when the plan was made: the
        #: only ones a plan drops CACHE residents from, and only in step 1
        #: (``dropping``), while they are above their plan budget.
        self.over = {t for t in mem if tiers[t].used_bytes > tiers[t].high_bytes}
        self.dropping = False
        #: Moves left out because they would have dropped a resident of a tier
        #: not above its high watermark (or after step 1).
        self.held = 0

    def copies(self, i: int, dst: int) -> bool:
        if dst == REMOTE:  # a published object has its remote copy already
            return not self.objs.flags[i] & FLAG_REMOTE
        return dst != DROP and not (dst == SSD and bool(self.objs.persisted[i]))

    def apply(self, i: int, dst: int) -> None:
        used = self.used
        s = int(self.objs.size[i])
        src = int(self.src_all[i])
        if src in self.mem:
            used[src] -= s
        if dst in used and dst != SSD:
            used[dst] += s
        if dst == SSD and not self.objs.persisted[i]:
            used[SSD] = used.get(SSD, 0) + s
        if self.copies(i, dst):
            self.copy_bytes += s
        self.out.append((i, src, dst))
        self.done[i] = True

    def demote_one(self, t: int) -> bool:
        """Apply the next pending demotion out of ``t``; False if none can go."""
        objs, used, limit, mem = self.objs, self.used, self.limit, self.mem
        queue = self.outgoing[t]
        while queue:
            i = queue.popleft()
            if self.done[i]:
                continue
            dst = int(self.target[i])
            s = int(objs.size[i])
            if (dst in mem and used[dst] + s > limit[dst]) and (
                not self.demote_one(dst) or used[dst] + s > limit[dst]
            ):
                dst = int(self.planner._floor(objs.take([i]), self.tiers)[0][0])
            if dst == SSD and not objs.persisted[i] and used.get(SSD, 0) + s > self.ssd_limit:
                if (objs.flags[i] & FLAG_DURABLE) != 0:
                    continue
                dst = REMOTE if self.remote_ok[i] else DROP
            if dst == DROP and not (self.dropping and t in self.over):
                # a tier not above its high watermark drops nothing: the move waits
                self.held += 1
                continue
            if self.copies(i, dst):
                if s > self.budget:
                    queue.appendleft(i)
                    return False
                self.budget -= s
            self.target[i] = dst
            self.apply(i, dst)
            return True
        return False

    def run(self, moves: I64, key: F64) -> Plan:
        objs, tiers, mem, target = self.objs, self.tiers, self.mem, self.target
        size, src_all, used, limit = objs.size, self.src_all, self.used, self.limit
        # Demotions grouped by source tier, least valuable first; a tier above
        # its high watermark also sheds the CACHE residents nothing else keeps
        # (target DROP), interleaved with its demotions in the same order.
        droppable = (objs.flags[moves] & (FLAG_DURABLE | FLAG_PINNED)) == 0
        for t in mem:
            out_of_t = target[moves] > t
            if t in self.over:
                out_of_t |= (target[moves] == DROP) & droppable
            leaving = moves[(src_all[moves] == t) & out_of_t]
            # least valuable first: objects not chosen anywhere have key 0
            dens = (
                self.planner.densities(objs.take(leaving), t, tiers)
                if len(leaving)
                else np.zeros(0)
            )
            self.outgoing[t] = deque(int(i) for i in leaving[np.argsort(dens, kind="stable")])
        # 1. forced: tiers above their high watermark come down to their plan budget
        # (drops included, and the moves each pulls out of the tier below)
        self.dropping = True
        for t in reversed(mem):
            if t in self.over:
                while used[t] > limit[t]:
                    saved = self.budget
                    self.budget = max(saved, 1 << 62)  # forced moves are not budgeted
                    ok = self.demote_one(t)
                    self.budget = saved
                    if not ok:
                        break
        self.dropping = False
        forced = len(self.out)
        # what step 1 did not need to drop stays: nothing is dropped below a
        # tier's plan budget (nor to make room for a promotion)
        for t in mem:
            self.outgoing[t] = deque(i for i in self.outgoing[t] if target[i] != DROP)
        # 2. moves into memory tiers by benefit, each making its own room
        incoming = moves[
            np.isin(target[moves], mem)
            & ((target[moves] < src_all[moves]) | ~np.isin(src_all[moves], mem))
        ]
        incoming = incoming[np.argsort(-(key[incoming] * size[incoming]), kind="stable")]
        deferred = 0
        for i in (int(x) for x in incoming):
            if self.done[i]:
                continue
            dst = int(target[i])
            s = int(size[i])
            if s > self.budget:
                deferred += 1
                continue
            while used[dst] + s > limit[dst]:
                if not self.demote_one(dst):
                    break
            if used[dst] + s > limit[dst] or s > self.budget:
                deferred += 1
                continue
            self.budget -= s
            self.apply(i, dst)
        # 3. residents no tier wants any more leave while the budget allows
        for t in reversed(mem):
            while self.outgoing[t]:
                if not self.demote_one(t):
                    break
        deferred += int(sum(len(q) for q in self.outgoing.values())) + self.held
        out = self.out
        moved = np.array([o[0] for o in out], dtype=np.int64)
        return Plan(
            rows=objs.rows[moved].astype(np.int64),
            src=np.array([o[1] for o in out], dtype=np.int64),
            dst=np.array([o[2] for o in out], dtype=np.int64),
            size=size[moved].astype(np.int64),
            thresholds={},
            planned_bytes={},
            copy_bytes=self.copy_bytes,
            forced=forced,
            deferred=deferred,
        )


def _sorted(a: I64) -> bool:
    return bool(len(a) < 2 or np.all(a[1:] >= a[:-1]))


__all__ = [
    "DRAM",
    "HBM",
    "Admission",
    "Objects",
    "Plan",
    "Planner",
    "PlannerConfig",
    "Victims",
]
