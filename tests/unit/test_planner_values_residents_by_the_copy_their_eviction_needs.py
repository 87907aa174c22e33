"""The planner's keep-or-evict values: a resident that would need an SSD write
to leave memory is worth keeping over one that leaves for free at the same
rate; that value moves continuously with the rate across the point where its
floor switches between SSD and DROP; a rarely read CACHE object is given an
SSD copy when the copy pays back within the keep horizon, not only the
(shorter) planning horizon."""

import numpy as np
import pytest

from tiermem.placement import CostModel, Objects, Planner, PlannerConfig, TierState
from tiermem.placement.model import DRAM, DROP, HBM, KV_BLOCK, SSD

MiB = 1 << 20
KV = 4 * MiB


def tiers(dram_used: int = 0) -> dict[int, TierState]:
    return {
        HBM: TierState(HBM, False, 0, 0, 0.9, 0.8),
        DRAM: TierState(DRAM, True, 64 * MiB, dram_used, 0.9, 0.8),
        SSD: TierState(SSD, True, 1 << 40, 0, 0.95, 0.9),
    }


def kv_blocks(rate: list[float], persisted: list[bool], tier: int = DRAM) -> Objects:
    n = len(rate)
    return Objects(
        rows=np.arange(n, dtype=np.int64),
        size=np.full(n, KV, dtype=np.int64),
        kind=np.full(n, KV_BLOCK, dtype=np.uint8),
        tier=np.full(n, tier, dtype=np.uint8),
        flags=np.zeros(n, dtype=np.uint8),
        rate=np.asarray(rate, dtype=np.float64),
        persisted=np.asarray(persisted),
    )


def ssd_threshold(cost: CostModel, horizon_s: float) -> float:
    """The rate at which a KV block's SSD copy just pays back its write."""
    gain = cost.access_cost_one(KV, KV_BLOCK, DROP) - cost.access_cost_one(KV, KV_BLOCK, SSD)
    return float(cost.write_cost(KV, SSD)) / (gain * horizon_s)


def test_a_resident_without_an_ssd_copy_outlasts_one_that_leaves_for_free() -> None:
    cost = CostModel()
    rate = 0.05  # read back soon: its floor is SSD, with or without a copy there
    objs = kv_blocks([rate, rate], [True, False])
    planner = Planner(cost)
    v = planner.victims(objs, DRAM, KV, tiers(2 * KV))
    assert v.rows.tolist() == [0] and v.dst.tolist() == [SSD]
    values = planner.keep_values(objs, DRAM, tiers(2 * KV))
    write = float(cost.write_cost(KV, SSD)) + cost.access_cost_one(KV, KV_BLOCK, DRAM)
    assert (values[1] - values[0]) * KV == pytest.approx(write / planner.config.horizon_s)
    # the old order (access time saved only) cannot tell them apart
    flat = Planner(cost, PlannerConfig(incumbent_leave_cost=False))
    assert flat.densities(objs, DRAM, tiers(2 * KV)).tolist() == pytest.approx([values[0]] * 2)


def test_a_plan_keeps_the_resident_whose_eviction_needs_a_copy() -> None:
    # DRAM has room for one of the two under its low watermark: the one with an
    # SSD copy leaves (for free), the other stays
    objs = kv_blocks([0.05, 0.05], [True, False])
    state = tiers(2 * KV)
    state[DRAM] = TierState(DRAM, True, int(1.5 * KV / 0.8), 2 * KV, 0.9, 0.8)
    plan = Planner(CostModel(), PlannerConfig(max_move_bytes=1 << 40)).plan(objs, state)
    assert plan.rows.tolist() == [0] and plan.dst.tolist() == [SSD]


def test_the_value_of_keeping_moves_continuously_across_the_floor_switch() -> None:
    cost = CostModel()
    planner = Planner(cost)
    r = ssd_threshold(cost, planner.config.keep_horizon_s)
    below, above = r * 0.999, r * 1.001
    objs = kv_blocks([below, above], [False, False])
    assert planner.floor_tiers(objs, tiers()).tolist() == [DROP, SSD]
    values = planner.keep_values(objs, DRAM, tiers())
    assert values[1] == pytest.approx(values[0], rel=0.01)


def test_a_rarely_read_cache_block_is_kept_on_ssd_if_that_pays_within_the_keep_horizon() -> None:
    cost = CostModel()
    # read about once in 200 s: its copy does not pay back within 30 s, it does within 300 s
    rate = 1 / 200
    assert ssd_threshold(cost, 300.0) < rate < ssd_threshold(cost, 30.0)
    objs = kv_blocks([rate], [False])
    keep = Planner(cost, PlannerConfig(keep_horizon_s=300.0))
    short = Planner(cost, PlannerConfig(keep_horizon_s=30.0))
    assert keep.floor_tiers(objs, tiers()).tolist() == [SSD]
    assert short.floor_tiers(objs, tiers()).tolist() == [DROP]
    assert keep.admission_floor(KV, KV_BLOCK, rate, False, tiers())[0] == SSD
    assert short.admission_floor(KV, KV_BLOCK, rate, False, tiers())[0] == DROP
