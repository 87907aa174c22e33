"""Values the remote store drops by itself (eviction, loss) are misses, never
errors: a Get answers NOT_FOUND like any missing object and the stale catalog
entry is removed (counted in tiermem_remote_stale_entries_total); KV reads
answer found=False and LookupPrefix stops at the hole, on the daemon that
demoted the block and on one that never had it."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
import torch

from tests.remote.conftest import Peer, forget, remote_config, sample
from tiermem.client import Client, Kind, KvBlock, KvScope, NotFoundError, Tier
from tiermem.server.app import Daemon
from tiermem.server.model import Kind as ServerKind
from tiermem.server.model import ObjectKey
from tiermem.server.tiers.remote import remote_name

MiB = 1 << 20
SMALL_NODE = {
    "dram": {"capacity_bytes": 8 * MiB, "high_watermark": 0.6, "low_watermark": 0.3},
    "ssd": {"enabled": False},
}
SCOPE = KvScope("evict-model", dtype="float32")


def test_objects_served_from_the_remote_tier_that_the_store_lost_are_not_found(
    peer: Peer, make_remote_daemon: Callable[..., Daemon]
) -> None:
    remote = remote_config(peer, share=False)
    daemon = make_remote_daemon(
        "a", remote, tiers=SMALL_NODE, background={"migrate_interval_s": 60}
    )
    values = {f"obj-{i}": os.urandom(MiB) for i in range(10)}
    with Client(daemon.address) as client:
        for key, data in values.items():
            client.put(Kind.KV_BLOCK, key, data)
        daemon.maintain()
        on_remote = [k for k in values if client.stat(Kind.KV_BLOCK, k).tier == Tier.REMOTE]
        assert len(on_remote) >= 3
        lost, kept = on_remote[:2], on_remote[2:]
        names = [
            remote_name(remote["deployment"], ObjectKey("default", ServerKind.KV_BLOCK, k))
            for k in lost
        ]
        forget(peer, names)
        for key in lost:
            with pytest.raises(NotFoundError):
                client.get(Kind.KV_BLOCK, key)
            with pytest.raises(NotFoundError):  # the stale entry is gone
                client.stat(Kind.KV_BLOCK, key)
        assert sample(daemon, "tiermem_remote_stale_entries_total") == 2
        for key in kept:
            assert client.get(Kind.KV_BLOCK, key) == values[key]
        # the key can be written again
        client.put(Kind.KV_BLOCK, lost[0], b"again")
        assert client.get(Kind.KV_BLOCK, lost[0]) == b"again"


def test_kv_chunks_the_store_lost_are_holes_on_every_daemon(
    peer: Peer, make_remote_daemon: Callable[..., Daemon]
) -> None:
    remote = remote_config(peer)
    a = make_remote_daemon("a", remote, tiers=SMALL_NODE, background={"migrate_interval_s": 60})
    b = make_remote_daemon("b", remote)
    chain = [KvBlock(h, torch.full((MiB // 4,), float(h))) for h in range(1, 13)]
    hashes = [blk.chunk_hash for blk in chain]
    with Client(a.address) as ca, Client(b.address) as cb:
        for i in range(0, 12, 4):
            ca.kv.put_blocks(SCOPE, chain[i : i + 4])
        a.maintain()
        a.maintain()
        tiers = ca.kv.lookup_prefix(SCOPE, hashes).tiers
        assert len(tiers) == 12 and tiers[4] == Tier.REMOTE
        # the store loses chunk #4 (A serves it from the remote tier)
        key = f"{SCOPE.model}@1@0@{SCOPE.dtype}@-@{hashes[4]:016x}"
        forget(
            peer,
            [remote_name(remote["deployment"], ObjectKey("default", ServerKind.KV_BLOCK, key))],
        )
        assert ca.kv.lookup_prefix(SCOPE, hashes).stored_chunks == 4
        assert cb.kv.lookup_prefix(SCOPE, hashes).stored_chunks == 4
        found = [blk.found for blk in cb.kv.get_blocks(SCOPE, hashes)]
        assert found == [True] * 4 + [False] + [True] * 7
        assert [blk.found for blk in ca.kv.get_blocks(SCOPE, hashes[4:6])] == [False, True]
