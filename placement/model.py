"""Plain-int vocabulary of the placement package and the tier state it plans against.

The values equal the ``tiermem.v1`` wire enums (and the server's ``Tier`` /
``Kind`` enums), so the daemon passes its index columns in unchanged and this
package imports nothing from the server.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Tiers, fastest first. ``DROP`` is the pseudo-tier of a CACHE object that is
#: not stored anywhere (an access to it is a miss: recompute or refetch).
DROP, HBM, DRAM, SSD, REMOTE = 0, 1, 2, 3, 4
TIERS = (HBM, DRAM, SSD, REMOTE)
MEMORY_TIERS = (HBM, DRAM)
TIER_NAMES = {DROP: "DROP", HBM: "HBM", DRAM: "DRAM", SSD: "SSD", REMOTE: "REMOTE"}

KV_BLOCK, VECTOR, BLOB, SCRATCH = 1, 2, 3, 4
KINDS = (KV_BLOCK, VECTOR, BLOB, SCRATCH)
KIND_NAMES = {KV_BLOCK: "KV_BLOCK", VECTOR: "VECTOR", BLOB: "BLOB", SCRATCH: "SCRATCH"}

#: Access hints (``UNSPECIFIED`` means the kind's default).
UNSPECIFIED, HOT, WARM, COLD = 0, 1, 2, 3

#: Bits of the index ``flags`` column (shared with ``server/catalog/index.py``).
FLAG_LIVE = 1
FLAG_DURABLE = 2
FLAG_PINNED = 4
#: Set once the object was read after it was written (first reads teach the
#: access model what new objects of a class are worth).
FLAG_SEEN = 8
#: The object's access hint (0..3) lives in bits 4-5 of ``flags``.
HINT_SHIFT = 4
HINT_MASK = 3 << HINT_SHIFT
#: A copy of the object's current version is in the remote store (demoting it
#: there copies nothing; it may still have been evicted by the store itself).
FLAG_REMOTE = 64


@dataclass(frozen=True, slots=True)
class TierState:
    """A tier's budget and occupancy as the planner sees it (bytes)."""

    tier: int
    enabled: bool
    capacity_bytes: int
    used_bytes: int
    high_watermark: float
    low_watermark: float

    @property
    def high_bytes(self) -> int:
        return int(self.capacity_bytes * self.high_watermark)

    @property
    def low_bytes(self) -> int:
        return int(self.capacity_bytes * self.low_watermark)

    @property
    def plan_bytes(self) -> int:
        """Bytes the planner may fill the tier to: never above the high watermark;
        once usage crossed it, back down to the low watermark (the band between
        the two is headroom for admissions between planning passes)."""
        if self.used_bytes > self.high_bytes:
            return self.low_bytes
        return max(self.low_bytes, self.used_bytes)
