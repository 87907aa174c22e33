"""A CACHE put into a memory tier whose free bytes add up to enough but lie in
pieces too small for the value (freed extents between residents) makes room:
residents leave until an extent fits, as when the tier is full. Before, room
was asked only for the bytes missing in total (none here), nothing left, and
the put was refused with RESOURCE_EXHAUSTED although every resident was a
CACHE object that could go. Seen on a daemon whose DRAM held 1 MiB KV blocks
and one 64 KiB value: 1.9 MiB free of 8 MiB, no 1 MiB extent
(``test_a_paused_store_fails_remote_reads_within_the_deadline_and_resumes_after``,
now and then)."""

from __future__ import annotations

import os
from collections.abc import Callable

from tiermem.client import Client, Kind, NotFoundError
from tiermem.server.app import Daemon
from tiermem.server.model import Tier

MiB = 1 << 20
KiB = 1 << 10


def test_a_cache_put_that_no_free_extent_fits_evicts_residents_and_is_stored(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(
        tiers={
            # watermarks at the top: no background plan runs in between
            "dram": {"capacity_bytes": 8 * MiB, "high_watermark": 1.0, "low_watermark": 1.0},
            "ssd": {"enabled": False},
        },
        background={"migrate_interval_s": 3600},
    )
    dram = daemon.store.memory[Tier.DRAM]
    with Client(daemon.address) as client:
        for i in range(7):
            client.put(Kind.KV_BLOCK, f"block-{i}", os.urandom(MiB))
        # the arena's tail filled up to less than 64 KiB
        pad = dram.capacity_bytes - dram.used_bytes - 64 * KiB
        client.put(Kind.KV_BLOCK, "pad", os.urandom(pad))
        # three 1 MiB holes, each then taken in part by a value too large for
        # another's remnant: 3 x 424 KiB free, no piece of 1 MiB
        holes = (1, 3, 5)
        for hole in holes:
            client.delete(Kind.KV_BLOCK, f"block-{hole}")
        for hole in holes:
            client.put(Kind.KV_BLOCK, f"part-{hole}", os.urandom(600 * KiB))
        free = dram.capacity_bytes - dram.used_bytes
        assert free > dram.cost_of(MiB)  # enough bytes, in pieces
        data = os.urandom(MiB)
        client.put(Kind.KV_BLOCK, "new", data)
        assert client.get(Kind.KV_BLOCK, "new") == data
        gone = 0
        residents = [f"block-{i}" for i in (0, 2, 4, 6)] + ["pad", "part-1", "part-3", "part-5"]
        for key in residents:
            try:
                client.stat(Kind.KV_BLOCK, key)
            except NotFoundError:
                gone += 1
        assert 1 <= gone <= 3  # room was made, the tier was not emptied
