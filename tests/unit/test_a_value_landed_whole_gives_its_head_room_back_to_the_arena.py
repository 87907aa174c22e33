"""A remote value read in one transfer lands whole, head and payload, in an
arena extent reserved with room for the head before the payload
(``DramEngine.trim_front``, Mooncake's ``get_many_into``). Once it landed the
head's bytes go back to the arena: the payload keeps the same alignment as any
arena value (16 bytes past a 64-byte boundary), costs what a value of its size
costs, and freeing or aborting it gives back every byte, leaving no hole."""

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiermem.server.errors import InvariantViolation
from tiermem.server.tiers.dram import GRANULE, DramEngine
from tiermem.server.tiers.extents import ExtentAllocator
from tiermem.server.tiers.remote.codec import FIXED_HEAD_BYTES

MiB = 1 << 20


def address(view: memoryview) -> int:
    return int(np.frombuffer(view, dtype=np.uint8).ctypes.data)


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(64 * 1024, 2 * MiB), min_size=1, max_size=10),
    aborted=st.integers(0, 9),
)
def test_a_trimmed_extent_is_an_ordinary_value_and_gives_every_byte_back(
    tmp_path_factory: object, sizes: list[int], aborted: int
) -> None:
    shm_dir = Path(tmp_path_factory.mktemp("shm"))  # type: ignore[attr-defined]
    dram = DramEngine(32 * MiB, shm_dir=shm_dir, prefault=False)
    try:
        held = []
        for i, size in enumerate(sizes):
            whole = dram.reserve(FIXED_HEAD_BYTES + size)
            assert whole is not None
            whole.buffer[:FIXED_HEAD_BYTES] = b"h" * FIXED_HEAD_BYTES
            whole.buffer[FIXED_HEAD_BYTES:] = bytes([i + 1]) * size
            payload = dram.trim_front(whole, FIXED_HEAD_BYTES)
            assert payload.size == size and payload.buffer.nbytes == size
            assert address(payload.buffer) % 64 == 16
            assert dram.file_span(payload.buffer) == payload.location
            assert bytes(payload.buffer) == bytes([i + 1]) * size
            held.append(payload)
        assert dram.used_bytes == sum(dram.cost_of(s) for s in sizes)
        for i, payload in enumerate(held):
            if i == aborted:
                dram.abort(payload)
                continue
            dram.commit(payload)
            assert bytes(dram.read(payload.location, payload.size)) == bytes([i + 1]) * payload.size
            dram.free(payload.location, payload.size)
        assert dram.used_bytes == 0
        assert dram.reserve(32 * MiB - GRANULE) is not None, "trimming left the arena fragmented"
    finally:
        dram.close()


def test_only_whole_granules_of_an_arena_extent_can_be_trimmed(tmp_path: Path) -> None:
    dram = DramEngine(4 * MiB, arena_min_bytes=16 * 1024, shm_dir=tmp_path, prefault=False)
    try:
        small = dram.reserve(1000)  # a small value lives outside the arena
        arena = dram.reserve(128 * 1024)
        assert small is not None and arena is not None
        for reservation, nbytes in ((small, 64), (arena, 100), (arena, 0), (arena, 128 * 1024)):
            with pytest.raises(InvariantViolation):
                dram.trim_front(reservation, nbytes)
        assert dram.used_bytes == 1000 + dram.cost_of(128 * 1024)  # nothing changed
    finally:
        dram.close()


def test_the_trimmed_front_merges_with_its_free_neighbour() -> None:
    alloc = ExtentAllocator(64 * 1024, granule=64)
    first = alloc.allocate(4096)
    second = alloc.allocate(8192)
    assert (first, second) == (0, 4096)
    alloc.free(first)
    rest = alloc.trim_front(second, 1024)
    assert rest == 4096 + 1024 and alloc.size_of(rest) == 8192 - 1024
    assert alloc.allocated_bytes == 8192 - 1024
    assert alloc.allocate(4096 + 1024) == 0  # the freed front joined the hole before it
    with pytest.raises(InvariantViolation):
        alloc.free(second)  # the old start is no longer an extent
