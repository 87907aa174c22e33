"""A session's object that a demotion wrote to the remote store goes under the
daemon's private name (``codec``), and its record is volatile (no local copy):
the restarted daemon purges it. Its private copy is deleted then too. Before
the journal of deletes named names, it stayed in the store for good: nothing
recorded the private upload, the restarted daemon has no record of it, and no
other daemon ever reads or deletes another's private names. The demotion's
``claim`` now journals the private name, and the restart's replay deletes it
under that name (the daemon id is kept in the catalog: the same after the
restart)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from tests.remote.conftest import Peer, remote_config
from tiermem.client import Client, Kind, Tier
from tiermem.server.app import Daemon
from tiermem.server.model import Kind as ServerKind
from tiermem.server.model import ObjectKey

MiB = 1 << 20
#: 8 MiB of DRAM demoted down to 2.4 MiB at each plan; no SSD.
SMALL_NODE = {
    "dram": {"capacity_bytes": 8 * MiB, "high_watermark": 0.6, "low_watermark": 0.3},
    "ssd": {"enabled": False},
}


def held(daemon: Daemon, keys: list[str], *, private: bool) -> list[bool]:
    """Whether the store has each key's private (or shared) name."""
    encoded = [ObjectKey("default", ServerKind.KV_BLOCK, k).encode() for k in keys]
    remote = daemon.store.remote
    assert remote is not None
    return list(remote.exists(encoded, [private] * len(encoded)))


def test_a_sessions_private_copies_are_deleted_when_a_restart_purges_their_records(
    peer: Peer, make_remote_daemon: Callable[..., Daemon]
) -> None:
    remote = remote_config(peer)
    settings = {"tiers": SMALL_NODE, "background": {"migrate_interval_s": 60}}
    daemon = make_remote_daemon("a", remote, **settings)
    names = [f"block-{i}" for i in range(12)]
    with Client(daemon.address, fast_paths=("grpc",)) as client:
        session = client.sessions.open(label="private")
        mine = client.as_session(session.id)
        for name in names:
            mine.put(Kind.KV_BLOCK, name, os.urandom(MiB))
        daemon.maintain()
        demoted = [n for n in names if client.stat(Kind.KV_BLOCK, n).tier == Tier.REMOTE]
    assert len(demoted) >= 6
    assert all(held(daemon, demoted, private=True))  # under the private name
    assert not any(held(daemon, demoted, private=False))  # never the shared one
    daemon.stop()  # the session stays open: nothing deletes its objects on the way

    again = make_remote_daemon("a", remote, **settings)  # same data directory
    assert again.recovery is not None and again.recovery.purged_volatile >= len(demoted)
    deadline = time.monotonic() + 20
    while any(held(again, demoted, private=True)):
        assert time.monotonic() < deadline, "private copies outlived their purged records"
        time.sleep(0.2)
