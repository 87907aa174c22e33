"""A session's read through the data plane (shared-memory lease or bulk
channel) of a sibling's KV blocks that were demoted to the remote tier is
refused before anything is fetched: no remote get is made, the blocks stay in
the remote tier (nothing pulled in, promoted or adopted), and no bytes reach
the caller. The owner still reads them over both paths. Before, the data
plane's fill fetched and brought them in, and only the read that followed
refused them."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from tests.remote.conftest import Peer, remote_config, sample
from tests.remote.test_a_sessions_kv_calls_keep_object_rules_for_blocks_in_the_remote_tier import (
    SCOPE,
    SMALL_NODE,
    MiB,
)
from tiermem.client import Client, Kind, KvBlock, NotFoundError, PermissionDeniedError, Tier
from tiermem.client.fastpath import ObjectRef
from tiermem.server.app import Daemon


@pytest.mark.parametrize("path", ["shm", "bulk"])
def test_a_siblings_remote_blocks_are_refused_before_they_are_fetched(
    peer: Peer, make_remote_daemon: Callable[..., Daemon], path: str
) -> None:
    daemon = make_remote_daemon(
        "d",
        remote_config(peer, share=False),  # no write-behind: a demotion really uploads
        tiers=SMALL_NODE,
        background={"migrate_interval_s": 60},
    )
    with Client(daemon.address) as client:
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

        def gets() -> float:
            return sample(daemon, "tiermem_remote_operations_total", op="get", result="ok")

        before = gets()
        assert not any(g.found for g in cb.kv.get_blocks(SCOPE, remote, path=path))
        for i in remote[:2]:
            with pytest.raises((NotFoundError, PermissionDeniedError)):
                cb.dataplane.get_many([ObjectRef(Kind.KV_BLOCK, keys[i])], path=path)
        assert gets() == before
        assert all(client.stat(Kind.KV_BLOCK, keys[i]).tier == Tier.REMOTE for i in remote)

        got = ca.kv.get_blocks(SCOPE, remote[:2], path=path)
        assert [bytes(g.data or b"") for g in got] == [data[i] for i in remote[:2]]
        (own,) = ca.dataplane.get_many([ObjectRef(Kind.KV_BLOCK, keys[remote[2]])], path=path)
        assert bytes(own.data) == data[remote[2]]
