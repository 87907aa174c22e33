"""Admission's cache rule: a new HOT CACHE object (a KV block) takes the place of
colder residents of the memory tier above its floor rather than being written to
SSD; hotter residents (a block read again, a vector shard read every second)
stay; objects that are not fresh hot cache entries keep the merit rule. The
simulated daemon, given the same puts, keeps them in DRAM too."""

import numpy as np
import pytest

from tiermem.placement import AccessModel, CostModel, Objects, Planner, TierState
from tiermem.placement.model import COLD, DRAM, HBM, HOT, KV_BLOCK, SSD, VECTOR, WARM
from tiermem.placement.sim import MixParams, SimConfig, Tiermem, run
from tiermem.placement.sim.trace import GET, PUT, Trace

MiB = 1 << 20
KV = 32 * MiB
#: a class prior learned from blocks read back at once, credited at most once
#: per ``min_reuse_s``: below the configured HOT prior
LEARNED = 0.04


def full_dram() -> dict[int, TierState]:
    return {
        HBM: TierState(HBM, False, 0, 0, 0.9, 0.8),
        DRAM: TierState(DRAM, True, 8 * KV, 8 * KV, 0.9, 0.75),
        SSD: TierState(SSD, True, 1 << 40, 0, 0.95, 0.9),
    }


def residents(rates: list[float], kinds: list[int] | None = None) -> Objects:
    n = len(rates)
    return Objects(
        rows=np.arange(n, dtype=np.int64),
        size=np.full(n, KV, dtype=np.int64),
        kind=np.asarray(kinds or [KV_BLOCK] * n, dtype=np.uint8),
        tier=np.full(n, DRAM, dtype=np.uint8),
        flags=np.zeros(n, dtype=np.uint8),
        rate=np.asarray(rates, dtype=np.float64),
        persisted=np.zeros(n, dtype=bool),
    )


def read_once(model: AccessModel, prior: float, put_s: float, now: float) -> float:
    """The rate of a block put at ``put_s`` with ``prior``, read right after."""
    return model.estimate_one(model.record_one(prior, put_s, put_s), put_s, now)


def test_a_new_hot_kv_block_displaces_blocks_read_once_before_it() -> None:
    model = AccessModel()
    planner = Planner(CostModel())
    tiers = full_dram()
    # eight blocks, each put at the (then higher) default prior and read once
    rates = [read_once(model, model.prior(KV_BLOCK, HOT), float(t), 10.0) for t in range(8)]
    objs = residents(rates)
    planner.plan(objs, tiers)  # the thresholds a full DRAM leaves
    fresh = model.fresh_rate(KV_BLOCK, HOT, False, LEARNED)
    assert fresh is not None
    first = planner.admit(KV, KV_BLOCK, LEARNED, False, tiers, fresh_rate=fresh)[0]
    assert first.tier == DRAM
    victims = planner.victims(objs, DRAM, KV, tiers, first.displace_below)
    assert victims.rows.tolist() == [0]  # the coldest: the oldest block
    # the merit rule alone (what admission did before) sends it to SSD
    assert planner.admit(KV, KV_BLOCK, LEARNED, False, tiers)[0].tier == SSD


def test_hotter_residents_keep_their_place() -> None:
    model = AccessModel()
    planner = Planner(CostModel())
    tiers = full_dram()
    hot_kv = read_once(model, 0.5, 9.0, 10.0) + 1.0  # read again since
    objs = residents([hot_kv, 1.0], [KV_BLOCK, VECTOR])
    fresh = model.fresh_rate(KV_BLOCK, HOT, False, LEARNED)
    assert fresh is not None
    first = planner.admit(KV, KV_BLOCK, LEARNED, False, tiers, fresh_rate=fresh)[0]
    assert first.tier == DRAM
    assert len(planner.victims(objs, DRAM, KV, tiers, first.displace_below)) == 0


def test_only_fresh_hot_cache_entries_get_the_cache_rule() -> None:
    model = AccessModel()
    fresh = model.fresh_rate(KV_BLOCK, HOT, False, LEARNED)
    # the HOT hint counts at least as the configured HOT prior, plus the put as a use
    assert fresh == pytest.approx(model.prior(KV_BLOCK, HOT) + 1.0 / model.tau_s)
    assert model.fresh_rate(KV_BLOCK, 0, False, LEARNED) == fresh  # KV's default hint
    assert model.fresh_rate(KV_BLOCK, COLD, False, LEARNED) is None
    assert model.fresh_rate(VECTOR, WARM, False, LEARNED) is None
    assert model.fresh_rate(KV_BLOCK, HOT, True, LEARNED) is None  # DURABLE


def _puts_each_read_once(n: int) -> Trace:
    events = [(i * 0.25, PUT, i) for i in range(n)] + [(i * 0.25 + 0.1, GET, i) for i in range(n)]
    events.sort()
    return Trace(
        params=MixParams(name="hand", duration_s=n * 0.25 + 1),
        size=np.full(n, KV, dtype=np.int64),
        kind=np.full(n, KV_BLOCK, dtype=np.uint8),
        hint=np.full(n, HOT, dtype=np.uint8),
        durable=np.zeros(n, dtype=bool),
        session=np.zeros(n, dtype=np.int32),
        t=np.array([e[0] for e in events]),
        op=np.array([e[1] for e in events], dtype=np.uint8),
        obj=np.array([e[2] for e in events], dtype=np.int32),
        arg=np.zeros(len(events)),
    )


def test_the_simulated_daemon_serves_new_hot_kv_blocks_from_dram_past_its_watermark() -> None:
    # 44 x 32 MiB blocks, each read right after its put, into a 1 GiB DRAM
    cfg = SimConfig(capacities={HBM: 0, DRAM: 32 * KV, SSD: 1 << 40})
    result = run(_puts_each_read_once(44), Tiermem(), cfg)
    assert result.hits == {"DRAM": 44}
