"""What a plan may drop: only CACHE residents nothing else keeps (their floor is
DROP), only from a memory tier above its high watermark, only as many as bring
that tier to its low watermark, least valuable first. A tier under its high
watermark drops nothing, even when the tiers below it are full: a promotion
into it waits. DURABLE and pinned objects are never dropped; objects with an
SSD or remote floor are demoted there, not dropped. Plan drops are forced moves
and copy nothing.

Companion of
``test_a_memory_tier_above_its_high_watermark_drops_cache_objects_nothing_else_keeps.py``."""

from __future__ import annotations

import numpy as np

from tiermem.placement import CostModel, Objects, Plan, Planner, PlannerConfig, TierState
from tiermem.placement.model import (
    DRAM,
    DROP,
    FLAG_DURABLE,
    FLAG_PINNED,
    HBM,
    KV_BLOCK,
    REMOTE,
    SSD,
)

MiB = 1 << 20


def tiers(
    dram_used: int,
    *,
    hbm_used: int = 0,
    hbm: bool = False,
    ssd: bool = False,
    ssd_used: int = 0,
    remote: bool = False,
) -> dict[int, TierState]:
    """8 MiB of DRAM (high 60 %, low 30 %); HBM (8 MiB, same marks), SSD (64 MiB)
    and remote as asked."""
    return {
        HBM: TierState(HBM, hbm, 8 * MiB if hbm else 0, hbm_used, 0.6, 0.3),
        DRAM: TierState(DRAM, True, 8 * MiB, dram_used, 0.6, 0.3),
        SSD: TierState(SSD, ssd, 64 * MiB, ssd_used, 0.95, 0.9),
        REMOTE: TierState(REMOTE, remote, 1 << 30 if remote else 0, 0, 0.95, 0.9),
    }


def objects(
    size: list[int],
    rate: list[float],
    tier: list[int] | None = None,
    flags: list[int] | None = None,
    persisted: list[bool] | None = None,
) -> Objects:
    n = len(size)
    return Objects(
        np.arange(n, dtype=np.int64),
        np.array(size, dtype=np.int64),
        np.full(n, KV_BLOCK, dtype=np.uint8),
        np.array(tier or [DRAM] * n, dtype=np.uint8),
        np.array(flags or [0] * n, dtype=np.uint8),
        np.array(rate, dtype=np.float64),
        np.array(persisted or [False] * n, dtype=bool),
    )


def used_after(objs: Objects, plan: Plan, tier: int) -> int:
    """Bytes on ``tier`` once the plan's moves are applied in order."""
    where = objs.tier.astype(np.int64).copy()
    for row, src, dst in zip(plan.rows.tolist(), plan.src.tolist(), plan.dst.tolist(), strict=True):
        assert where[row] == src
        where[row] = dst
    return int(objs.size[where == tier].sum())


def dropped(plan: Plan) -> list[int]:
    return sorted(plan.rows[plan.dst == DROP].tolist())


def test_a_tier_above_its_watermark_drops_only_as_many_as_bring_it_to_its_low_watermark() -> None:
    # 5.5 MiB in DRAM (high 4.8 MiB, low 2.4 MiB): sizes differ, so does the value
    rng = np.random.default_rng(7)
    sizes = [MiB // 2, MiB, MiB // 4, MiB, MiB // 2, MiB, MiB // 4, MiB // 2, MiB // 2]
    rates = rng.uniform(0.01, 0.2, len(sizes)).tolist()
    objs = objects(sizes, rates)
    state = tiers(sum(sizes))
    assert state[DRAM].used_bytes > state[DRAM].high_bytes
    plan = Planner(CostModel(), PlannerConfig()).plan(objs, state)
    gone = dropped(plan)
    assert gone and set(plan.dst.tolist()) == {DROP} and set(plan.src.tolist()) == {DRAM}
    left = used_after(objs, plan, DRAM)
    assert left <= state[DRAM].low_bytes
    # not one more than needed: keeping any dropped object would overshoot
    assert all(left + sizes[i] > state[DRAM].low_bytes for i in gone)
    assert plan.forced == len(gone) and plan.copy_bytes == 0 and plan.deferred == 0


def test_the_least_valuable_go_first() -> None:
    # seven 1 MiB blocks, rates in shuffled order: the five least read are dropped
    rates = [0.05, 0.9, 0.01, 0.3, 0.07, 0.5, 0.02]
    objs = objects([MiB] * 7, rates)
    plan = Planner(CostModel(), PlannerConfig()).plan(objs, tiers(7 * MiB))
    assert dropped(plan) == sorted(np.argsort(rates)[:5].tolist())
    assert plan.forced == 5


def test_a_tier_under_its_watermark_drops_nothing_even_with_the_tiers_below_full() -> None:
    planner = Planner(CostModel(), PlannerConfig())
    # DRAM under its high watermark (4 of 4.8 MiB), SSD above its own and full:
    # hot SSD objects want DRAM; cold DRAM residents would have to leave for an
    # SSD that has no room. They stay; the promotions wait.
    cold = [0.001] * 4
    hot = [5.0] * 4
    objs = objects(
        [MiB] * 8,
        cold + hot,
        tier=[DRAM] * 4 + [SSD] * 4,
        persisted=[False] * 4 + [True] * 4,
    )
    state = tiers(4 * MiB, ssd=True, ssd_used=63 * MiB)
    plan = planner.plan(objs, state)
    assert not any(s == DRAM and d == DROP for s, d in zip(plan.src, plan.dst, strict=True))
    assert used_after(objs, plan, DRAM) <= state[DRAM].high_bytes
    assert plan.deferred > 0
    # HBM under its watermark with cold residents, DRAM above its own: DRAM drops
    # its least read, HBM keeps every resident it has (the hot DRAM blocks that
    # would replace them wait, so DRAM ends under its high watermark, not at its
    # low one)
    objs = objects(
        [MiB] * 8,
        [0.001, 0.001, 5.0, 5.0, 5.0, 0.01, 0.02, 0.03],
        tier=[HBM, HBM] + [DRAM] * 6,
    )
    state = tiers(6 * MiB, hbm=True, hbm_used=2 * MiB)
    plan = planner.plan(objs, state)
    assert not any(s == HBM and d == DROP for s, d in zip(plan.src, plan.dst, strict=True))
    assert dropped(plan) == [5, 6]
    assert used_after(objs, plan, DRAM) <= state[DRAM].high_bytes
    assert used_after(objs, plan, HBM) == 2 * MiB


def test_durable_and_pinned_objects_are_never_dropped() -> None:
    planner = Planner(CostModel(), PlannerConfig())
    flags = [FLAG_DURABLE, FLAG_PINNED, FLAG_DURABLE | FLAG_PINNED, 0, 0, 0, 0, 0]
    rates = [0.001] * 8  # the protected ones are as cold as the rest
    kept = {0, 1, 2}
    # no SSD at all; then an SSD that is full (a demotion there could become a drop)
    for state in (tiers(8 * MiB), tiers(8 * MiB, ssd=True, ssd_used=63 * MiB)):
        persisted = [bool(f & FLAG_DURABLE) for f in flags]
        objs = objects([MiB] * 8, rates, flags=flags, persisted=persisted)
        plan = planner.plan(objs, state)
        assert not kept & set(dropped(plan))
        assert dropped(plan)  # the CACHE blocks still go
        assert not {1, 2} & set(plan.rows.tolist())  # pinned: not moved at all


def test_objects_with_an_ssd_or_remote_floor_are_demoted_not_dropped() -> None:
    planner = Planner(CostModel(), PlannerConfig())
    # with an SSD: blocks read often enough to repay an SSD copy go there, the
    # others are dropped
    rates = [0.0001, 0.0001, 0.0001, 2.0, 2.0, 2.0, 9.0, 9.0]
    objs = objects([MiB] * 8, rates)
    state = tiers(8 * MiB, ssd=True)
    floor = planner.floor_tiers(objs, state)
    assert set(floor.tolist()) == {SSD, DROP}
    plan = planner.plan(objs, state)
    for row, dst in zip(plan.rows.tolist(), plan.dst.tolist(), strict=True):
        assert dst == (DROP if floor[row] == DROP else SSD), (row, dst)
    assert used_after(objs, plan, DRAM) <= state[DRAM].low_bytes
    assert plan.copy_bytes == MiB * int((plan.dst == SSD).sum())
    # with a remote tier and no SSD: every block goes there, none is dropped
    state = tiers(8 * MiB, remote=True)
    assert set(planner.floor_tiers(objs, state).tolist()) == {REMOTE}
    plan = planner.plan(objs, state)
    assert len(plan) and set(plan.dst.tolist()) == {REMOTE}
    assert used_after(objs, plan, DRAM) <= state[DRAM].low_bytes
