"""A session's KV blocks that daemon A demoted to the remote tier are not part
of a stored prefix on daemon B of the same deployment: B's LookupPrefix finds
no chunk of them (the read that followed would miss them: they are private to
the session). A still counts them for the session, on the remote tier, and
reads them back byte-exact. Before, LookupPrefix on B asked the store only
whether the shared name existed, and counted the session's blocks as REMOTE."""

from __future__ import annotations

import os
from collections.abc import Callable

from tests.remote.conftest import Peer, remote_config
from tiermem.client import Client, Kind, KvBlock, KvScope, Tier
from tiermem.server.app import Daemon

MiB = 1 << 20
SCOPE = KvScope("lookup-private", dtype="uint8")
#: 8 MiB of DRAM demoted down to 2.4 MiB at each plan; no SSD.
SMALL_NODE = {
    "dram": {"capacity_bytes": 8 * MiB, "high_watermark": 0.6, "low_watermark": 0.3},
    "ssd": {"enabled": False},
}


def test_another_daemons_lookup_finds_none_of_a_sessions_demoted_blocks(
    peer: Peer, make_remote_daemon: Callable[..., Daemon]
) -> None:
    remote = remote_config(peer)
    a = make_remote_daemon("a", remote, tiers=SMALL_NODE, background={"migrate_interval_s": 60})
    b = make_remote_daemon("b", remote)
    with Client(a.address, fast_paths=("grpc",)) as ca, Client(b.address) as cb:
        session = ca.sessions.open(label="private")
        cs = ca.as_session(session.id)
        data = {i: os.urandom(MiB) for i in range(12)}
        keys = {
            i: cs.kv.put_blocks(SCOPE, [KvBlock(i, d, dtype="uint8", shape=(MiB,))])[0].key
            for i, d in data.items()
        }
        a.maintain()
        demoted = [i for i in data if ca.stat(Kind.KV_BLOCK, keys[i]).tier == Tier.REMOTE]
        assert len(demoted) >= 3

        hit = cb.kv.lookup_prefix(SCOPE, demoted)
        assert hit.stored_chunks == 0

        mine = cs.kv.lookup_prefix(SCOPE, demoted)
        assert mine.stored_chunks == len(demoted)
        assert mine.tiers == [Tier.REMOTE] * len(demoted)
        got = cs.kv.get_blocks(SCOPE, demoted)
        assert [bytes(g.data or b"") for g in got] == [data[i] for i in demoted]
