"""A session's KV blocks that daemon A demotes to the remote tier (its local
tiers full) stay private to A: their values carry a private marker (the store
keeps no owner), and daemon B of the same deployment treats them as absent,
whichever way it reads (gRPC GetBlocks, a shared-memory or bulk data-plane
read, Prefetch): nothing found, nothing adopted. A itself, whose catalog knows
the owner, still reads them for the session. Blocks an owner tag owns (an id A
never opened) are shared as before. Before, B adopted the session's blocks as
unowned, readable by anyone in the namespace."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from tests.remote.conftest import Peer, remote_config, sample
from tiermem.client import Client, Kind, KvBlock, KvScope, Tier
from tiermem.server.app import Daemon

MiB = 1 << 20
SCOPE = KvScope("m", dtype="uint8")
#: 8 MiB of DRAM demoted down to 2.4 MiB at each plan; no SSD.
SMALL_NODE = {
    "dram": {"capacity_bytes": 8 * MiB, "high_watermark": 0.6, "low_watermark": 0.3},
    "ssd": {"enabled": False},
}


def demoting_pair(peer: Peer, make_remote_daemon: Callable[..., Daemon]) -> tuple[Daemon, Daemon]:
    """A (small: demotes to the remote tier) and B, one deployment; no
    write-behind publishing, so only demotions upload."""
    remote = remote_config(peer, share=False)
    a = make_remote_daemon("a", remote, tiers=SMALL_NODE, background={"migrate_interval_s": 60})
    return a, make_remote_daemon("b", remote)


@pytest.mark.parametrize("path", ["grpc", "shm", "bulk"])
def test_a_sessions_demoted_blocks_are_misses_on_another_daemon(
    peer: Peer, make_remote_daemon: Callable[..., Daemon], path: str
) -> None:
    a, b = demoting_pair(peer, make_remote_daemon)
    with Client(a.address, fast_paths=("grpc",)) as ca, Client(b.address) as cb:
        session = ca.sessions.open(label="private")
        cs = ca.as_session(session.id)
        data = {i: os.urandom(MiB) for i in range(12)}
        keys = {
            i: cs.kv.put_blocks(SCOPE, [KvBlock(i, d, dtype="uint8", shape=(MiB,))])[0].key
            for i, d in data.items()
        }
        a.maintain()
        remote = [i for i in data if ca.stat(Kind.KV_BLOCK, keys[i]).tier == Tier.REMOTE]
        assert len(remote) >= 3
        assert sample(a, "tiermem_remote_operations_total", op="put", result="ok") > 0

        got = cb.kv.get_blocks(SCOPE, remote, path=path)
        assert not any(g.found for g in got)
        report = cb.kv.prefetch(SCOPE, remote)
        assert (report.promoted, report.resident, report.missing) == (0, 0, len(remote))
        b.maintain()
        assert sample(b, "tiermem_remote_adopted_objects_total") == 0

        # A still serves them to the session, from the remote tier
        mine = cs.kv.get_blocks(SCOPE, remote[:3])
        assert [bytes(g.data or b"") for g in mine] == [data[i] for i in remote[:3]]


def test_blocks_an_owner_tag_owns_demoted_on_a_are_read_on_b(
    peer: Peer, make_remote_daemon: Callable[..., Daemon]
) -> None:
    a, b = demoting_pair(peer, make_remote_daemon)
    with Client(a.address, fast_paths=("grpc",)) as ca, Client(b.address) as cb:
        data = {i: os.urandom(MiB) for i in range(12)}
        keys = {
            i: ca.kv.put_blocks(
                SCOPE, [KvBlock(i, d, dtype="uint8", shape=(MiB,))], session="conversation-7"
            )[0].key
            for i, d in data.items()
        }
        assert a.sessions.get("conversation-7") is None  # a tag, not a session
        a.maintain()
        remote = [i for i in data if ca.stat(Kind.KV_BLOCK, keys[i]).tier == Tier.REMOTE]
        assert len(remote) >= 3
        got = cb.kv.get_blocks(SCOPE, remote)
        assert [bytes(g.data or b"") for g in got] == [data[i] for i in remote]
