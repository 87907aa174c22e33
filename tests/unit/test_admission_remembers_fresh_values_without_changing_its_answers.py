"""Admission remembers what a fresh hot entry is worth (``Planner._fresh_value``
costs ~0.2 ms of numpy per put): a planner that has answered before gives the
same admissions as a new one, also when a tier was enabled or disabled in
between, and the memo stays bounded."""

import itertools

from tiermem.placement import AccessModel, CostModel, Planner, TierState
from tiermem.placement.model import DRAM, HBM, HOT, KV_BLOCK, REMOTE, SSD
from tiermem.placement.planner import FRESH_VALUE_MEMO_MAX

MiB = 1 << 20


def tiers(ssd: bool, remote: bool) -> dict[int, TierState]:
    return {
        HBM: TierState(HBM, False, 0, 0, 0.9, 0.8),
        DRAM: TierState(DRAM, True, 64 * MiB, 60 * MiB, 0.9, 0.75),
        SSD: TierState(SSD, ssd, 1 << 40, 0, 0.95, 0.9),
        REMOTE: TierState(REMOTE, remote, 1 << 40, 0, 0.95, 0.9),
    }


def test_a_planner_that_remembers_answers_like_a_new_one() -> None:
    model = AccessModel()
    remembering = Planner(CostModel())
    cases = list(
        itertools.product(
            [256 << 10, 4 * MiB], [0.01, 0.5], [(True, False), (False, False), (False, True)]
        )
    )
    # twice over, so the second pass is answered from the memo
    for size, prior, (ssd, remote) in cases + cases:
        fresh = model.fresh_rate(KV_BLOCK, HOT, False, prior)
        states = tiers(ssd, remote)
        got = remembering.admit(size, KV_BLOCK, prior, False, states, fresh_rate=fresh)
        want = Planner(CostModel()).admit(size, KV_BLOCK, prior, False, states, fresh_rate=fresh)
        assert got == want, (size, prior, ssd, remote)


def test_the_fresh_value_depends_on_which_tiers_are_enabled() -> None:
    """The memo's key must name the enabled tiers: the same new block is worth
    a different amount with and without an SSD to leave to."""
    planner = Planner(CostModel())
    rate = 1.0
    with_ssd = planner._fresh_value(256 << 10, KV_BLOCK, rate, DRAM, tiers(True, False))
    without = planner._fresh_value(256 << 10, KV_BLOCK, rate, DRAM, tiers(False, False))
    assert with_ssd != without
    assert without == Planner(CostModel())._fresh_value(
        256 << 10, KV_BLOCK, rate, DRAM, tiers(False, False)
    )


def test_the_memo_is_bounded() -> None:
    planner = Planner(CostModel())
    states = tiers(True, False)
    for i in range(FRESH_VALUE_MEMO_MAX + 10):
        planner._fresh_value(256 << 10, KV_BLOCK, 1.0 + i, DRAM, states)
    assert len(planner._fresh_values) <= FRESH_VALUE_MEMO_MAX
