"""Daemon A publishes KV blocks; a session on daemon B puts the same keys (KV
blocks are content-addressed: two daemons hold the same key), B demotes them
to the remote tier (private to the session) and the session then deletes them
and closes. A's published copies stay readable, byte-exact, on daemons C and
D of the deployment throughout. Before, B's private values were written under
the shared name: they replaced A's copies (which C then took as misses, their
header naming the private owner), and the session's delete removed the name."""

from __future__ import annotations

import os
from collections.abc import Callable

from tests.remote.conftest import Peer, remote_config, sample
from tiermem.client import Client, Kind, KvBlock, KvScope, Tier
from tiermem.server.app import Daemon

MiB = 1 << 20
SCOPE = KvScope("shared-private", dtype="uint8")
#: 8 MiB of DRAM demoted down to 2.4 MiB at each plan; no SSD.
SMALL_NODE = {
    "dram": {"capacity_bytes": 8 * MiB, "high_watermark": 0.6, "low_watermark": 0.3},
    "ssd": {"enabled": False},
}


def test_a_published_block_outlives_a_sessions_private_copy_of_its_key_elsewhere(
    peer: Peer, make_remote_daemon: Callable[..., Daemon]
) -> None:
    remote = remote_config(peer)
    a = make_remote_daemon("a", remote)
    b = make_remote_daemon("b", remote, tiers=SMALL_NODE, background={"migrate_interval_s": 60})
    published = {i: os.urandom(MiB) for i in range(12)}
    with Client(a.address) as ca, Client(b.address, fast_paths=("grpc",)) as cb:
        ca.kv.put_blocks(
            SCOPE, [KvBlock(i, d, dtype="uint8", shape=(MiB,)) for i, d in published.items()]
        )
        a.maintain()  # waits for the write-behind publish
        assert sample(a, "tiermem_remote_published_objects_total", result="stored") == 12

        session = cb.sessions.open(label="private")
        cs = cb.as_session(session.id)
        mine = {i: os.urandom(MiB) for i in published}  # other bytes: told apart on reading
        keys = {
            i: cs.kv.put_blocks(SCOPE, [KvBlock(i, d, dtype="uint8", shape=(MiB,))])[0].key
            for i, d in mine.items()
        }
        b.maintain()
        demoted = [i for i in mine if cb.stat(Kind.KV_BLOCK, keys[i]).tier == Tier.REMOTE]
        assert len(demoted) >= 3
        # the session still reads its own blocks from the remote tier
        own = cs.kv.get_blocks(SCOPE, demoted[:3])
        assert [bytes(g.data or b"") for g in own] == [mine[i] for i in demoted[:3]]

        c = make_remote_daemon("c", remote)
        with Client(c.address) as cc:
            got = cc.kv.get_blocks(SCOPE, demoted)
            assert [bytes(g.data or b"") for g in got] == [published[i] for i in demoted]

        assert cs.kv.delete(session=session.id)[0] == len(mine)
        cb.sessions.close(session.id)
        b.maintain()  # waits for the remote deletes

        d = make_remote_daemon("d", remote)
        with Client(d.address) as cd:
            got = cd.kv.get_blocks(SCOPE, demoted)
            assert [bytes(g.data or b"") for g in got] == [published[i] for i in demoted]
