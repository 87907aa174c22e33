"""The LMCache connector's memory of lookups (``cold_after_hit``): the chunks a
lookup found missing after a hit are put COLD once; lookups with no hit mark
nothing; the memory is bounded."""

import pytest

from tiermem.client.lmcache.convert import AfterHit


def test_chunks_after_the_hit_point_are_taken_once() -> None:
    after = AfterHit()
    after.record([1, 2, 3, 4, 5], hit=2)
    assert [after.take(h) for h in (1, 2)] == [False, False]  # the hit itself
    assert [after.take(h) for h in (3, 4, 5)] == [True, True, True]
    assert not after.take(3)  # asked once: forgotten


def test_a_lookup_with_no_hit_marks_nothing() -> None:
    after = AfterHit()
    after.record([7, 8, 9], hit=0)
    assert len(after) == 0 and not after.take(8)


def test_the_memory_keeps_only_the_newest_chunks() -> None:
    after = AfterHit(max_chunks=3)
    after.record([0, 1, 2, 3], hit=1)
    after.record([10, 11, 12], hit=1)
    assert len(after) == 3
    assert not after.take(1) and after.take(11) and after.take(12) and after.take(3)
    with pytest.raises(ValueError):
        AfterHit(max_chunks=0)
