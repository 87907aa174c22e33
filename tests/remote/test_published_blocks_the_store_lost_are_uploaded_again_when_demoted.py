"""A block published to the remote store carries a flag saying a copy is
there, and a demotion does not upload it again. The store may have lost that
copy since (eviction, a restart): a demotion of a block this daemon still
holds must not turn it into a miss. It checks the copy is still there and
uploads the value again when it is not, so the block stays readable here and
shared with the other daemons. (A block the store lost while this daemon
still holds it is shared again only once it is demoted.)"""

from __future__ import annotations

import os
from collections.abc import Callable

from tests.remote.conftest import Peer, forget, remote_config
from tiermem.client import Client, Kind, Tier
from tiermem.server.app import Daemon
from tiermem.server.model import Kind as ServerKind
from tiermem.server.model import ObjectKey
from tiermem.server.tiers.remote import remote_name

MiB = 1 << 20
NODE = {  # room for the six blocks below the high watermark; ten go over it
    "dram": {"capacity_bytes": 16 * MiB, "high_watermark": 0.6, "low_watermark": 0.3},
    "ssd": {"enabled": False},
}


def test_a_demoted_block_whose_published_copy_the_store_lost_is_still_readable(
    peer: Peer, make_remote_daemon: Callable[..., Daemon]
) -> None:
    remote = remote_config(peer)
    a = make_remote_daemon("a", remote, tiers=NODE, background={"migrate_interval_s": 60})
    b = make_remote_daemon("b", remote)
    values = {f"lost-{i}": os.urandom(MiB) for i in range(6)}
    with Client(a.address) as ca, Client(b.address) as cb:
        for key, data in values.items():
            ca.put(Kind.KV_BLOCK, key, data)
        assert a.remote is not None and a.remote.flush(10)  # published
        forget(
            peer,
            [
                remote_name(remote["deployment"], ObjectKey("default", ServerKind.KV_BLOCK, k))
                for k in values
            ],
        )
        for i in range(4):
            ca.put(Kind.KV_BLOCK, f"newer-{i}", os.urandom(MiB))
        assert all(ca.stat(Kind.KV_BLOCK, k).tier == Tier.DRAM for k in values)
        a.maintain()
        demoted = [k for k in values if ca.stat(Kind.KV_BLOCK, k).tier == Tier.REMOTE]
        assert demoted, "the maintenance pass demoted nothing"
        for key in demoted:
            assert ca.get(Kind.KV_BLOCK, key) == values[key]
        for key in demoted:
            assert cb.get(Kind.KV_BLOCK, key) == values[key]  # shared again
