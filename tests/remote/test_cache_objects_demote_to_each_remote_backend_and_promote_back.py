"""Demotion to and promotion from the remote tier, on each backend: with no SSD
(a diskless inference node), KV blocks leaving a full DRAM go to the remote
store instead of being dropped, read back byte-exact from there, and a read
object moves back up to DRAM. DURABLE objects and kinds not in
``tiers.remote.kinds`` never go remote."""

from __future__ import annotations

import os
from collections.abc import Callable

from tests.remote.conftest import Peer, remote_config, sample
from tiermem.client import Client, Durability, Kind, NotFoundError, Profile, Tier
from tiermem.server.app import Daemon

MiB = 1 << 20

#: 8 MiB of DRAM demoted down to 2.4 MiB at each plan; no SSD.
SMALL_NODE = {
    "dram": {"capacity_bytes": 8 * MiB, "high_watermark": 0.6, "low_watermark": 0.3},
    "ssd": {"enabled": False},
}


def tier_or_dropped(client: Client, kind: Kind, key: str) -> Tier | None:
    try:
        return client.stat(kind, key).tier
    except NotFoundError:
        return None


def test_full_dram_demotes_kv_blocks_to_the_remote_store_and_reads_promote_them(
    peer: Peer, make_remote_daemon: Callable[..., Daemon]
) -> None:
    daemon = make_remote_daemon(
        "a",
        remote_config(peer, share=False),  # no write-behind: a demotion really uploads
        tiers=SMALL_NODE,
        background={"migrate_interval_s": 60},
    )
    values = {f"block-{i}": os.urandom(MiB) for i in range(12)}
    with Client(daemon.address) as client:
        for key, data in values.items():
            client.put(Kind.KV_BLOCK, key, data)
        daemon.maintain()
        tiers = {key: client.stat(Kind.KV_BLOCK, key).tier for key in values}
        remote = [k for k, t in tiers.items() if t == Tier.REMOTE]
        # nothing was dropped: what DRAM could not keep is in the remote store
        assert len(remote) >= 6 and set(tiers.values()) == {Tier.DRAM, Tier.REMOTE}
        assert tiers["block-0"] == Tier.REMOTE and tiers["block-11"] == Tier.DRAM
        assert sample(daemon, "tiermem_remote_objects_total", op="put", result="ok") >= len(remote)
        for key, data in values.items():
            assert client.get(Kind.KV_BLOCK, key) == data
        assert sample(daemon, "tiermem_remote_objects_total", op="get", result="ok") >= len(remote)
        # a read object is promoted back to DRAM, from the bytes it was read with
        for _ in range(3):
            assert client.get(Kind.KV_BLOCK, "block-0") == values["block-0"]
        daemon.maintain()
        assert client.stat(Kind.KV_BLOCK, "block-0").tier == Tier.DRAM
        assert client.get(Kind.KV_BLOCK, "block-0") == values["block-0"]
        stats = {t.tier: t for t in client.stats().tiers}
        assert Tier.REMOTE in stats and stats[Tier.REMOTE].used_bytes > 0


def test_durable_objects_and_kinds_not_configured_are_never_sent_remote(
    peer: Peer, make_remote_daemon: Callable[..., Daemon]
) -> None:
    daemon = make_remote_daemon(
        "a",
        remote_config(peer, share=False),
        tiers={**SMALL_NODE, "ssd": {"capacity_bytes": 256 * MiB, "segment_bytes": 16 * MiB}},
        background={"migrate_interval_s": 60},
    )
    durable = Profile(durability=Durability.DURABLE)
    cache = Profile(durability=Durability.CACHE)
    with Client(daemon.address) as client:
        for i in range(6):
            client.put(Kind.KV_BLOCK, f"durable-{i}", os.urandom(MiB), profile=durable)
            client.put(Kind.BLOB, f"blob-{i}", os.urandom(MiB), profile=cache)
        daemon.maintain()
        for i in range(6):
            assert client.stat(Kind.KV_BLOCK, f"durable-{i}").tier != Tier.REMOTE
            assert tier_or_dropped(client, Kind.BLOB, f"blob-{i}") != Tier.REMOTE
    assert sample(daemon, "tiermem_remote_objects_total", op="put", result="ok") == 0
