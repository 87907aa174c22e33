from tiermem.server.config import TierCostConfig, TierCostsConfig
from tiermem.server.model import Tier
from tiermem.server.services.cost import GiB, cost_usd_per_hour


def test_cost_is_stored_bytes_times_the_tier_price() -> None:
    base = TierCostsConfig()
    prices = base.model_copy(
        update={
            "hbm": TierCostConfig(latency_s=0, bandwidth_bytes_per_s=1, price_per_gib_hour=2.0),
            "dram": TierCostConfig(latency_s=0, bandwidth_bytes_per_s=1, price_per_gib_hour=0.5),
        }
    )
    assert cost_usd_per_hour(Tier.HBM, 3 * GiB, prices) == 6.0
    assert cost_usd_per_hour(Tier.DRAM, GiB // 2, prices) == 0.25
    assert cost_usd_per_hour(Tier.SSD, 0, prices) == 0.0
    assert cost_usd_per_hour(Tier.SSD, GiB, prices) == prices.ssd.price_per_gib_hour
