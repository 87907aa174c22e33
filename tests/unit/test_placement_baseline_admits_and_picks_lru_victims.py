import numpy as np

from tiermem.placement import TierState, admission_order, lru_victims
from tiermem.placement.admission import COLD, DRAM, HBM, HOT, SSD


def states(hbm: bool = True) -> dict[int, TierState]:
    return {
        HBM: TierState(HBM, hbm, 100, 0, 0.9, 0.7),
        DRAM: TierState(DRAM, True, 1000, 0, 0.9, 0.7),
        SSD: TierState(SSD, True, 10_000, 0, 0.9, 0.7),
    }


def test_default_goes_to_dram_then_ssd() -> None:
    assert admission_order(10, HOT, None, states()) == [DRAM, SSD]


def test_cold_goes_straight_to_ssd() -> None:
    assert admission_order(10, COLD, None, states()) == [SSD]


def test_preferred_hbm_falls_back_downwards_and_skips_disabled_or_too_small() -> None:
    assert admission_order(10, HOT, HBM, states()) == [HBM, DRAM, SSD]
    assert admission_order(10, HOT, HBM, states(hbm=False)) == [DRAM, SSD]
    assert admission_order(500, HOT, HBM, states()) == [DRAM, SSD]


def test_lru_victims_are_oldest_first_until_enough_bytes() -> None:
    atime = np.array([5.0, 1.0, 3.0, 2.0, 4.0])
    sizes = np.array([10, 10, 10, 10, 10])
    rows = np.arange(5)
    assert list(lru_victims(rows, atime, sizes, 25)) == [1, 3, 2]
    assert list(lru_victims(rows, atime, sizes, 0)) == []
    assert list(lru_victims(rows, atime, sizes, 10_000)) == [1, 3, 2, 4, 0]
    assert list(lru_victims(np.array([0, 4]), atime, sizes, 5)) == [4]
