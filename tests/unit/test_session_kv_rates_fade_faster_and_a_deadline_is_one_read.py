"""The access model: KV blocks of a session (read once per turn, worthless once
the session ends) lose their rate faster than shared data; a next-access
deadline is worth one read, and the simulated daemon ends its boost at that read."""

import math

import numpy as np
import pytest

from tiermem.placement import AccessModel
from tiermem.placement.access import PriorLearner, session_kv
from tiermem.placement.model import BLOB, DRAM, HBM, HOT, KV_BLOCK, SCRATCH, SSD, VECTOR, WARM
from tiermem.placement.sim import MixParams, SimConfig, Tiermem, run
from tiermem.placement.sim.trace import GET, PREFETCH, PUT, Trace

MiB = 1 << 20


def test_only_kv_blocks_with_a_session_use_the_session_half_life() -> None:
    kind = np.array([KV_BLOCK, KV_BLOCK, SCRATCH, VECTOR], dtype=np.uint8)
    sess = np.array([7, 0, 7, 7], dtype=np.uint32)
    assert session_kv(kind, sess).tolist() == [True, False, False, False]


def test_a_session_kv_block_read_once_fades_at_its_own_half_life() -> None:
    model = AccessModel(half_life_s=40.0, session_half_life_s=10.0)
    rate = np.zeros(2)
    atime = np.zeros(2)
    session = np.array([True, False])
    model.record(rate, atime, np.arange(2), 100.0, session)
    # a fresh read is worth 1/tau of its class: the session block starts higher ...
    assert rate[0] == pytest.approx(math.log(2) / 10.0)
    assert rate[1] == pytest.approx(math.log(2) / 40.0)
    later = model.estimate(rate, atime, 140.0, session)
    # ... and after four of its half-lives (one of the other's) is worth far less
    assert later[0] == pytest.approx(rate[0] / 16)
    assert later[1] == pytest.approx(rate[1] / 2)
    assert later[0] < later[1]
    # the scalar forms agree with the vector ones
    assert model.record_one(0.0, 0.0, 100.0, session=True) == pytest.approx(rate[0])
    assert model.estimate_one(float(rate[0]), 100.0, 140.0, session=True) == pytest.approx(later[0])


def test_the_learner_decays_read_session_blocks_with_the_session_half_life() -> None:
    model = AccessModel(half_life_s=40.0, session_half_life_s=10.0)
    learner = PriorLearner(model)
    rate = np.array([0.1, 0.1])
    atime = np.array([0.0, 0.0])
    seen = np.array([True, True])
    kind = np.array([KV_BLOCK, KV_BLOCK], dtype=np.uint8)
    hint = np.array([HOT, HOT], dtype=np.uint8)
    out = learner.estimate(rate, atime, seen, kind, hint, 20.0, np.array([True, False]))
    assert out.tolist() == pytest.approx([0.1 / 4, 0.1 / 2 ** (20 / 40)])


def test_a_deadline_is_worth_one_read_per_lead_not_a_stream() -> None:
    model = AccessModel()  # default lead
    d = np.array([100.0])
    assert model.deadline_boost(d, 99.5)[0] == pytest.approx(1.0 / model.deadline_lead_s)
    assert model.deadline_boost(d, 70.0)[0] == pytest.approx(1.0 / 30.0)
    assert model.deadline_boost_one(100.0, 99.9) <= 0.1


def _trace(events: list[tuple[float, int, int, float]]) -> Trace:
    return Trace(
        params=MixParams(name="hand", duration_s=max(e[0] for e in events) + 1),
        size=np.array([4 * MiB], dtype=np.int64),
        kind=np.array([BLOB], dtype=np.uint8),
        hint=np.array([WARM], dtype=np.uint8),
        durable=np.array([True]),
        session=np.zeros(1, dtype=np.int32),
        t=np.array([e[0] for e in events]),
        op=np.array([e[1] for e in events], dtype=np.uint8),
        obj=np.zeros(len(events), dtype=np.int32),
        arg=np.array([e[3] for e in events]),
    )


def test_the_simulated_daemon_ends_a_deadline_boost_at_the_announced_read() -> None:
    policy = Tiermem()
    cfg = SimConfig(capacities={HBM: 0, DRAM: 64 * MiB, SSD: 1 << 40})
    trace = _trace([(0.0, PUT, 0, 0.0), (1.0, PREFETCH, 0, 3.0), (2.0, GET, 0, 0.0)])
    run(trace, policy, cfg)
    assert policy.deadline[0] == 0.0  # the read it announced happened
    trace = _trace([(0.0, PUT, 0, 0.0), (1.0, PREFETCH, 0, 30.0)])
    policy = Tiermem()
    run(trace, policy, cfg)
    assert policy.deadline[0] == 30.0  # still waiting for it
