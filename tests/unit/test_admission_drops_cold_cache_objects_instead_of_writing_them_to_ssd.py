"""Admission of objects not worth keeping: a CACHE object whose SSD copy would
not pay back its write (e.g. a KV chunk its client marked COLD) is dropped, not
written to SSD, when memory does not take it; DURABLE objects never are; and
in the simulator a dropped block read later is a miss, recomputed and stored
again, never a hit on something that is not there."""

import dataclasses

import numpy as np

from tiermem.placement import CostModel, Planner, PlannerConfig, TierState
from tiermem.placement.access import AccessModel
from tiermem.placement.model import COLD, DRAM, DROP, HBM, HOT, KV_BLOCK, SSD, VECTOR, WARM
from tiermem.placement.sim import MixParams, SimConfig, Tiermem, generate, run
from tiermem.placement.sim.trace import GET, PUT, Trace

MiB = 1 << 20
BLOCK = 4 * MiB
COLD_KV = AccessModel().prior(KV_BLOCK, COLD)
HOT_KV = AccessModel().prior(KV_BLOCK, HOT)


def tiers(dram_used: int = 0, ssd: bool = True) -> dict[int, TierState]:
    return {
        HBM: TierState(HBM, True, 64 * MiB, 0, 0.9, 0.8),
        DRAM: TierState(DRAM, True, 256 * MiB, dram_used, 0.9, 0.8),
        SSD: TierState(SSD, ssd, 1 << 40, 0, 0.95, 0.9),
    }


def full_planner() -> Planner:
    """A planner whose last plan found both memory tiers full of dense residents."""
    planner = Planner(CostModel(), PlannerConfig())
    planner.thresholds = {HBM: 1e-3, DRAM: 1e-3}
    return planner


def test_a_cold_cache_block_memory_does_not_take_is_dropped_not_written_to_ssd() -> None:
    planner = full_planner()
    floor, _ = planner.admission_floor(BLOCK, KV_BLOCK, COLD_KV, False, tiers())
    assert floor == DROP
    admissions = planner.admit(BLOCK, KV_BLOCK, COLD_KV, False, tiers())
    assert [a.tier for a in admissions] == [DROP]


def test_a_hot_cache_block_still_gets_an_ssd_copy_when_memory_is_full() -> None:
    planner = full_planner()
    admissions = planner.admit(BLOCK, KV_BLOCK, HOT_KV, False, tiers())
    assert [a.tier for a in admissions] == [SSD]


def test_durable_objects_are_never_dropped_whatever_their_hint() -> None:
    planner = full_planner()
    for rate in (0.0, COLD_KV, 1e-9):
        floor, _ = planner.admission_floor(BLOCK, VECTOR, rate, True, tiers())
        assert floor == SSD
        admissions = planner.admit(BLOCK, VECTOR, rate, True, tiers())
        assert DROP not in [a.tier for a in admissions]
        assert admissions[-1].tier == SSD


def test_a_cold_block_is_kept_in_memory_only_where_its_reuse_pays_the_write() -> None:
    planner = Planner(CostModel(), PlannerConfig())  # memory not full: thresholds 0
    cold = [a.tier for a in planner.admit(BLOCK, KV_BLOCK, COLD_KV, False, tiers())]
    never = [a.tier for a in planner.admit(BLOCK, KV_BLOCK, 1e-6, False, tiers())]
    hot = [a.tier for a in planner.admit(BLOCK, KV_BLOCK, HOT_KV, False, tiers())]
    # 0.001 reads/s pay for a 4 MiB HBM write (microseconds), not for a DRAM one
    assert cold == [HBM, DROP]
    assert never == [DROP]
    assert hot == [HBM, DRAM, SSD]


def test_a_client_hint_that_proves_wrong_is_unlearned() -> None:
    """The COLD class's prior is learned: if COLD blocks are read back soon, their
    SSD copy pays again and admission stops dropping them."""
    from tiermem.placement.access import PriorLearner

    learner = PriorLearner(AccessModel(), min_samples=10)
    for i in range(200):
        learner.on_put(KV_BLOCK, COLD, float(i))
        learner.on_first_read(KV_BLOCK, COLD, 2.0, float(i) + 2.0)
    prior = learner.prior(KV_BLOCK, COLD)
    floor, _ = full_planner().admission_floor(BLOCK, KV_BLOCK, prior, False, tiers())
    assert floor == SSD


def test_without_ssd_there_is_no_write_to_spare_and_no_drop_at_admission() -> None:
    # the daemon's cache rule then takes the block by displacing the least
    # valuable residents, as before
    planner = full_planner()
    assert planner.admit(BLOCK, KV_BLOCK, COLD_KV, False, tiers(ssd=False)) == []


def _trace(hint: int) -> Trace:
    """One KV block put with ``hint``, read twice later; a durable shard read too."""
    events = [(0.0, PUT, 0), (0.0, PUT, 1), (5.0, GET, 0), (6.0, GET, 0), (7.0, GET, 1)]
    return Trace(
        params=MixParams(name="hand", duration_s=8.0),
        size=np.array([BLOCK, BLOCK], dtype=np.int64),
        kind=np.array([KV_BLOCK, VECTOR], dtype=np.uint8),
        hint=np.array([hint, WARM], dtype=np.uint8),
        durable=np.array([False, True]),
        session=np.zeros(2, dtype=np.int32),
        t=np.array([e[0] for e in events]),
        op=np.array([e[1] for e in events], dtype=np.uint8),
        obj=np.array([e[2] for e in events], dtype=np.int32),
        arg=np.zeros(len(events)),
    )


def test_a_dropped_block_read_later_is_a_miss_then_stored_again() -> None:
    # no HBM; a DRAM copy does not pay for itself: the COLD block is received in
    # free memory and dropped (the daemon's way), a later read misses
    cfg = SimConfig(capacities={HBM: 0, DRAM: 64 * MiB, SSD: 1 << 40})
    policy = Tiermem()
    r = run(_trace(COLD), policy, cfg)
    assert policy.dropped_puts == 3  # the put, then the re-put after each miss
    assert r.misses == 2 and r.hits.get("MISS") == 2  # the durable shard was a hit
    hot = run(_trace(HOT), Tiermem(), cfg)
    assert hot.misses == 0  # HOT: kept (in DRAM or on SSD), then hit


def test_with_no_free_memory_to_receive_it_a_cold_block_goes_to_ssd() -> None:
    cfg = SimConfig(capacities={HBM: 0, DRAM: 2 * MiB, SSD: 1 << 40})
    policy = Tiermem()
    r = run(_trace(COLD), policy, cfg)
    assert policy.dropped_puts == 0 and policy.ssd_fallbacks == 1
    assert r.misses == 0


def test_the_modelled_client_marks_only_one_shot_chunks_after_a_prefix_hit() -> None:
    p = MixParams(name="small", duration_s=20.0, kv_request_rate_per_s=4.0,
                  kv_prefixes=3, kv_session_rate_per_s=0.5, vec_shards=0, blob_count=0,
                  blob_upload_rate_per_s=0.0, scratch_agent_rate_per_s=0.0)  # fmt: skip
    trace = generate(p)
    r = run(trace, Tiermem(), SimConfig())
    assert r.cold_hinted_puts > 0
    # every block a COLD put touched is a one-shot request's, never a session's
    from tiermem.placement.sim.engine import Engine

    eng = Engine(trace, SimConfig())
    assert trace.req is not None
    sessions = trace.session[trace.obj] != 0
    assert (trace.req[sessions] == 0).all()
    off = run(generate(dataclasses.replace(p, kv_client_hints=False)), Tiermem(), SimConfig())
    assert off.cold_hinted_puts == 0
    assert (eng.hint == trace.hint).all()  # the engine starts from the trace's hints
