"""Cost model: what an access, a move and a stored byte cost on each tier.

Two kinds of cost, kept apart:

* **access cost** (seconds of device time an access takes). For object o of
  size s on tier t::

      c_t(o) = reads_k * latency_t + fraction_k * s / bandwidth_t

  ``reads_k`` and ``fraction_k`` describe how kind k is read: a KV block or a
  blob is one sequential read of the whole value (1, 1: the
  ``latency + size / bandwidth`` of DESIGN.md §5, bandwidth-bound); a vector
  shard query is many small random reads of a small part of it (IOPS-bound).
  An access to a dropped CACHE object (``DROP``) costs its miss cost:
  recompute (KV prefill) or refetch.
* **money** (USD per hour): bytes held on a tier times its price per GiB-hour,
  reported by tier, kind, namespace and session. Report only: the planner
  weighs access time, never price (the REMOTE tier's included: at the default
  prices a MiB of KV held remotely for a day costs ~7e-7 USD, a recompute of
  it ~3 ms of an accelerator, ~2.5e-6 USD at $3/h, and a shared copy is also
  read by daemons whose reads this one cannot count).

A move copies the value: read from the source, write to the target. Demoting
an object that already has an SSD copy to SSD, or dropping a CACHE object,
copies nothing and costs nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from tiermem.placement.model import (
    BLOB,
    DRAM,
    DROP,
    HBM,
    KIND_NAMES,
    KINDS,
    KV_BLOCK,
    REMOTE,
    SCRATCH,
    SSD,
    TIER_NAMES,
    TIERS,
    VECTOR,
)

GiB = float(1 << 30)
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class TierCost:
    latency_s: float
    """Time to first byte of one read (seconds)."""
    bandwidth_bytes_per_s: float
    """Sustained read bandwidth to the consumer (bytes/s)."""
    price_per_gib_hour: float
    """What a GiB held on the tier costs per hour (USD)."""


@dataclass(frozen=True, slots=True)
class KindCost:
    reads_per_access: float = 1.0
    """Separate reads (each paying the tier's latency) one access issues."""
    bytes_fraction: float = 1.0
    """Share of the object one access reads."""
    miss_latency_s: float = 0.0
    """Fixed cost of an access to a dropped CACHE object (recompute/refetch), s."""
    miss_s_per_byte: float = 0.0
    """Per-byte cost of that miss (e.g. prefill time per byte of KV), s/byte."""
    tiers: frozenset[int] = frozenset(TIERS)
    """Tiers this kind may be placed on."""


#: Defaults (documented in docs/architecture.md): HBM read by the GPU in place;
#: DRAM over PCIe 4.0 x16 to the GPU or memcpy to the CPU; a datacentre NVMe SSD;
#: remote over 10 GbE. Prices: an 80 GB accelerator at ~$3/h, server DRAM, NVMe
#: at ~$0.08/GB-month, object storage at ~$0.023/GB-month.
DEFAULT_TIER_COSTS: dict[int, TierCost] = {
    HBM: TierCost(latency_s=2e-6, bandwidth_bytes_per_s=1.0e12, price_per_gib_hour=0.04),
    DRAM: TierCost(latency_s=5e-6, bandwidth_bytes_per_s=20e9, price_per_gib_hour=0.004),
    SSD: TierCost(latency_s=100e-6, bandwidth_bytes_per_s=3e9, price_per_gib_hour=0.00012),
    REMOTE: TierCost(latency_s=2e-3, bandwidth_bytes_per_s=1.25e9, price_per_gib_hour=0.00003),
}
_GPU_TIERS = frozenset({HBM, DRAM, SSD, REMOTE})
_HOST_TIERS = frozenset({DRAM, SSD, REMOTE})
#: KV: one sequential read; a miss is a prefill: ~1 ms per MiB of KV (a
#: 70B-class model at ~3k tokens/s and 320 KiB of KV per token; an 8B model is
#: ~3x cheaper). Vectors: an IVF/graph query touches ~2% of a shard in 64 random
#: reads. Blobs: whole sequential reads, never in HBM. Scratch: small records
#: read whole, never in HBM.
DEFAULT_KIND_COSTS: dict[int, KindCost] = {
    KV_BLOCK: KindCost(1.0, 1.0, miss_latency_s=2e-3, miss_s_per_byte=1e-3 / (1 << 20),
                       tiers=_GPU_TIERS),
    VECTOR: KindCost(64.0, 0.02, miss_latency_s=0.05, miss_s_per_byte=0.0, tiers=_GPU_TIERS),
    BLOB: KindCost(1.0, 1.0, miss_latency_s=0.05, miss_s_per_byte=1e-9, tiers=_HOST_TIERS),
    SCRATCH: KindCost(1.0, 1.0, miss_latency_s=0.01, miss_s_per_byte=0.0, tiers=_HOST_TIERS),
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class CostModel:
    tiers: Mapping[int, TierCost] = field(default_factory=lambda: dict(DEFAULT_TIER_COSTS))
    kinds: Mapping[int, KindCost] = field(default_factory=lambda: dict(DEFAULT_KIND_COSTS))
    _lat: FloatArray = field(init=False, repr=False, compare=False)
    _bw: FloatArray = field(init=False, repr=False, compare=False)
    _reads: FloatArray = field(init=False, repr=False, compare=False)
    _frac: FloatArray = field(init=False, repr=False, compare=False)
    _miss_lat: FloatArray = field(init=False, repr=False, compare=False)
    _miss_pb: FloatArray = field(init=False, repr=False, compare=False)
    _allowed: npt.NDArray[np.bool_] = field(init=False, repr=False, compare=False)
    #: The same tables as plain Python floats and bools, for the per-object
    #: (``*_one``) methods a put's admission calls a dozen times: indexing a
    #: numpy array and doing arithmetic on its scalars costs several times more.
    _py: tuple[list[float], ...] = field(init=False, repr=False, compare=False)
    _allowed_py: list[list[bool]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        lat = np.zeros(5)
        bw = np.full(5, np.inf)
        for t, c in self.tiers.items():
            if c.bandwidth_bytes_per_s <= 0 or c.latency_s < 0:
                raise ValueError(f"tier {TIER_NAMES[t]}: bandwidth must be > 0, latency >= 0")
            lat[t], bw[t] = c.latency_s, c.bandwidth_bytes_per_s
        reads, frac, mlat, mpb = np.ones(5), np.ones(5), np.zeros(5), np.zeros(5)
        allowed = np.zeros((5, 5), dtype=bool)
        for k in KINDS:
            kc = self.kinds.get(k, KindCost())
            reads[k], frac[k] = kc.reads_per_access, kc.bytes_fraction
            mlat[k], mpb[k] = kc.miss_latency_s, kc.miss_s_per_byte
            for t in kc.tiers:
                allowed[k, t] = True
        for name, value in (
            ("_lat", lat), ("_bw", bw), ("_reads", reads), ("_frac", frac),
            ("_miss_lat", mlat), ("_miss_pb", mpb), ("_allowed", allowed),
        ):  # fmt: skip
            object.__setattr__(self, name, value)
        py = tuple([float(x) for x in a] for a in (lat, bw, reads, frac, mlat, mpb))
        object.__setattr__(self, "_py", py)
        object.__setattr__(self, "_allowed_py", [[bool(x) for x in row] for row in allowed])

    # -- access cost ----------------------------------------------------------------
    def access_cost(self, size: Any, kind: Any, tier: int) -> FloatArray:
        """c_tier(o) for arrays of sizes and kinds (seconds per access)."""
        k = np.asarray(kind, dtype=np.intp)
        s = np.asarray(size, dtype=np.float64)
        if tier == DROP:
            return np.asarray(self._miss_lat[k] + self._miss_pb[k] * s, dtype=np.float64)
        return np.asarray(
            self._reads[k] * self._lat[tier] + self._frac[k] * s / self._bw[tier],
            dtype=np.float64,
        )

    def access_cost_one(self, size: int, kind: int, tier: int) -> float:
        """``access_cost`` of one object."""
        lat, bw, reads, frac, miss_lat, miss_pb = self._py
        if tier == DROP:
            return miss_lat[kind] + miss_pb[kind] * size
        return reads[kind] * lat[tier] + frac[kind] * size / bw[tier]

    def allowed(self, kind: Any, tier: int) -> npt.NDArray[np.bool_]:
        """Whether each kind may live on ``tier``."""
        return np.asarray(self._allowed[np.asarray(kind, dtype=np.intp), tier], dtype=bool)

    def allowed_one(self, kind: int, tier: int) -> bool:
        return self._allowed_py[kind][tier]

    # -- moves ----------------------------------------------------------------------
    def write_cost(self, size: Any, tier: int) -> FloatArray:
        """Seconds to write ``size`` bytes to ``tier`` (0 for DROP)."""
        s = np.asarray(size, dtype=np.float64)
        if tier == DROP:
            return np.zeros_like(s)
        return np.asarray(self._lat[tier] + s / self._bw[tier], dtype=np.float64)

    def write_cost_one(self, size: int, tier: int) -> float:
        """``write_cost`` of one object, in plain floats (see ``_py``)."""
        if tier == DROP:
            return 0.0
        lat, bw = self._py[0], self._py[1]
        return lat[tier] + size / bw[tier]

    def migration_cost(self, size: Any, src: Any, dst: int, persisted: Any) -> FloatArray:
        """Seconds of copying to move objects from ``src`` tiers to ``dst``: read
        the whole value from its source, write it to the target. Free when the
        target is DROP or SSD and an SSD copy already exists."""
        s = np.asarray(size, dtype=np.float64)
        src_arr = np.asarray(src, dtype=np.intp)
        read = self._lat[src_arr] + s / self._bw[src_arr]
        cost = read + self.write_cost(s, dst)
        if dst == DROP:
            return np.zeros_like(s)
        if dst == SSD:
            return np.asarray(np.where(np.asarray(persisted, dtype=bool), 0.0, cost))
        return np.asarray(cost, dtype=np.float64)

    def migration_cost_one(self, size: int, src: int, dst: int, persisted: bool) -> float:
        if dst == DROP or (dst == SSD and persisted):
            return 0.0
        read = self._lat[src] + size / self._bw[src]
        return float(read + self._lat[dst] + size / self._bw[dst])

    # -- money ----------------------------------------------------------------------
    def price_per_byte_hour(self, tier: int) -> float:
        c = self.tiers.get(tier)
        return 0.0 if c is None else c.price_per_gib_hour / GiB


@dataclass(frozen=True, slots=True)
class CostLine:
    name: str
    bytes: int
    usd_per_hour: float


@dataclass(frozen=True, slots=True)
class TierCostLine:
    tier: int
    capacity_bytes: int
    used_bytes: int
    price_per_gib_hour: float
    capacity_usd_per_hour: float
    used_usd_per_hour: float


@dataclass(frozen=True, slots=True)
class CostReport:
    """What memory costs per hour: the tiers' budgets, and the bytes held by kind,
    namespace and (the most expensive) sessions. Bytes count every copy: a
    DURABLE object served from DRAM pays for DRAM and for its SSD copy."""

    tiers: list[TierCostLine]
    kinds: list[CostLine]
    namespaces: list[CostLine]
    sessions: list[CostLine]
    sessions_omitted: int
    used_usd_per_hour: float
    capacity_usd_per_hour: float


def cost_report(
    model: CostModel,
    *,
    size: npt.NDArray[Any],
    tier: npt.NDArray[Any],
    kind: npt.NDArray[Any],
    ssd_copy: npt.NDArray[Any],
    ns: npt.NDArray[Any],
    session: npt.NDArray[Any],
    capacities: Mapping[int, tuple[int, int]],
    namespace_names: Mapping[int, str],
    session_names: Mapping[int, str],
    top_sessions: int = 20,
) -> CostReport:
    """Cost per hour from per-object columns (vectorised; one entry per object).

    ``tier``: serving tier; ``ssd_copy``: True where a copy also lives on SSD
    (counted on SSD as well); ``session``: interned session ids, 0 = none;
    ``capacities``: tier -> (capacity_bytes, used_bytes) as the engines report.
    """
    s = np.asarray(size, dtype=np.float64)
    t = np.asarray(tier, dtype=np.intp)
    price = np.array([model.price_per_byte_hour(x) for x in range(5)])
    extra = np.asarray(ssd_copy, dtype=bool) & (t != SSD)
    per_obj = s * price[t] + np.where(extra, s * price[SSD], 0.0)
    bytes_obj = s + np.where(extra, s, 0.0)

    def grouped(
        keys: npt.NDArray[Any], names: Mapping[int, str], select: npt.NDArray[np.bool_]
    ) -> list[CostLine]:
        k = np.asarray(keys, dtype=np.int64)[select]
        if len(k) == 0:
            return []
        uniq, inv = np.unique(k, return_inverse=True)
        usd = np.bincount(inv, weights=per_obj[select], minlength=len(uniq))
        nb = np.bincount(inv, weights=bytes_obj[select], minlength=len(uniq))
        lines = [
            CostLine(names.get(int(u), str(int(u))), int(nb[i]), float(usd[i]))
            for i, u in enumerate(uniq)
        ]
        return sorted(lines, key=lambda line: (-line.usd_per_hour, line.name))

    tiers = []
    for x, (cap, used) in sorted(capacities.items()):
        p = model.price_per_byte_hour(x)
        c = model.tiers.get(x)
        price_gib = c.price_per_gib_hour if c is not None else 0.0
        tiers.append(TierCostLine(x, cap, used, price_gib, cap * p, used * p))
    everything = np.ones(len(s), dtype=bool)
    sess = np.asarray(session, dtype=np.int64)
    sessions = grouped(sess, session_names, sess != 0)
    omitted = max(0, len(sessions) - top_sessions)
    return CostReport(
        tiers=tiers,
        kinds=grouped(kind, KIND_NAMES, everything),
        namespaces=grouped(ns, namespace_names, everything),
        sessions=sessions[:top_sessions],
        sessions_omitted=omitted,
        used_usd_per_hour=float(per_obj.sum()),
        capacity_usd_per_hour=float(sum(line.capacity_usd_per_hour for line in tiers)),
    )
