"""Public value types of the client API (mirrors of the wire enums and messages)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum


class Kind(IntEnum):
    KV_BLOCK = 1
    VECTOR = 2
    BLOB = 3
    SCRATCH = 4


class Tier(IntEnum):
    HBM = 1
    DRAM = 2
    SSD = 3
    REMOTE = 4


class AccessHint(IntEnum):
    UNSPECIFIED = 0
    HOT = 1
    WARM = 2
    COLD = 3


class Precision(IntEnum):
    UNSPECIFIED = 0
    LOSSLESS = 1
    LOSSY_OK = 2


class Durability(IntEnum):
    UNSPECIFIED = 0
    CACHE = 1
    DURABLE = 2


@dataclass(frozen=True, slots=True)
class Profile:
    """How an object will be used. Unspecified fields take the kind's defaults
    (KV blocks: HOT and CACHE; other kinds: DURABLE)."""

    hint: AccessHint = AccessHint.UNSPECIFIED
    ttl_s: int = 0
    next_access_unix_ms: int = 0
    precision: Precision = Precision.UNSPECIFIED
    lossy_max_error: float = 0.0
    durability: Durability = Durability.UNSPECIFIED
    pin: bool = False
    preferred_tier: Tier | None = None


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    namespace: str
    kind: Kind
    key: str
    size_bytes: int
    checksum: int
    tier: Tier
    persisted: bool
    version: int
    session: str = ""
    dtype: str = ""
    shape: tuple[int, ...] = ()
    memory_format: str = ""
    codec: str = ""
    created_unix_ms: int = 0
    accessed_unix_ms: int = 0
    expires_unix_ms: int = 0
    profile: Profile = field(default_factory=Profile)


@dataclass(frozen=True, slots=True)
class TierStats:
    tier: Tier
    enabled: bool
    capacity_bytes: int
    used_bytes: int
    high_watermark: float
    low_watermark: float
    device: str
    by_kind: dict[Kind, tuple[int, int]]  # kind -> (objects, bytes)


@dataclass(frozen=True, slots=True)
class CostLine:
    name: str
    bytes: int
    usd_per_hour: float


@dataclass(frozen=True, slots=True)
class TierCost:
    tier: Tier
    capacity_bytes: int
    used_bytes: int
    price_per_gib_hour: float
    capacity_usd_per_hour: float
    used_usd_per_hour: float


@dataclass(frozen=True, slots=True)
class CostReport:
    """What memory costs per hour (USD) by tier, kind, namespace and session."""

    tiers: list[TierCost]
    kinds: list[CostLine]
    namespaces: list[CostLine]
    sessions: list[CostLine]
    sessions_omitted: int
    used_usd_per_hour: float
    capacity_usd_per_hour: float


@dataclass(frozen=True, slots=True)
class PrefetchResult:
    queued: int
    resident: int
    missing: int


@dataclass(frozen=True, slots=True)
class Stats:
    version: str
    objects: int
    uptime_s: int
    tiers: list[TierStats]
    cost: CostReport | None = None
