"""``make_room`` picks its victims outside the store lock, from a copy of the
index columns, then checks each again under the lock. A victim another thread
moved in between is skipped: it is neither moved again nor dropped."""

import os
from typing import Any

from tiermem.client import Client, Kind, Tier
from tiermem.server.app import Daemon
from tiermem.server.model import Kind as ServerKind
from tiermem.server.model import ObjectKey


def test_a_victim_moved_between_the_choice_and_the_check_is_left_alone(make_daemon) -> None:  # type: ignore[no-untyped-def]
    daemon: Daemon = make_daemon(
        tiers={"dram": {"capacity_bytes": 16 << 20}}, background={"migrate_interval_s": 60}
    )
    old, new = os.urandom(2 << 20), os.urandom(2 << 20)
    with Client(daemon.address) as client:
        client.put(Kind.KV_BLOCK, "old", old)
        client.put(Kind.KV_BLOCK, "new", new)
        for _ in range(5):  # "new" is read, "old" is not: "old" is the cheaper victim
            assert client.get(Kind.KV_BLOCK, "new") == new
        assert client.stat(Kind.KV_BLOCK, "old").tier == Tier.DRAM

        planner = daemon.placement.planner
        choose = planner.victims
        moved: list[bool] = []

        def victims_then_a_concurrent_move(*args: Any, **kwargs: Any) -> Any:
            chosen = choose(*args, **kwargs)
            # another thread moves the first victim while make_room holds no lock
            key = ObjectKey("default", ServerKind.KV_BLOCK, "old").encode()
            moved.append(daemon.mover.move(key, Tier.SSD))
            return chosen

        planner.victims = victims_then_a_concurrent_move  # type: ignore[method-assign]
        try:
            freed = daemon.placement.make_room(Tier.DRAM, 1 << 20)
        finally:
            planner.victims = choose  # type: ignore[method-assign]

        assert moved == [True]
        assert freed == 0  # its only victim had left already: nothing moved twice
        assert client.stat(Kind.KV_BLOCK, "old").tier == Tier.SSD
        assert client.stat(Kind.KV_BLOCK, "new").tier == Tier.DRAM
        assert client.get(Kind.KV_BLOCK, "old") == old
        assert client.get(Kind.KV_BLOCK, "new") == new
