"""The access model's decayed rates and learned priors, and the cost model's
access, move and money costs."""

import math

import numpy as np

from tiermem.placement import AccessModel, CostModel, cost_report
from tiermem.placement.access import PriorLearner
from tiermem.placement.model import BLOB, DRAM, DROP, HBM, HOT, KV_BLOCK, SSD, VECTOR

GiB = 1 << 30


def test_a_steady_stream_of_reads_estimates_its_rate() -> None:
    model = AccessModel(half_life_s=10.0)
    rate = np.zeros(1)
    atime = np.zeros(1)
    for i in range(1, 2001):  # 2 reads per second for 1000 s
        model.record(rate, atime, 0, i * 0.5)
    assert abs(model.estimate(rate, atime, 1000.0)[0] - 2.0) < 0.2
    # it halves every half-life once the reads stop
    assert math.isclose(
        model.estimate(rate, atime, 1010.0)[0], model.estimate(rate, atime, 1000.0)[0] / 2
    )


def test_a_deadline_boosts_until_shortly_after_it_passed() -> None:
    model = AccessModel(deadline_lead_s=1.0, deadline_grace_s=5.0)
    d = np.array([100.0, 0.0])
    assert model.deadline_boost(d, 90.0).tolist() == [0.1, 0.0]
    assert model.deadline_boost(d, 99.9)[0] == 1.0  # capped at 1 / lead
    assert model.deadline_boost(d, 104.0)[0] == 1.0
    assert model.deadline_boost(d, 106.0)[0] == 0.0


def test_priors_follow_the_hint_until_reads_teach_otherwise() -> None:
    model = AccessModel(min_reuse_s=1.0)
    learner = PriorLearner(model, window_s=1000.0, min_samples=10)
    assert learner.prior(KV_BLOCK, HOT) == model.prior(KV_BLOCK, HOT)
    for i in range(500):  # KV blocks that nobody reads back
        learner.on_put(KV_BLOCK, HOT, float(i))
    assert learner.prior(KV_BLOCK, HOT) < 0.05 * model.prior(KV_BLOCK, HOT)
    for i in range(500):  # every one read back 2 s after it was written
        learner.on_put(VECTOR, HOT, float(i))
        learner.on_first_read(VECTOR, HOT, 2.0, float(i) + 2)
    assert abs(learner.prior(VECTOR, HOT) - 0.5) < 0.05


def test_access_cost_is_latency_plus_size_over_bandwidth_shaped_per_kind() -> None:
    cost = CostModel()
    size = 64 << 20
    t = cost.tiers[SSD]
    assert math.isclose(
        cost.access_cost_one(size, BLOB, SSD), t.latency_s + size / t.bandwidth_bytes_per_s
    )
    k = cost.kinds[VECTOR]
    assert math.isclose(
        cost.access_cost_one(size, VECTOR, SSD),
        k.reads_per_access * t.latency_s + k.bytes_fraction * size / t.bandwidth_bytes_per_s,
    )
    assert cost.access_cost_one(size, KV_BLOCK, HBM) < cost.access_cost_one(size, KV_BLOCK, DRAM)
    assert cost.access_cost_one(size, KV_BLOCK, DROP) > cost.access_cost_one(size, KV_BLOCK, SSD)
    assert not cost.allowed_one(BLOB, HBM) and cost.allowed_one(VECTOR, HBM)


def test_demoting_to_an_existing_ssd_copy_or_dropping_costs_nothing() -> None:
    cost = CostModel()
    assert cost.migration_cost_one(1 << 20, DRAM, SSD, persisted=True) == 0.0
    assert cost.migration_cost_one(1 << 20, DRAM, DROP, persisted=False) == 0.0
    assert cost.migration_cost_one(1 << 20, DRAM, SSD, persisted=False) > 0.0
    assert cost.migration_cost_one(1 << 20, SSD, DRAM, persisted=True) > 0.0


def test_cost_report_prices_every_copy_by_tier_kind_namespace_and_session() -> None:
    cost = CostModel()
    report = cost_report(
        cost,
        size=np.array([GiB, GiB, 2 * GiB]),
        tier=np.array([DRAM, SSD, SSD]),
        kind=np.array([KV_BLOCK, VECTOR, BLOB]),
        ssd_copy=np.array([True, True, True]),
        ns=np.array([1, 1, 2]),
        session=np.array([7, 0, 7]),
        capacities={DRAM: (4 * GiB, GiB), SSD: (100 * GiB, 4 * GiB)},
        namespace_names={1: "a", 2: "b"},
        session_names={7: "s7"},
    )
    dram, ssd = cost.tiers[DRAM].price_per_gib_hour, cost.tiers[SSD].price_per_gib_hour
    # the DRAM object also pays for its SSD copy
    assert math.isclose(report.used_usd_per_hour, dram + 4 * ssd)
    kinds = {line.name: line.usd_per_hour for line in report.kinds}
    assert math.isclose(kinds["KV_BLOCK"], dram + ssd)
    names = {line.name: line.usd_per_hour for line in report.namespaces}
    assert math.isclose(names["b"], 2 * ssd)
    assert [line.name for line in report.sessions] == ["s7"]
    assert math.isclose(report.sessions[0].usd_per_hour, dram + 3 * ssd)
    assert math.isclose(report.capacity_usd_per_hour, 4 * dram + 100 * ssd)


def test_a_learned_prior_credits_reuse_at_most_once_per_min_reuse_time() -> None:
    model = AccessModel(min_reuse_s=30.0)
    learner = PriorLearner(model, window_s=1000.0, min_samples=1)
    for i in range(5000):  # every one read back 2 s after it was written
        learner.on_put(VECTOR, HOT, float(i))
        learner.on_first_read(VECTOR, HOT, 2.0, float(i) + 2)
    assert abs(learner.prior(VECTOR, HOT) - 1.0 / 30.0) < 0.005
    # and an unread object keeps at least that long to be read back
    assert learner.reuse_time_s(VECTOR, HOT) >= 30.0 * 0.99
