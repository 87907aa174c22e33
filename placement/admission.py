"""Admission: which tier a new object goes to.

Baseline rule until the cost-based planner lands: the client's preferred tier
if it is enabled, SSD for COLD objects, otherwise DRAM; every tier below the
first choice follows as a fallback, so a full tier spills downwards.
"""

from __future__ import annotations

from dataclasses import dataclass

HBM, DRAM, SSD, REMOTE = 1, 2, 3, 4
HOT, WARM, COLD = 1, 2, 3


@dataclass(frozen=True, slots=True)
class TierState:
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


def admission_order(
    size_bytes: int, hint: int, preferred_tier: int | None, tiers: dict[int, TierState]
) -> list[int]:
    """Tiers to try, best first. Only enabled tiers whose capacity can hold the value."""
    if preferred_tier is not None:
        first = preferred_tier
    elif hint == COLD:
        first = SSD
    else:
        first = DRAM
    order = [first] + [t for t in (HBM, DRAM, SSD) if t > first]
    return [
        t
        for t in order
        if t in tiers and tiers[t].enabled and size_bytes <= tiers[t].capacity_bytes
    ]
