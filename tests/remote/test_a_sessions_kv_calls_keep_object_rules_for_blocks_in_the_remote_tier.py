"""A session's KV blocks demoted to the remote tier stay its own: a sibling's
GetBlocks, LookupPrefix and Prefetch, made as itself, treat them as an object
Get would (not found, the prefix ends there, missing and left in place),
although the remote store's values carry no owner; the session itself and a
trusted tool still read them. Before, GetBlocks fetched them from the remote
store for anyone and LookupPrefix counted them."""

from __future__ import annotations

import os
from collections.abc import Callable

from tests.remote.conftest import Peer, remote_config
from tiermem.client import Client, Kind, KvBlock, KvScope, Tier
from tiermem.server.app import Daemon

MiB = 1 << 20
SCOPE = KvScope("m", dtype="uint8")
#: 8 MiB of DRAM demoted down to 2.4 MiB at each plan; no SSD.
SMALL_NODE = {
    "dram": {"capacity_bytes": 8 * MiB, "high_watermark": 0.6, "low_watermark": 0.3},
    "ssd": {"enabled": False},
}


def test_a_siblings_blocks_in_the_remote_tier_do_not_exist_for_a_session(
    peer: Peer, make_remote_daemon: Callable[..., Daemon]
) -> None:
    daemon = make_remote_daemon(
        "d",
        remote_config(peer, share=False),  # no write-behind: a demotion really uploads
        tiers=SMALL_NODE,
        background={"migrate_interval_s": 60},
    )
    with Client(daemon.address, fast_paths=("grpc",)) as client:
        root = client.sessions.open(label="main")
        a, b = (client.sessions.open(parent=root.id, label=x) for x in "ab")
        ca, cb = client.as_session(a.id), client.as_session(b.id)
        data = {i: os.urandom(MiB) for i in range(12)}
        keys = {
            i: ca.kv.put_blocks(SCOPE, [KvBlock(i, d, dtype="uint8", shape=(MiB,))])[0].key
            for i, d in data.items()
        }
        daemon.maintain()
        remote = [i for i in data if client.stat(Kind.KV_BLOCK, keys[i]).tier == Tier.REMOTE]
        assert len(remote) >= 3

        assert not any(g.found for g in cb.kv.get_blocks(SCOPE, remote))
        assert cb.kv.lookup_prefix(SCOPE, remote).stored_chunks == 0
        report = cb.kv.prefetch(SCOPE, remote)
        assert (report.promoted, report.resident, report.missing) == (0, 0, len(remote))
        daemon.maintain()
        assert all(client.stat(Kind.KV_BLOCK, keys[i]).tier == Tier.REMOTE for i in remote)

        assert ca.kv.lookup_prefix(SCOPE, remote).stored_chunks == len(remote)
        got = ca.kv.get_blocks(SCOPE, remote[:2])
        assert [bytes(g.data) for g in got] == [data[i] for i in remote[:2]]
        assert bytes(client.kv.get_blocks(SCOPE, remote[2:3])[0].data) == data[remote[2]]
