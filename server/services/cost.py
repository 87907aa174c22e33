"""What stored bytes cost per hour: the small price model behind
``tiermem_cost_usd_per_hour``.

One price per tier (``cost.*_usd_per_gib_hour`` in the config) times the bytes
held there. It is deliberately a single function so a fuller model (the
placement cost model, which also charges accesses and moves) can replace it
without touching the metrics code.
"""

from __future__ import annotations

from tiermem.server.config import CostConfig
from tiermem.server.model import Tier

GiB = 1 << 30


def price_usd_per_gib_hour(tier: Tier, prices: CostConfig) -> float:
    return {
        Tier.HBM: prices.hbm_usd_per_gib_hour,
        Tier.DRAM: prices.dram_usd_per_gib_hour,
        Tier.SSD: prices.ssd_usd_per_gib_hour,
        Tier.REMOTE: prices.remote_usd_per_gib_hour,
    }[tier]


def cost_usd_per_hour(tier: Tier, nbytes: int, prices: CostConfig) -> float:
    """Hourly cost of keeping ``nbytes`` on ``tier``."""
    return nbytes / GiB * price_usd_per_gib_hour(tier, prices)
