"""A memory tier above its high watermark comes back down even when what it
must shed are CACHE objects no other tier keeps (no SSD, no remote tier or one
that is unavailable, or not worth a copy there: their floor is DROP): a plan
drops them, least valuable first, interleaved with its demotions, until the tier
is at its low watermark, as forced moves that copy nothing. DURABLE and pinned
objects are never dropped.

Found 2026-12-02: ``_MoveOrder.run`` queued only moves whose target sorts below
the tier (``target > t``, and DROP is 0), so a plan left such residents where
they were, reported neither a forced move nor a deferred one, and the tier stayed
above its watermark until puts made room one by one. The fix changed which
blocks survive an outage in
``tests/remote/test_remote_store_killed_and_restarted_mid_workload.py`` (the
blocks read since they were written stay, fresh ones are dropped), which now
asserts that rather than the newest blocks being local.

Below the high watermark nothing is dropped: a plan never throws away a CACHE
object that still has room (see also
``test_a_plan_drops_cache_objects_only_from_a_tier_above_its_watermark_and_only_as_needed.py``)."""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

from tiermem.client import Client, Kind, NotFoundError
from tiermem.placement import CostModel, Objects, Planner, PlannerConfig, TierState
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
from tiermem.server.app import Daemon
from tiermem.server.model import Tier

MiB = 1 << 20


def dram_only(used: int) -> dict[int, TierState]:
    """8 MiB of DRAM (high 60 %, low 30 %); HBM, SSD and remote off."""
    return {
        HBM: TierState(HBM, False, 0, 0, 0.9, 0.75),
        DRAM: TierState(DRAM, True, 8 * MiB, used, 0.6, 0.3),
        SSD: TierState(SSD, False, 1 << 30, 0, 0.95, 0.9),
        REMOTE: TierState(REMOTE, False, 0, 0, 0.95, 0.9),
    }


def blocks(n: int, flags: list[int] | None = None) -> Objects:
    """``n`` KV blocks of 1 MiB in DRAM, block i read 0.01 * (i + 1) times a second."""
    return Objects(
        np.arange(n, dtype=np.int64),
        np.full(n, MiB, dtype=np.int64),
        np.full(n, KV_BLOCK, dtype=np.uint8),
        np.full(n, DRAM, dtype=np.uint8),
        np.array(flags or [0] * n, dtype=np.uint8),
        0.01 * np.arange(1, n + 1),
        np.zeros(n, dtype=bool),
    )


def test_a_plan_drops_the_least_valuable_cache_blocks_down_to_the_low_watermark() -> None:
    plan = Planner(CostModel(), PlannerConfig()).plan(blocks(7), dram_only(7 * MiB))
    assert set(plan.dst.tolist()) == {DROP} and set(plan.src.tolist()) == {DRAM}
    assert sorted(plan.rows.tolist()) == [0, 1, 2, 3, 4]  # the five least read
    assert plan.forced == 5 and plan.copy_bytes == 0
    assert 7 * MiB - int(plan.size.sum()) <= dram_only(7 * MiB)[DRAM].low_bytes


def test_pinned_and_durable_objects_are_never_dropped_to_get_there() -> None:
    flags = [FLAG_PINNED, FLAG_DURABLE | FLAG_PINNED, 0, 0, 0, 0, 0]
    plan = Planner(CostModel(), PlannerConfig()).plan(blocks(7, flags), dram_only(7 * MiB))
    assert not {0, 1} & set(plan.rows.tolist())
    assert set(plan.dst.tolist()) == {DROP}


def test_below_the_high_watermark_a_plan_drops_nothing() -> None:
    plan = Planner(CostModel(), PlannerConfig()).plan(blocks(4), dram_only(4 * MiB))
    assert DROP not in plan.dst.tolist()


def test_a_daemon_without_ssd_or_remote_tier_brings_dram_back_under_its_watermark(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(
        tiers={
            "dram": {"capacity_bytes": 8 * MiB, "high_watermark": 0.6, "low_watermark": 0.3},
            "ssd": {"enabled": False},
        },
        background={"migrate_interval_s": 3600},
    )
    dram = daemon.store.memory[Tier.DRAM]
    with Client(daemon.address) as client:
        # 7 MiB: fits, above the 4.8 MiB watermark (put pressure may plan already)
        for i in range(7):
            client.put(Kind.KV_BLOCK, f"block-{i}", os.urandom(MiB))
        daemon.maintain()
        assert dram.used_bytes <= 0.6 * dram.capacity_bytes
        kept = []
        for i in range(7):
            try:
                client.stat(Kind.KV_BLOCK, f"block-{i}")
                kept.append(i)
            except NotFoundError:
                pass
        assert kept and len(kept) < 7
    # without an SSD to go to these were evictions for lack of room, counted as
    # the put path counts them, not as the planner's choice to recompute
    registry = daemon.store.metrics.registry
    dropped = 7 - len(kept)
    evicted = registry.get_sample_value(
        "tiermem_evictions_total", {"tier": "DRAM", "kind": "KV_BLOCK"}
    )
    assert evicted == dropped
    assert not registry.get_sample_value(
        "tiermem_drops_to_recompute_total", {"tier": "DRAM", "kind": "KV_BLOCK"}
    )
