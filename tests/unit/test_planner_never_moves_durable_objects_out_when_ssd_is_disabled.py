"""With SSD disabled a DURABLE object has nowhere to go below memory (the daemon
refuses DURABLE puts then, but the planner is a library too): its keep value
and density are infinite at every rate, rate 0 included, where the product
``rate * inf`` used to be NaN; it is never a victim, and a plan keeps it and
counts it in the tier's planned bytes."""

import numpy as np

from tiermem.placement import CostModel, Objects, Planner, PlannerConfig, TierState
from tiermem.placement.model import DRAM, FLAG_DURABLE, HBM, KV_BLOCK, SSD, VECTOR

MiB = 1 << 20
SIZE = 4 * MiB


def no_ssd(dram_used: int) -> dict[int, TierState]:
    return {
        HBM: TierState(HBM, False, 0, 0, 0.9, 0.8),
        DRAM: TierState(DRAM, True, 16 * MiB, dram_used, 0.9, 0.8),
        SSD: TierState(SSD, False, 0, 0, 0.95, 0.9),
    }


def residents(rate: list[float], durable: list[bool]) -> Objects:
    n = len(rate)
    return Objects(
        rows=np.arange(n, dtype=np.int64),
        size=np.full(n, SIZE, dtype=np.int64),
        kind=np.where(durable, VECTOR, KV_BLOCK).astype(np.uint8),
        tier=np.full(n, DRAM, dtype=np.uint8),
        flags=np.where(durable, FLAG_DURABLE, 0).astype(np.uint8),
        rate=np.asarray(rate, dtype=np.float64),
        persisted=np.zeros(n, dtype=bool),
    )


# two idle DURABLE objects, two CACHE blocks (one idle, one read)
OBJS = residents([0.0, 0.0, 0.0, 1.0], [True, True, False, False])


def test_durable_objects_are_worth_infinitely_much_at_any_rate() -> None:
    tiers = no_ssd(4 * SIZE)
    for config in (PlannerConfig(), PlannerConfig(incumbent_leave_cost=False)):
        planner = Planner(CostModel(), config)
        for values in (
            planner.keep_values(OBJS, DRAM, tiers),
            planner.densities(OBJS, DRAM, tiers),
        ):
            assert not np.isnan(values).any()
            assert np.isposinf(values[:2]).all()
            assert np.isfinite(values[2:]).all()


def test_only_cache_objects_are_victims_however_much_room_is_asked() -> None:
    for config in (PlannerConfig(), PlannerConfig(incumbent_leave_cost=False)):
        victims = Planner(CostModel(), config).victims(OBJS, DRAM, 4 * SIZE, no_ssd(4 * SIZE))
        assert sorted(victims.rows.tolist()) == [2, 3]


def test_a_plan_over_the_tier_budget_keeps_the_durable_objects_in_memory() -> None:
    # 16 MiB at a 0.8 low watermark: the plan can keep three of the four
    plan = Planner(CostModel(), PlannerConfig(max_move_bytes=1 << 40)).plan(OBJS, no_ssd(4 * SIZE))
    moved = dict(zip(plan.rows.tolist(), plan.dst.tolist(), strict=True))
    assert 0 not in moved and 1 not in moved
    assert SSD not in moved.values()
    assert moved == {2: moved[2]}
    # the plan counts them as kept (it counted only the read CACHE block)
    assert plan.planned_bytes[DRAM] == 3 * SIZE
