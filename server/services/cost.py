"""What stored bytes cost per hour: the price model behind
``tiermem_cost_usd_per_hour``.

Bytes held on a tier times that tier's ``placement.costs.<tier>.price_per_gib_hour``
— the same prices the placement cost model uses for ``tiermem cost`` and the
Stats RPC, so the metric and the report agree.
"""

from __future__ import annotations

from tiermem.server.config import TierCostsConfig
from tiermem.server.model import Tier

GiB = 1 << 30


def price_usd_per_gib_hour(tier: Tier, costs: TierCostsConfig) -> float:
    return {
        Tier.HBM: costs.hbm,
        Tier.DRAM: costs.dram,
        Tier.SSD: costs.ssd,
        Tier.REMOTE: costs.remote,
    }[tier].price_per_gib_hour


def cost_usd_per_hour(tier: Tier, nbytes: int, costs: TierCostsConfig) -> float:
    """Hourly cost of keeping ``nbytes`` on ``tier``."""
    return nbytes / GiB * price_usd_per_gib_hour(tier, costs)
