"""Replays a trace against a policy and accounts what every access and move cost.

The engine owns placement state (which tier serves each object, whether an SSD
copy exists, bytes used per tier) and enforces the rules every policy lives
by: a tier never holds more than its capacity (an attempt raises), DURABLE
objects always have an SSD copy and are never dropped. Policies decide; the
engine charges, with one cost model for all:

* a read costs ``c_tier(o)`` (``CostModel.access_cost``); a read of a dropped
  CACHE object costs its miss (recompute) and the object is written again;
* a move costs its copy (``CostModel.migration_cost``; a promotion done on the
  back of a read pays only the write); demoting to an existing SSD copy or
  dropping is free;
* placing a new object costs the write to the chosen tier, except the SSD copy
  every DURABLE object gets anyway (the same for every policy).

The hint a put carries is the engine's (``Engine.hint``): the trace's, or COLD
where the trace models a KV client that marks a one-shot request's chunks
stored after a prefix hit (``put_hint``; see ``trace.py``). It is decided from
what the client saw so far in the replay, never from the future, and every
policy gets the same hints.

``mean_access_cost_s`` = (reads + moves + writes) / reads: the headline metric.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from tiermem.placement.cost import CostModel
from tiermem.placement.model import (
    COLD,
    DRAM,
    DROP,
    HBM,
    KIND_NAMES,
    MEMORY_TIERS,
    SSD,
    TierState,
)
from tiermem.placement.sim.trace import DELETE, GET, PREFETCH, PUT, Trace

GiB = 1 << 30
_NAMES = {DROP: "DROP", HBM: "HBM", DRAM: "DRAM", SSD: "SSD", 4: "REMOTE"}


class SimInvariantError(Exception):
    """A policy broke a rule of the engine (capacity, durability)."""


@dataclass(frozen=True, slots=True)
class SimConfig:
    capacities: dict[int, int] = field(
        default_factory=lambda: {HBM: 2 * GiB, DRAM: 8 * GiB, SSD: 1024 * GiB}
    )
    """Bytes per tier (SSD large enough never to fill in the standard mixes)."""
    watermarks: dict[int, tuple[float, float]] = field(
        default_factory=lambda: {HBM: (0.97, 0.93), DRAM: (0.97, 0.93), SSD: (0.95, 0.90)}
    )
    """(high, low) watermark fractions tiermem plans against (baselines fill to 100%)."""
    tick_s: float = 1.0
    """How often policies get ``tick`` (tiermem's planning interval), seconds."""
    migrate_bandwidth_bytes_per_s: float = 2.0 * GiB
    """tiermem's background migration budget (bytes/s)."""
    cost: CostModel = field(default_factory=CostModel)


class Policy(Protocol):
    name: str

    def attach(self, engine: Engine) -> None: ...
    def on_put(self, o: int, t: float) -> None: ...
    def on_get(self, o: int, t: float) -> None: ...
    def on_delete(self, o: int, t: float) -> None: ...
    def on_prefetch(self, o: int, deadline: float, t: float) -> None: ...
    def tick(self, t: float) -> None: ...


@dataclass(slots=True)
class SimResult:
    policy: str
    mix: str
    reads: int = 0
    misses: int = 0
    read_cost_s: float = 0.0
    move_cost_s: float = 0.0
    write_cost_s: float = 0.0
    moved_bytes: int = 0
    moves: int = 0
    cold_hinted_puts: int = 0
    """Puts (and re-puts after a miss) the modelled KV client marked COLD."""
    hits: dict[str, int] = field(default_factory=dict)
    moves_by: dict[str, list[float]] = field(default_factory=dict)
    """"KIND SRC->DST" -> [moves, copy cost s, bytes copied]."""
    per_kind: dict[str, dict[str, float]] = field(default_factory=dict)
    elapsed_s: float = 0.0

    @property
    def total_cost_s(self) -> float:
        return self.read_cost_s + self.move_cost_s + self.write_cost_s

    @property
    def mean_access_cost_s(self) -> float:
        return self.total_cost_s / max(self.reads, 1)

    @property
    def mean_read_cost_s(self) -> float:
        return self.read_cost_s / max(self.reads, 1)

    @property
    def fast_hit_ratio(self) -> float:
        fast = self.hits.get("HBM", 0) + self.hits.get("DRAM", 0)
        return fast / max(self.reads, 1)

    def as_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "mean_access_cost_s": self.mean_access_cost_s,
            "mean_read_cost_s": self.mean_read_cost_s,
            "fast_tier_hit_ratio": self.fast_hit_ratio,
            "reads": self.reads,
            "misses": self.misses,
            "read_cost_s": self.read_cost_s,
            "move_cost_s": self.move_cost_s,
            "write_cost_s": self.write_cost_s,
            "moved_bytes": self.moved_bytes,
            "moves": self.moves,
            "cold_hinted_puts": self.cold_hinted_puts,
            "hits_by_tier": dict(self.hits),
            "moves_by": {
                k: {"moves": int(v[0]), "cost_s": v[1], "bytes": int(v[2])}
                for k, v in sorted(self.moves_by.items())
            },
            "per_kind": self.per_kind,
            "elapsed_s": self.elapsed_s,
        }


class Engine:
    def __init__(self, trace: Trace, config: SimConfig) -> None:
        n = trace.objects
        self.trace = trace
        self.config = config
        self.cost = config.cost
        self.capacity = dict(config.capacities)
        self.size = trace.size
        self.kind = trace.kind
        self.durable = trace.durable
        self.tier = np.zeros(n, dtype=np.int64)  # DROP (0) = not stored
        self.alive = np.zeros(n, dtype=bool)
        self.persisted = np.zeros(n, dtype=bool)
        self.used = {t: 0 for t in self.capacity}
        self.now = 0.0
        self.result = SimResult(policy="", mix=trace.params.name)
        #: hint of each object's current version (what policies see)
        self.hint = trace.hint.copy()
        hinting = trace.req_hinting
        self._req_hinting = hinting if hinting is not None else np.zeros(1, dtype=bool)
        #: per request: 0 before its first read, 1 if that read hit (the prefix
        #: lookup found at least its first chunk), 2 if it missed (no hit)
        self._req_hit = np.zeros(len(self._req_hinting), dtype=np.int8)
        self._kind_reads = np.zeros(5, dtype=np.int64)
        self._kind_fast = np.zeros(5, dtype=np.int64)
        self._kind_cost = np.zeros(5)

    # -- what policies see ----------------------------------------------------------
    def memory_tiers(self) -> list[int]:
        return [t for t in MEMORY_TIERS if self.capacity.get(t, 0) > 0]

    def fits(self, tier: int, size: int) -> bool:
        return self.used.get(tier, 0) + size <= self.capacity.get(tier, 0)

    def tier_states(self) -> dict[int, TierState]:
        out = {}
        for t, cap in self.capacity.items():
            high, low = self.config.watermarks.get(t, (1.0, 1.0))
            out[t] = TierState(t, cap > 0, cap, self.used[t], high, low)
        return out

    # -- placement primitives -------------------------------------------------------
    def _add(self, tier: int, size: int) -> None:
        if self.used[tier] + size > self.capacity[tier]:
            raise SimInvariantError(
                f"tier {tier} would hold {self.used[tier] + size} > {self.capacity[tier]} bytes"
            )
        self.used[tier] += size

    def place(self, o: int, tier: int) -> None:
        """Store a new object on ``tier`` (DROP: a CACHE object not stored at all)."""
        if not self.alive[o] or self.tier[o] != DROP:
            raise SimInvariantError(f"place of object {o} that is stored or not alive")
        size = int(self.size[o])
        durable = bool(self.durable[o])
        if tier == DROP:
            if durable:
                raise SimInvariantError("DURABLE objects cannot be dropped")
            return
        if tier != SSD:
            self._add(tier, size)
            self.result.write_cost_s += float(self.cost.write_cost(size, tier))
        if durable or tier == SSD:
            self._add(SSD, size)
            self.persisted[o] = True
            if not durable:
                self.result.write_cost_s += float(self.cost.write_cost(size, SSD))
        self.tier[o] = tier

    def move(self, o: int, dst: int, *, piggyback: bool = False) -> None:
        """Move an object's serving copy. ``piggyback``: the bytes were just read
        (promotion on access), so only the write is charged."""
        src = int(self.tier[o])
        if src in (dst, DROP) or dst == DROP:
            raise SimInvariantError(f"bad move of object {o}: {src} -> {dst}")
        size = int(self.size[o])
        persisted = bool(self.persisted[o])
        if dst != SSD:
            self._add(dst, size)
        elif not persisted:
            self._add(SSD, size)
            self.persisted[o] = True
        if src != SSD:
            self.used[src] -= size
        if piggyback:
            charge = 0.0 if dst == SSD and persisted else float(self.cost.write_cost(size, dst))
        else:
            charge = self.cost.migration_cost_one(size, src, dst, persisted)
        r = self.result
        r.move_cost_s += charge
        if charge > 0:
            r.moved_bytes += size
        r.moves += 1
        label = f"{KIND_NAMES[int(self.kind[o])]} {_NAMES[src]}->{_NAMES[dst]}"
        entry = r.moves_by.setdefault(label, [0, 0.0, 0])
        entry[0] += 1
        entry[1] += charge
        entry[2] += size if charge > 0 else 0
        self.tier[o] = dst

    def drop(self, o: int) -> None:
        """Evict a CACHE object from every tier."""
        if self.durable[o]:
            raise SimInvariantError(f"object {o} is DURABLE and cannot be dropped")
        label = f"{KIND_NAMES[int(self.kind[o])]} {_NAMES[int(self.tier[o])]}->DROP"
        self.result.moves_by.setdefault(label, [0, 0.0, 0])[0] += 1
        self._free(o)

    def _free(self, o: int) -> None:
        size = int(self.size[o])
        tier = int(self.tier[o])
        if tier != DROP and tier != SSD:
            self.used[tier] -= size
        if self.persisted[o]:
            self.used[SSD] -= size
            self.persisted[o] = False
        self.tier[o] = DROP

    # -- replay ---------------------------------------------------------------------
    def put_hint(self, o: int, req: int) -> None:
        """Set the hint of a (re)put of ``o`` by request ``req`` (0 = none): COLD
        when its client marks chunks stored after a prefix hit and the request
        had one, else the trace's hint."""
        if req and self._req_hinting[req] and self._req_hit[req] == 1:
            self.hint[o] = COLD
            self.result.cold_hinted_puts += 1
        else:
            self.hint[o] = self.trace.hint[o]

    def read(self, o: int) -> bool:
        """Charge a read; False if it was a miss (the object must be written again)."""
        r = self.result
        tier = int(self.tier[o])
        size = int(self.size[o])
        kind = int(self.kind[o])
        c = self.cost.access_cost_one(size, kind, tier)
        r.reads += 1
        r.read_cost_s += c
        name = "MISS" if tier == DROP else ("HBM", "DRAM", "SSD", "REMOTE")[tier - 1]
        r.hits[name] = r.hits.get(name, 0) + 1
        self._kind_reads[kind] += 1
        self._kind_cost[kind] += c
        if tier in (HBM, DRAM):
            self._kind_fast[kind] += 1
        if tier == DROP:
            r.misses += 1
            return False
        return True

    def finish(self) -> SimResult:
        r = self.result
        for k, name in KIND_NAMES.items():
            n = int(self._kind_reads[k])
            r.per_kind[name] = {
                "reads": n,
                "mean_read_cost_s": float(self._kind_cost[k] / max(n, 1)),
                "fast_tier_hit_ratio": float(self._kind_fast[k] / max(n, 1)),
            }
        return r


def run(trace: Trace, policy: Policy, config: SimConfig | None = None) -> SimResult:
    """Replay ``trace`` against ``policy``; every policy sees the same operations."""
    cfg = config or SimConfig()
    started = time.perf_counter()
    eng = Engine(trace, cfg)
    eng.result.policy = policy.name
    policy.attach(eng)
    tick = cfg.tick_s
    next_tick = tick
    times = trace.t.tolist()
    ops = trace.op.tolist()
    objs = trace.obj.tolist()
    args = trace.arg.tolist()
    reqs = trace.req.tolist() if trace.req is not None else [0] * len(times)
    alive = eng.alive
    req_hit = eng._req_hit
    for t, op, o, arg, req in zip(times, ops, objs, args, reqs, strict=True):
        while t >= next_tick:
            eng.now = next_tick
            policy.tick(next_tick)
            next_tick += tick
        eng.now = t
        if op == GET:
            if not alive[o]:
                continue
            hit = eng.read(o)
            if req and not req_hit[req]:
                req_hit[req] = 1 if hit else 2
            if not hit:
                eng.put_hint(o, req)
                policy.on_put(o, t)  # recomputed / refetched, then stored again
            else:
                policy.on_get(o, t)
        elif op == PUT:
            if alive[o]:
                policy.on_delete(o, t)
                eng._free(o)
            alive[o] = True
            eng.put_hint(o, req)
            policy.on_put(o, t)
        elif op == DELETE:
            if alive[o]:
                policy.on_delete(o, t)
                eng._free(o)
                alive[o] = False
        elif op == PREFETCH and alive[o]:
            policy.on_prefetch(o, arg, t)
    result = eng.finish()
    result.elapsed_s = time.perf_counter() - started
    return result
