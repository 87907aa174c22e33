from hypothesis import given, settings
from hypothesis import strategies as st

from tiermem.server.tiers.extents import ExtentAllocator


def test_allocations_are_granule_aligned_and_accounted() -> None:
    a = ExtentAllocator(1 << 20, granule=4096)
    off = a.allocate(1)
    assert off == 0 and a.allocated_bytes == 4096
    off2 = a.allocate(5000)
    assert off2 == 4096 and a.allocated_bytes == 4096 + 8192


def test_full_allocator_returns_none_and_free_makes_room() -> None:
    a = ExtentAllocator(16 * 4096)
    offsets = [a.allocate(4096) for _ in range(16)]
    assert None not in offsets
    assert a.allocate(1) is None
    a.free(offsets[3])
    assert a.allocate(4096) == offsets[3]


def test_freeing_neighbours_coalesces_into_one_extent() -> None:
    a = ExtentAllocator(8 * 4096)
    x, y, z = (a.allocate(2 * 4096) for _ in range(3))
    assert a.allocate(6 * 4096) is None
    for off in (x, z, y):  # free the middle last: it must merge both sides
        assert off is not None
        a.free(off)
    assert a.largest_free() == 8 * 4096
    assert a.allocate(8 * 4096) == 0


def test_best_fit_prefers_the_smallest_hole() -> None:
    a = ExtentAllocator(32 * 4096)
    offs = [a.allocate(4096 * n) for n in (4, 1, 2, 1)]
    a.free(offs[0])  # hole of 4 pages at 0
    a.free(offs[2])  # hole of 2 pages at 5
    assert a.allocate(2 * 4096) == offs[2]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 40_000)), max_size=80))
def test_random_alloc_free_sequences_never_overlap(ops: list[tuple[bool, int]]) -> None:
    a = ExtentAllocator(64 * 4096)
    live: dict[int, int] = {}
    for is_alloc, n in ops:
        if is_alloc or not live:
            off = a.allocate(n)
            if off is None:
                assert a.largest_free() < a.rounded(n)
                continue
            size = a.rounded(n)
            for o, s in live.items():
                assert off + size <= o or o + s <= off
            assert off >= 0 and off + size <= a.capacity_bytes
            live[off] = size
        else:
            off = next(iter(live))
            assert a.free(off) == live.pop(off)
    assert a.allocated_bytes == sum(live.values())
    for off in list(live):
        a.free(off)
    assert a.largest_free() == a.capacity_bytes
