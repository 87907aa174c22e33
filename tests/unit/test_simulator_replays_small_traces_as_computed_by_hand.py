"""The simulator on traces small enough to check by hand."""

import numpy as np
import pytest

from tiermem.placement import CostModel
from tiermem.placement.model import BLOB, COLD, DRAM, HBM, KV_BLOCK, SSD, VECTOR, WARM
from tiermem.placement.sim import GlobalLru, MixParams, OracleKnapsack, SimConfig, Tiermem, run
from tiermem.placement.sim.engine import Engine, SimInvariantError
from tiermem.placement.sim.trace import GET, PUT, Trace

MiB = 1 << 20


def make_trace(
    objects: list[tuple[int, int, int, bool]], events: list[tuple[float, int, int]]
) -> Trace:
    """objects: (size, kind, hint, durable); events: (t, op, obj)."""
    return Trace(
        params=MixParams(name="hand", duration_s=max(e[0] for e in events) + 1),
        size=np.array([o[0] for o in objects], dtype=np.int64),
        kind=np.array([o[1] for o in objects], dtype=np.uint8),
        hint=np.array([o[2] for o in objects], dtype=np.uint8),
        durable=np.array([o[3] for o in objects], dtype=bool),
        session=np.zeros(len(objects), dtype=np.int32),
        t=np.array([e[0] for e in events]),
        op=np.array([e[1] for e in events], dtype=np.uint8),
        obj=np.array([e[2] for e in events], dtype=np.int32),
        arg=np.zeros(len(events)),
    )


CFG = SimConfig(capacities={HBM: 0, DRAM: 10 * MiB, SSD: 1 << 40})


def test_global_lru_costs_match_a_hand_computation() -> None:
    # two 6 MiB durable vector shards, DRAM holds one: reads alternate a, b, a
    objs = [(6 * MiB, VECTOR, WARM, True), (6 * MiB, VECTOR, WARM, True)]
    events = [(0.0, PUT, 0), (0.1, PUT, 1), (1.0, GET, 0), (2.0, GET, 1), (3.0, GET, 0)]
    r = run(make_trace(objs, events), GlobalLru(CFG.capacities), CFG)
    cost = CostModel()
    ssd = cost.access_cost_one(6 * MiB, VECTOR, SSD)
    dram = cost.access_cost_one(6 * MiB, VECTOR, DRAM)
    # put a -> DRAM; put b evicts a (free: durable, has an SSD copy) -> b in DRAM
    # get a: SSD read, promoted (write) evicting b; get b: same; get a: same
    assert r.reads == 3 and r.hits == {"SSD": 3}
    assert r.read_cost_s == pytest.approx(3 * ssd)
    write = float(cost.write_cost(6 * MiB, DRAM))
    assert r.move_cost_s == pytest.approx(3 * write)
    assert r.write_cost_s == pytest.approx(2 * write)  # the two puts into DRAM
    assert dram < ssd


def test_the_oracle_keeps_the_object_that_will_be_read() -> None:
    objs = [(6 * MiB, VECTOR, WARM, True), (6 * MiB, VECTOR, WARM, True)]
    events = [(0.0, PUT, 0), (0.1, PUT, 1)] + [(1.0 + i, GET, 0) for i in range(5)]
    r = run(make_trace(objs, events), OracleKnapsack(epoch_s=1.0, lookahead_s=10.0), CFG)
    assert r.hits == {"DRAM": 5}


def test_tiermem_admits_cold_blobs_to_ssd_and_promotes_a_hot_shard() -> None:
    objs = [(8 * MiB, BLOB, COLD, True), (4 * MiB, VECTOR, WARM, True)]
    events = [(0.0, PUT, 0), (0.0, PUT, 1)] + [(1.0 + 0.1 * i, GET, 1) for i in range(30)]
    eng_result = run(make_trace(objs, events), Tiermem(), CFG)
    assert eng_result.hits.get("DRAM", 0) >= 29
    assert eng_result.misses == 0


def test_the_engine_refuses_overfull_tiers_and_dropping_durable_objects() -> None:
    objs = [(8 * MiB, VECTOR, WARM, True), (8 * MiB, KV_BLOCK, WARM, False)]
    eng = Engine(make_trace(objs, [(0.0, PUT, 0), (0.0, PUT, 1)]), CFG)
    eng.alive[:] = True
    eng.place(0, DRAM)
    with pytest.raises(SimInvariantError):
        eng.place(1, DRAM)
    with pytest.raises(SimInvariantError):
        eng.drop(0)
    eng.place(1, SSD)
    eng.drop(1)
    assert eng.used[SSD] == 8 * MiB  # the durable shard's copy; the KV block is gone
