"""With a remote tier, the planner keeps CACHE objects there rather than
dropping them; DURABLE objects, kinds the tier does not take and objects whose
remote read would cost more than their miss are not sent; an unavailable
remote tier (breaker open) means dropping again."""

import dataclasses

import numpy as np

from tiermem.placement import CostModel, Objects, Planner, PlannerConfig, TierState
from tiermem.placement.cost import DEFAULT_KIND_COSTS
from tiermem.placement.model import (
    BLOB,
    DRAM,
    DROP,
    FLAG_DURABLE,
    FLAG_REMOTE,
    KV_BLOCK,
    REMOTE,
    SSD,
)

MiB = 1 << 20


def tiers(
    dram_used: int,
    *,
    ssd: bool = False,
    ssd_used: int = 0,
    remote: bool = True,
    remote_used: int = 0,
) -> dict[int, TierState]:
    return {
        DRAM: TierState(DRAM, True, 8 * MiB, dram_used, 0.9, 0.75),
        SSD: TierState(SSD, ssd, 64 * MiB, ssd_used, 0.95, 0.9),
        REMOTE: TierState(REMOTE, remote, 64 * MiB, remote_used, 0.95, 0.9),
    }


def kv_in_dram(n: int, size: int = MiB, flags: int = 0, kind: int = KV_BLOCK) -> Objects:
    return Objects(
        rows=np.arange(n, dtype=np.int64),
        size=np.full(n, size, dtype=np.int64),
        kind=np.full(n, kind, dtype=np.uint8),
        tier=np.full(n, DRAM, dtype=np.uint8),
        flags=np.full(n, flags, dtype=np.uint8),
        rate=np.linspace(0.01, 0.1, n),
        persisted=np.zeros(n, dtype=bool),
    )


def only_kinds(*kinds: int) -> CostModel:
    """The default cost model with REMOTE allowed for ``kinds`` only (the daemon
    builds it so from tiers.remote.kinds)."""
    return CostModel(
        kinds={
            k: kc if k in kinds else dataclasses.replace(kc, tiers=kc.tiers - {REMOTE})
            for k, kc in DEFAULT_KIND_COSTS.items()
        }
    )


def test_full_dram_demotes_kv_blocks_to_remote_where_it_would_drop_them() -> None:
    objs = kv_in_dram(8)
    planner = Planner(only_kinds(KV_BLOCK))
    plan = planner.plan(objs, tiers(8 * MiB))
    assert len(plan) > 0
    assert set(plan.dst.tolist()) == {REMOTE}
    # what they would be without it: dropped (recomputed on the next access)
    without = Planner(only_kinds(KV_BLOCK)).floor_tiers(objs, tiers(8 * MiB, remote=False))
    assert set(without.tolist()) == {DROP}


def test_an_unavailable_remote_tier_means_dropping_again() -> None:
    planner = Planner(only_kinds(KV_BLOCK))
    floors = planner.floor_tiers(kv_in_dram(4), tiers(0, remote=False))
    assert set(floors.tolist()) == {DROP}


def test_durable_objects_and_kinds_the_remote_tier_does_not_take_stay_local() -> None:
    planner = Planner(only_kinds(KV_BLOCK))
    durable = kv_in_dram(4, flags=FLAG_DURABLE, kind=BLOB)
    assert set(planner.floor_tiers(durable, tiers(0, ssd=True)).tolist()) == {SSD}
    blobs = kv_in_dram(4, kind=BLOB)
    assert REMOTE not in planner.floor_tiers(blobs, tiers(0)).tolist()
    assert set(Planner(only_kinds(KV_BLOCK, BLOB)).floor_tiers(blobs, tiers(0)).tolist()) == {
        REMOTE
    }


def test_a_remote_tier_slower_than_recomputing_is_not_used() -> None:
    slow = CostModel(
        tiers={
            **CostModel().tiers,
            REMOTE: dataclasses.replace(CostModel().tiers[REMOTE], latency_s=1.0),
        }
    )
    assert set(Planner(slow).floor_tiers(kv_in_dram(4), tiers(0)).tolist()) == {DROP}


def test_pays_back_policy_sends_only_objects_worth_the_upload_or_already_there() -> None:
    planner = Planner(only_kinds(KV_BLOCK), PlannerConfig(remote_policy="pays_back"))
    cold = kv_in_dram(4)
    assert set(planner.floor_tiers(cold, tiers(0)).tolist()) == {DROP}
    already = kv_in_dram(4, flags=FLAG_REMOTE)
    assert set(planner.floor_tiers(already, tiers(0)).tolist()) == {REMOTE}
    hot = dataclasses.replace(kv_in_dram(4), rate=np.full(4, 50.0))
    assert set(planner.floor_tiers(hot, tiers(0)).tolist()) == {REMOTE}


def test_ssd_above_its_high_watermark_sends_cache_objects_remote() -> None:
    objs = dataclasses.replace(
        kv_in_dram(8, size=8 * MiB),
        tier=np.full(8, SSD, dtype=np.uint8),
        persisted=np.ones(8, dtype=bool),
    )
    plan = Planner(only_kinds(KV_BLOCK)).plan(objs, tiers(0, ssd=True, ssd_used=64 * MiB))
    assert len(plan) > 0 and set(plan.src.tolist()) == {SSD}
    assert set(plan.dst.tolist()) == {REMOTE}


def test_remote_entries_above_the_remote_budget_are_forgotten_least_valuable_first() -> None:
    objs = dataclasses.replace(kv_in_dram(8, size=8 * MiB), tier=np.full(8, REMOTE, np.uint8))
    plan = Planner(only_kinds(KV_BLOCK)).plan(objs, tiers(0, remote_used=64 * MiB))
    assert set(plan.src.tolist()) == {REMOTE} and set(plan.dst.tolist()) == {DROP}
    # the least read go first
    assert plan.rows.tolist() == sorted(plan.rows.tolist())[: len(plan)]
    assert 0 in plan.rows.tolist() and 7 not in plan.rows.tolist()


def test_moving_objects_with_a_remote_copy_there_costs_no_copy_budget() -> None:
    objs = kv_in_dram(8, flags=FLAG_REMOTE)
    planner = Planner(only_kinds(KV_BLOCK), PlannerConfig(max_move_bytes=0))
    plan = planner.plan(objs, tiers(8 * MiB))
    assert len(plan) > 0 and plan.copy_bytes == 0
