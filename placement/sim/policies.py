"""Policies the simulator compares, all on the same trace, engine and costs.

* :class:`Tiermem` — the daemon's own ``Planner`` and ``AccessModel``: cost-
  based admission, promotion on access, a plan every tick with a migration
  byte budget, prefetch hints.
* :class:`GlobalLru` — one LRU across all kinds: every put and every read goes
  to the fastest tier the kind may use; the least recently used object of a
  full tier moves one tier down. COLD-hinted puts go straight to SSD (the
  foundation's admission rule).
* :class:`SiloedLru` — static partitions: each kind owns a fixed share of HBM
  and DRAM with its own LRU (what separate KV cache, vector store, blob cache
  and scratch store each tuned on their own amount to). Shares come from
  :func:`silo_shares`.
* :class:`OracleKnapsack` — offline, with future knowledge: every epoch it
  fills HBM then DRAM by the exact number of reads each object will get in a
  look-ahead window (greedy knapsack by saved access time per byte, net of the
  move), drops CACHE objects that are never read again, and places new
  objects where the epoch's plan wants them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from tiermem.placement.access import AccessModel, PriorLearner, session_kv
from tiermem.placement.model import (
    COLD,
    DRAM,
    DROP,
    FLAG_DURABLE,
    HBM,
    KINDS,
    MEMORY_TIERS,
    SSD,
)
from tiermem.placement.planner import Objects, Planner, PlannerConfig
from tiermem.placement.sim.engine import Engine
from tiermem.placement.sim.trace import GET, PUT, Trace


# -- tiermem --------------------------------------------------------------------------
class Tiermem:
    """The daemon's planner driven the way the daemon drives it."""

    def __init__(
        self,
        access: AccessModel | None = None,
        planner_config: PlannerConfig | None = None,
        use_hints: bool = True,
        name: str = "tiermem",
    ) -> None:
        self.name = name
        self.access = access or AccessModel()
        self._planner_config = planner_config
        self.use_hints = use_hints

    def attach(self, engine: Engine) -> None:
        self.eng = engine
        n = engine.trace.objects
        cfg = self._planner_config or PlannerConfig(
            max_move_bytes=int(engine.config.migrate_bandwidth_bytes_per_s * engine.config.tick_s)
        )
        self.planner = Planner(engine.cost, cfg)
        self.rate = np.zeros(n, dtype=np.float64)
        self.atime = np.zeros(n, dtype=np.float64)
        self.deadline = np.zeros(n, dtype=np.float64)
        self.flags = np.where(engine.durable, FLAG_DURABLE, 0).astype(np.uint8)
        self.seen = np.zeros(n, dtype=bool)
        #: KV blocks of a session (their rates fade faster; the daemon's ``sess`` column)
        self.session = session_kv(engine.kind, engine.trace.session)
        self.learner = PriorLearner(self.access)
        self.plans = 0
        #: puts admission did not store (CACHE objects not worth an SSD copy)
        self.dropped_puts = 0
        #: puts admission would not keep that went to SSD for lack of free memory
        self.ssd_fallbacks = 0

    def _objects(self, idx: npt.NDArray[np.int64], now: float) -> Objects:
        eng = self.eng
        rate = self.learner.estimate(
            self.rate[idx], self.atime[idx], self.seen[idx], eng.kind[idx],
            eng.hint[idx], now, self.session[idx],
        )  # fmt: skip
        if self.use_hints:
            rate = rate + self.access.deadline_boost(self.deadline[idx], now)
        return Objects(
            rows=idx,
            size=eng.size[idx],
            kind=eng.kind[idx],
            tier=eng.tier[idx],
            flags=self.flags[idx],
            rate=rate,
            persisted=eng.persisted[idx],
            evidence=self.seen[idx] | (self.deadline[idx] > 0),
        )

    def _rate_now(self, o: int, now: float) -> float:
        if self.seen[o]:
            r = self.access.estimate_one(
                float(self.rate[o]), float(self.atime[o]), now, bool(self.session[o])
            )
        else:
            kind, hint = int(self.eng.kind[o]), int(self.eng.hint[o])
            r = self.learner.estimate_unseen(kind, hint, float(self.atime[o]), now)
        if self.use_hints:
            r += self.access.deadline_boost_one(float(self.deadline[o]), now)
        return r

    def _make_room(self, tier: int, need: int, below: float, now: float) -> None:
        eng = self.eng
        if need <= 0:
            return
        idx = np.flatnonzero(eng.tier == tier)
        v = self.planner.victims(self._objects(idx, now), tier, need, eng.tier_states(), below)
        for o, dst, d in zip(v.rows.tolist(), v.dst.tolist(), v.dst_density.tolist(), strict=True):
            self._evict(o, dst, d, now)

    def _evict(self, o: int, dst: int, density: float, now: float) -> None:
        eng = self.eng
        size = int(eng.size[o])
        if dst in MEMORY_TIERS and not eng.fits(dst, size):
            self._make_room(dst, eng.used[dst] + size - eng.capacity[dst], density, now)
            if not eng.fits(dst, size):
                dst = SSD if eng.durable[o] or eng.persisted[o] else self._floor(o, now)
        if dst == DROP:
            eng.drop(o)
        else:
            eng.move(o, dst)

    def _floor(self, o: int, now: float) -> int:
        idx = np.array([o], dtype=np.int64)
        return int(self.planner.floor_tiers(self._objects(idx, now), self.eng.tier_states())[0])

    def on_put(self, o: int, t: float) -> None:
        eng = self.eng
        kind = int(eng.kind[o])
        hint = int(eng.hint[o])
        prior = self.learner.prior(kind, hint)
        self.learner.on_put(kind, hint, t)
        self.seen[o] = False
        self.rate[o] = prior
        self.atime[o] = t
        size = int(eng.size[o])
        durable = bool(eng.durable[o])
        fresh = self.access.fresh_rate(kind, hint, durable, prior)
        for adm in self.planner.admit(
            size, kind, prior, durable, eng.tier_states(), fresh_rate=fresh
        ):
            if adm.tier == DROP:
                # the daemon receives the bytes in free memory and drops them
                # after the commit; with no free memory it writes an SSD copy
                if any(eng.fits(m, size) for m in eng.memory_tiers()):
                    self.dropped_puts += 1
                    eng.place(o, DROP)
                else:
                    self.ssd_fallbacks += 1
                    eng.place(o, SSD)
                return
            if adm.tier == SSD:
                eng.place(o, SSD)
                return
            if not eng.fits(adm.tier, size) and adm.displace_below > 0:
                need = eng.used[adm.tier] + size - eng.capacity[adm.tier]
                self._make_room(adm.tier, need, adm.displace_below, t)
            if eng.fits(adm.tier, size):
                eng.place(o, adm.tier)
                return
        eng.place(o, SSD if durable or eng.capacity.get(SSD, 0) else DROP)

    def on_get(self, o: int, t: float) -> None:
        if not self.seen[o]:
            self.seen[o] = True
            kind, hint = int(self.eng.kind[o]), int(self.eng.hint[o])
            self.learner.on_first_read(kind, hint, t - float(self.atime[o]), t)
        self.rate[o] = self.access.record_one(
            float(self.rate[o]), float(self.atime[o]), t, bool(self.session[o])
        )
        self.atime[o] = t
        self.deadline[o] = 0.0  # the announced read happened
        self._promote(o, t)

    def _promote(self, o: int, t: float, piggyback: bool = True) -> None:
        """Promotion decided on a read copies from the bytes just read (the
        daemon promotes from the read's buffer); on a prefetch it copies anew."""
        eng = self.eng
        tier = int(eng.tier[o])
        if tier in (HBM, DROP):
            return
        size = int(eng.size[o])
        states = eng.tier_states()
        adm = self.planner.promotion_target(
            size, int(eng.kind[o]), self._rate_now(o, t), tier, bool(eng.persisted[o]), states
        )
        if adm is None:
            return
        state = states[adm.tier]
        need = state.used_bytes + size - state.high_bytes
        self._make_room(adm.tier, need, adm.displace_below, t)
        if eng.used[adm.tier] + size <= state.high_bytes:
            eng.move(o, adm.tier, piggyback=piggyback)

    def on_delete(self, o: int, t: float) -> None:
        self.deadline[o] = 0.0

    def on_prefetch(self, o: int, deadline: float, t: float) -> None:
        if not self.use_hints:
            return
        self.deadline[o] = deadline
        self._promote(o, t, piggyback=False)

    def tick(self, t: float) -> None:
        eng = self.eng
        idx = np.flatnonzero(eng.alive & (eng.tier != DROP))
        plan = self.planner.plan(self._objects(idx, t), eng.tier_states())
        self.plans += 1
        for o, src, dst in zip(
            plan.rows.tolist(), plan.src.tolist(), plan.dst.tolist(), strict=True
        ):
            if int(eng.tier[o]) != src:
                continue
            if dst == DROP:
                eng.drop(o)
            elif dst == SSD or eng.fits(dst, int(eng.size[o])):
                eng.move(o, dst)


# -- LRU baselines --------------------------------------------------------------------
class _PartitionedLru:
    """LRU chains per partition and memory tier; partition capacities are bytes."""

    def __init__(self, name: str, caps: Mapping[int, Mapping[int, int]], by_kind: bool) -> None:
        self.name = name
        self.caps = {p: dict(c) for p, c in caps.items()}
        self.by_kind = by_kind

    def attach(self, engine: Engine) -> None:
        self.eng = engine
        self.lru: dict[tuple[int, int], OrderedDict[int, None]] = {}
        self.used: dict[tuple[int, int], int] = {}
        for p, caps in self.caps.items():
            for t in MEMORY_TIERS:
                self.lru[(p, t)] = OrderedDict()
                self.used[(p, t)] = 0
                caps.setdefault(t, 0)

    def _part(self, o: int) -> int:
        return int(self.eng.kind[o]) if self.by_kind else 0

    def _tiers(self, o: int) -> list[int]:
        """Memory tiers this object may use, fastest first."""
        eng = self.eng
        p = self._part(o)
        size = int(eng.size[o])
        kind = int(eng.kind[o])
        return [
            t
            for t in MEMORY_TIERS
            if eng.cost.allowed_one(kind, t) and 0 < size <= self.caps[p].get(t, 0)
        ]

    def _room(self, p: int, t: int, size: int) -> None:
        chain = self.lru[(p, t)]
        cap = self.caps[p][t]
        while self.used[(p, t)] + size > cap and chain:
            victim, _ = chain.popitem(last=False)
            self.used[(p, t)] -= int(self.eng.size[victim])
            self._demote(victim, t)

    def _demote(self, o: int, t: int) -> None:
        eng = self.eng
        lower = [x for x in self._tiers(o) if x > t]
        if lower:
            nxt = lower[0]
            p = self._part(o)
            size = int(eng.size[o])
            self._room(p, nxt, size)
            eng.move(o, nxt)
            self.lru[(p, nxt)][o] = None
            self.used[(p, nxt)] += size
        else:
            eng.move(o, SSD)

    def _insert(self, o: int, t: int) -> None:
        p = self._part(o)
        self.lru[(p, t)][o] = None
        self.used[(p, t)] += int(self.eng.size[o])

    def _remove(self, o: int) -> None:
        t = int(self.eng.tier[o])
        if t in MEMORY_TIERS:
            p = self._part(o)
            if self.lru[(p, t)].pop(o, 1) is None:
                self.used[(p, t)] -= int(self.eng.size[o])

    def on_put(self, o: int, t: float) -> None:
        eng = self.eng
        tiers = self._tiers(o)
        if not tiers or int(eng.hint[o]) == COLD:
            eng.place(o, SSD)
            return
        top = tiers[0]
        self._room(self._part(o), top, int(eng.size[o]))
        eng.place(o, top)
        self._insert(o, top)

    def on_get(self, o: int, t: float) -> None:
        eng = self.eng
        tier = int(eng.tier[o])
        tiers = self._tiers(o)
        if not tiers:
            return
        top = tiers[0]
        p = self._part(o)
        if tier == top:
            self.lru[(p, tier)].move_to_end(o)
            return
        size = int(eng.size[o])
        if tier in MEMORY_TIERS:
            self.lru[(p, tier)].pop(o, None)  # its bytes stay counted until it has moved
        self._room(p, top, size)
        eng.move(o, top, piggyback=True)
        if tier in MEMORY_TIERS:
            self.used[(p, tier)] -= size
        self._insert(o, top)

    def on_delete(self, o: int, t: float) -> None:
        self._remove(o)

    def on_prefetch(self, o: int, deadline: float, t: float) -> None:
        return

    def tick(self, t: float) -> None:
        return


class GlobalLru(_PartitionedLru):
    def __init__(self, capacities: Mapping[int, int], name: str = "global_lru") -> None:
        super().__init__(name, {0: {t: capacities.get(t, 0) for t in MEMORY_TIERS}}, False)


class SiloedLru(_PartitionedLru):
    def __init__(self, shares: Mapping[int, Mapping[int, int]], name: str = "siloed_lru") -> None:
        super().__init__(name, shares, True)


def working_sets(trace: Trace, window_s: float = 60.0, step_s: float = 10.0) -> dict[int, float]:
    """Time-averaged bytes of distinct objects of each kind touched (put or read)
    in a trailing window: what each silo needs to hold its working set."""
    out = {k: 0.0 for k in KINDS}
    starts = np.arange(window_s, trace.params.duration_s + 1e-9, step_s)
    touched = (trace.op == GET) | (trace.op == PUT)
    t, obj = trace.t[touched], trace.obj[touched]
    for end in starts:
        lo, hi = np.searchsorted(t, [end - window_s, end])
        uniq = np.unique(obj[lo:hi])
        for k in KINDS:
            out[k] += float(trace.size[uniq][trace.kind[uniq] == k].sum())
    return {k: v / max(len(starts), 1) for k, v in out.items()}


def silo_shares(
    trace: Trace, capacities: Mapping[int, int], engine_cost_allowed: Mapping[int, set[int]]
) -> dict[int, dict[int, int]]:
    """Each kind's share of each memory tier, proportional to its time-averaged
    working set (among the kinds that may use the tier): how an operator would
    size separate systems from the workload's average demand."""
    ws = working_sets(trace)
    shares: dict[int, dict[int, int]] = {k: {} for k in KINDS}
    for t in MEMORY_TIERS:
        kinds = [k for k in KINDS if t in engine_cost_allowed.get(k, set())]
        total = sum(ws[k] for k in kinds)
        for k in kinds:
            frac = ws[k] / total if total > 0 else 1.0 / len(kinds)
            shares[k][t] = int(capacities.get(t, 0) * frac)
    return shares


# -- offline oracle -------------------------------------------------------------------
class OracleKnapsack:
    """Per-epoch knapsack with the future's exact read counts (see module doc)."""

    def __init__(self, epoch_s: float = 2.0, lookahead_s: float = 8.0, name: str = "") -> None:
        self.epoch_s = epoch_s
        self.lookahead_s = lookahead_s
        self.name = name or "oracle"

    def attach(self, engine: Engine) -> None:
        self.eng = engine
        tr = engine.trace
        gets = tr.op == GET
        g_obj = tr.obj[gets].astype(np.float64)
        g_t = tr.t[gets]
        self._scale = float(tr.params.duration_s) * 4 + 10.0
        self._keys = np.sort(g_obj * self._scale + g_t)
        puts = tr.op == PUT
        self._put_t = tr.t[puts]
        self._put_obj = tr.obj[puts]
        self.planned: dict[int, int] = {}
        self.next_epoch = 0.0

    def _count(self, objs: npt.NDArray[np.int64], a: float, b: float) -> npt.NDArray[np.int64]:
        base = objs.astype(np.float64) * self._scale
        lo = np.searchsorted(self._keys, base + a, side="left")
        hi = np.searchsorted(self._keys, base + min(b, self._scale - 1), side="left")
        return np.asarray(hi - lo, dtype=np.int64)

    def _floor_tier(self, o: int, now: float) -> int:
        eng = self.eng
        if eng.durable[o]:
            return SSD
        return SSD if int(self._count(np.array([o]), now, np.inf)[0]) > 0 else DROP

    def _replan(self, now: float) -> None:
        eng = self.eng
        end = now + self.epoch_s
        lo, hi = np.searchsorted(self._put_t, [now, end])
        new = np.unique(self._put_obj[lo:hi])
        new = new[~eng.alive[new] | (eng.tier[new] == DROP)]
        stored = np.flatnonzero(eng.alive & (eng.tier != DROP))
        objs = np.concatenate([stored, new]).astype(np.int64)
        n = self._count(objs, now, now + self.lookahead_s).astype(np.float64)
        size = eng.size[objs]
        kind = eng.kind[objs]
        cur = np.where(np.isin(objs, stored), eng.tier[objs], 0)
        future = self._count(objs, now, np.inf)
        floor_drop = ~eng.durable[objs] & (future == 0)
        c_floor = np.where(
            floor_drop,
            eng.cost.access_cost(size, kind, DROP),
            eng.cost.access_cost(size, kind, SSD),
        )
        target = np.where(floor_drop, DROP, SSD).astype(np.int64)
        assigned = np.zeros(len(objs), dtype=bool)
        mem = eng.memory_tiers()
        for t in mem:
            nxt_cost = c_floor.copy()
            for lower in reversed([x for x in mem if x > t]):
                ok = eng.cost.allowed(kind, lower)
                nxt_cost = np.where(ok, eng.cost.access_cost(size, kind, lower), nxt_cost)
            gain = n * (nxt_cost - eng.cost.access_cost(size, kind, t))
            mig = np.where(
                (cur == t) | (cur == 0),
                0.0,
                eng.cost.migration_cost(size, np.maximum(cur, 1), t, eng.persisted[objs]),
            )
            value = (gain - mig) / np.maximum(size, 1)
            cand = np.flatnonzero(~assigned & eng.cost.allowed(kind, t) & (value > 0))
            order = cand[np.argsort(-value[cand], kind="stable")]
            cum = np.cumsum(size[order])
            chosen = order[cum <= eng.capacity[t]]
            target[chosen] = t
            assigned[chosen] = True
        fresh = zip(objs[len(stored) :].tolist(), target[len(stored) :].tolist(), strict=True)
        self.planned = {int(o): int(t) for o, t in fresh}
        moves = [
            (o, int(eng.tier[o]), dst)
            for o, dst in zip(stored.tolist(), target[: len(stored)].tolist(), strict=True)
            if dst != int(eng.tier[o])
        ]
        # out of memory first (frees room), then HBM -> DRAM, then promotions
        # into DRAM before HBM so the room they need has been made
        for o, _src, dst in moves:
            if dst == DROP:
                eng.drop(o)
            elif dst == SSD:
                eng.move(o, SSD)
        for o, src, dst in sorted(moves, key=lambda m: (m[2] < m[1], -m[2])):
            if dst in (DROP, SSD):
                continue
            if eng.fits(dst, int(eng.size[o])):
                eng.move(o, dst)
            elif dst > src:  # a demotion that found no room goes to the floor
                floor = self._floor_tier(o, now)
                if floor == DROP:
                    eng.drop(o)
                else:
                    eng.move(o, SSD)

    def tick(self, t: float) -> None:
        if t + 1e-9 >= self.next_epoch:
            self._replan(t)
            self.next_epoch = t + self.epoch_s

    def on_put(self, o: int, t: float) -> None:
        eng = self.eng
        if t + 1e-9 >= self.next_epoch:
            self._replan(t)
            self.next_epoch = t + self.epoch_s
        want = self.planned.get(o)
        if want is None:
            want = self._floor_tier(o, t)
        size = int(eng.size[o])
        if want in MEMORY_TIERS and not eng.fits(want, size):
            want = self._floor_tier(o, t)
        if want == DROP and int(self._count(np.array([o]), t, np.inf)[0]) > 0:
            want = SSD
        eng.place(o, want)

    def on_get(self, o: int, t: float) -> None:
        return

    def on_delete(self, o: int, t: float) -> None:
        return

    def on_prefetch(self, o: int, deadline: float, t: float) -> None:
        return


__all__ = ["DRAM", "GlobalLru", "OracleKnapsack", "SiloedLru", "Tiermem", "silo_shares"]
