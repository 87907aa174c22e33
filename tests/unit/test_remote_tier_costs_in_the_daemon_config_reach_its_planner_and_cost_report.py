"""``placement.costs.remote`` in the daemon's config is what the daemon plans
and reports with. Latency and bandwidth decide keep-remote-or-drop: a remote
store configured slower than recomputing a KV block gets none, one at the
default speed gets every block DRAM cannot keep. The price only prices: it
is what ``tiermem cost`` (the Stats RPC's cost report) and
``tiermem_cost_usd_per_hour`` charge for the bytes held remotely, and
placement ignores it, as it ignores every tier's price (the planner weighs
seconds of access time, not dollars). Runs against an in-memory backend."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest

from tests.unit.test_a_failed_remote_publish_is_retried_then_given_up import FlakyStore
from tiermem.cli.cost import format_cost
from tiermem.client import Client, Kind, NotFoundError, Tier
from tiermem.server.app import Daemon

MiB = 1 << 20
GiB = 1 << 30

#: 8 MiB of DRAM demoted down to 2.4 MiB at each plan; no SSD: KV blocks DRAM
#: cannot keep go remote or are dropped.
SMALL_NODE = {
    "dram": {"capacity_bytes": 8 * MiB, "high_watermark": 0.6, "low_watermark": 0.3},
    "ssd": {"enabled": False},
}
#: A remote read of 1 MiB taking 1 s: dearer than recomputing the block (~3 ms).
SLOW = {"latency_s": 1.0, "bandwidth_bytes_per_s": 1.25e9, "price_per_gib_hour": 0.00003}
#: Default speed at a price 10,000 times the default one.
DEAR = {"latency_s": 2e-3, "bandwidth_bytes_per_s": 1.25e9, "price_per_gib_hour": 0.3}


def small_node_on(
    store: FlakyStore,
    make_daemon: Callable[..., Daemon],
    monkeypatch: pytest.MonkeyPatch,
    remote_cost: dict[str, Any],
) -> Daemon:
    monkeypatch.setattr("tiermem.server.app.make_backend", lambda _cfg: store)
    remote = {"enabled": True, "deployment": "unit", "share": False, "retries": 0}
    return make_daemon(
        tiers={**SMALL_NODE, "remote": remote},
        placement={"costs": {"remote": remote_cost}},
        background={"migrate_interval_s": 3600},
    )


def fill(daemon: Daemon, client: Client, blocks: int = 12) -> dict[str, Tier | None]:
    """Put ``blocks`` KV blocks of 1 MiB, plan, and say where each ended (None: dropped)."""
    for i in range(blocks):
        client.put(Kind.KV_BLOCK, f"block-{i}", os.urandom(MiB))
    daemon.maintain()
    where: dict[str, Tier | None] = {}
    for i in range(blocks):
        try:
            where[f"block-{i}"] = client.stat(Kind.KV_BLOCK, f"block-{i}").tier
        except NotFoundError:
            where[f"block-{i}"] = None
    return where


def test_a_remote_tier_configured_slower_than_a_recompute_gets_no_blocks(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FlakyStore(failing_puts=0)
    daemon = small_node_on(store, make_daemon, monkeypatch, SLOW)
    with Client(daemon.address) as client:
        where = fill(daemon, client)
    # what DRAM did not keep was dropped, not uploaded
    assert set(where.values()) == {Tier.DRAM, None} and not store.values


def test_a_dear_remote_tier_still_gets_the_blocks_dram_cannot_keep_and_is_charged_its_price(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FlakyStore(failing_puts=0)
    daemon = small_node_on(store, make_daemon, monkeypatch, DEAR)
    with Client(daemon.address) as client:
        where = fill(daemon, client)
        remote = [k for k, t in where.items() if t == Tier.REMOTE]
        # what DRAM did not keep went remote, whatever the price
        assert set(where.values()) == {Tier.DRAM, Tier.REMOTE}
        assert len(store.values) == len(remote)
        stats = client.stats()
    cost = stats.cost
    assert cost is not None
    line = next(t for t in cost.tiers if t.tier == Tier.REMOTE)
    held = len(remote) * MiB
    assert line.price_per_gib_hour == DEAR["price_per_gib_hour"]
    assert line.used_bytes == held
    assert line.used_usd_per_hour == pytest.approx(held / GiB * 0.3)
    assert line.capacity_usd_per_hour == pytest.approx(line.capacity_bytes / GiB * 0.3)
    # every copy is charged: the kind's line holds the remote bytes at the remote price
    kv = next(k for k in cost.kinds if k.name == "KV_BLOCK")
    dram_price = daemon.config.placement.costs.dram.price_per_gib_hour
    local = (len(where) - len(remote)) * MiB
    assert kv.usd_per_hour == pytest.approx(held / GiB * 0.3 + local / GiB * dram_price)
    assert f"REMOTE {0.3:>9.5f}" in format_cost(stats)
    metric = daemon.metrics.registry.get_sample_value(
        "tiermem_cost_usd_per_hour", {"tier": "REMOTE", "kind": "KV_BLOCK", "namespace": "default"}
    )
    assert metric == pytest.approx(held / GiB * 0.3)
