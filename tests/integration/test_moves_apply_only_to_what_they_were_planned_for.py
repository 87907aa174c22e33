"""Moves land only on the object they were planned for. A plan names rows;
rows are reused at once after a delete, and a plan's moves are applied over
seconds, so a put that took a deleted object's row inherited its move (here:
a fresh block dropped right after its put). A pin set while a demotion copies
the object stops the demotion (it switched anyway: a pinned object ended up
demoted). A planned drop of an object that is gone counts as skipped, not
done."""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

from tiermem.client import Client, Kind, Tier
from tiermem.placement.model import DROP
from tiermem.placement.planner import Plan
from tiermem.server.app import Daemon
from tiermem.server.model import Kind as ServerKind
from tiermem.server.model import ObjectKey
from tiermem.server.model import Tier as ServerTier


def _row(daemon: Daemon, name: str) -> int:
    with daemon.store.lock:
        entry = daemon.store.catalog.find(ObjectKey("default", ServerKind.KV_BLOCK, name).encode())
        assert entry is not None
        return int(entry.row)


def test_a_planned_drop_never_lands_on_the_object_that_took_the_row(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(background={"migrate_interval_s": 600})
    new = os.urandom(1 << 20)
    with Client(daemon.address) as c:
        c.put(Kind.KV_BLOCK, "old", os.urandom(1 << 20))
        row = _row(daemon, "old")
        placement = daemon.placement
        real_plan, real_planner = placement.plan, placement.planner.plan

        def drop_old(objs: object, states: object) -> Plan:
            real_planner(objs, states)  # type: ignore[arg-type]
            return Plan(
                rows=np.array([row], np.int64),
                src=np.array([int(ServerTier.DRAM)], np.int64),
                dst=np.array([DROP], np.int64),
                size=np.array([1 << 20], np.int64),
                thresholds={},
                planned_bytes={},
            )

        def plan_then_replace() -> Plan:
            made = real_plan()
            c.delete(Kind.KV_BLOCK, "old")  # between the plan and its application
            c.put(Kind.KV_BLOCK, "new", new)
            return made

        placement.planner.plan = drop_old  # type: ignore[method-assign]
        placement.plan = plan_then_replace  # type: ignore[method-assign]
        before = (
            daemon.metrics.registry.get_sample_value(
                "tiermem_placement_moves_total", {"action": "evict", "result": "skipped"}
            )
            or 0.0
        )
        daemon._migrator.run_once()
        assert _row(daemon, "new") == row  # the row was reused: the case at hand
        assert c.get(Kind.KV_BLOCK, "new") == new
        after = daemon.metrics.registry.get_sample_value(
            "tiermem_placement_moves_total", {"action": "evict", "result": "skipped"}
        )
        assert after == before + 1


def test_a_pin_set_during_a_demotion_stops_it(make_daemon: Callable[..., Daemon]) -> None:
    daemon = make_daemon(background={"migrate_interval_s": 60})
    with Client(daemon.address) as c:
        c.put(Kind.KV_BLOCK, "k", os.urandom(1 << 20))
        assert c.stat(Kind.KV_BLOCK, "k").tier == Tier.DRAM
        encoded = ObjectKey("default", ServerKind.KV_BLOCK, "k").encode()
        faults = daemon.store.faults
        real_point = faults.point
        pinned: list[object] = []

        def point(name: str) -> None:
            if name == "move.after_copy" and not pinned:  # the copy is done, no lock held
                pinned.append(c.placement.pin([(Kind.KV_BLOCK, "k")], tier=Tier.DRAM))
            real_point(name)

        faults.point = point  # type: ignore[method-assign]
        try:
            moved = daemon.mover.move(encoded, ServerTier.SSD)
        finally:
            faults.point = real_point  # type: ignore[method-assign]
        assert pinned == [[Tier.DRAM]]
        assert not moved
        assert c.stat(Kind.KV_BLOCK, "k").tier == Tier.DRAM
