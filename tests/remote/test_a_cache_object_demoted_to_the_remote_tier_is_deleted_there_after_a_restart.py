"""A CACHE object a demotion wrote to the remote store (its only copy: no SSD
copy, so its record is volatile) is purged when the daemon restarts, and its
remote copy is deleted then too. It used to stay in the store for good: the
restarted daemon has no record of it, and no daemon publishes it (sharing off)
or, for a session's object, adopts it. A demotion's upload is now journaled
(``tiers/remote/journal.py``) and the restarted daemon deletes it."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import pytest

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


def held(daemon: Daemon, keys: list[str]) -> list[bool]:
    encoded = [ObjectKey("default", ServerKind.KV_BLOCK, k).encode() for k in keys]
    return list(daemon.remote.remote.exists(encoded))  # type: ignore[union-attr]


@pytest.mark.parametrize("peer", ["redis_cluster"], indirect=True)
def test_remote_copies_of_purged_cache_objects_are_deleted_after_a_restart(
    peer: Peer, make_remote_daemon: Callable[..., Daemon]
) -> None:
    remote = remote_config(peer, share=False)  # a demotion really uploads
    settings = {"tiers": SMALL_NODE, "background": {"migrate_interval_s": 60}}
    daemon = make_remote_daemon("a", remote, **settings)
    with Client(daemon.address) as client:
        for i in range(12):
            client.put(Kind.KV_BLOCK, f"block-{i}", os.urandom(MiB))
        daemon.maintain()
        demoted = [
            f"block-{i}"
            for i in range(12)
            if client.stat(Kind.KV_BLOCK, f"block-{i}").tier == Tier.REMOTE
        ]
    assert len(demoted) >= 6 and all(held(daemon, demoted))
    daemon.stop()
    again = make_remote_daemon("a", remote, **settings)  # same data directory
    assert again.recovery is not None and again.recovery.purged_volatile == 12
    deadline = time.monotonic() + 20
    while any(held(again, demoted)):
        assert time.monotonic() < deadline, "remote copies outlived their purged records"
        time.sleep(0.2)
