"""A session reading its own KV blocks that were demoted to the remote tier
over the bulk channel gets them fetched in one batch, as over shared memory:
the bulk path hands the data plane's fill the session it acts as, so the
owner's private blocks are brought in before the read instead of one remote
get per block by the read itself."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from tests.remote.conftest import Peer, remote_config
from tests.remote.test_a_sessions_kv_calls_keep_object_rules_for_blocks_in_the_remote_tier import (
    SCOPE,
    SMALL_NODE,
    MiB,
)
from tiermem.client import Client, Kind, KvBlock, Tier
from tiermem.server.app import Daemon


def remote_gets(daemon: Daemon) -> float:
    """Remote get operations so far (one per batch), whatever their result."""
    total = 0.0
    for metric in daemon.metrics.registry.collect():  # every result label
        if metric.name == "tiermem_remote_operations":
            total += sum(
                s.value
                for s in metric.samples
                if s.name.endswith("_total") and s.labels.get("op") == "get"
            )
    return total


@pytest.mark.parametrize("path", ["shm", "bulk"])
def test_a_sessions_own_remote_blocks_come_in_one_batch(
    peer: Peer, make_remote_daemon: Callable[..., Daemon], path: str
) -> None:
    daemon = make_remote_daemon(
        "d",
        remote_config(peer, share=False),  # no write-behind: a demotion really uploads
        tiers=SMALL_NODE,
        background={"migrate_interval_s": 60},
    )
    with Client(daemon.address) as client:
        session = client.sessions.open(label="owner")
        owner = client.as_session(session.id)
        data = {i: os.urandom(MiB) for i in range(12)}
        keys = {
            i: owner.kv.put_blocks(SCOPE, [KvBlock(i, d, dtype="uint8", shape=(MiB,))])[0].key
            for i, d in data.items()
        }
        daemon.maintain()
        remote = [i for i in data if client.stat(Kind.KV_BLOCK, keys[i]).tier == Tier.REMOTE]
        assert len(remote) >= 3
        before = remote_gets(daemon)
        got = owner.kv.get_blocks(SCOPE, remote[:3], path=path)
        assert [bytes(g.data or b"") for g in got] == [data[i] for i in remote[:3]]
        # one batch (a read may go in parts on the wire at once: Mooncake's can
        # take two), not one get per block or more (5 for these 3 before)
        assert remote_gets(daemon) - before < 3
