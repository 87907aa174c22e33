"""Kinds other than KV blocks go remote when ``tiers.remote.kinds`` names them,
on each backend: with no SSD, CACHE objects of that kind leaving a full DRAM
are uploaded to the remote store instead of being dropped, and read back
byte-exact from there. (VECTOR is accepted too, but at the default costs a
vector query, 64 reads at the remote latency, costs more than the miss, so
the planner never sends one there.)"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from tests.remote.conftest import Peer, remote_config, sample
from tiermem.client import Client, Durability, Kind, NotFoundError, Profile, Tier
from tiermem.server.app import Daemon

MiB = 1 << 20
#: 8 MiB of DRAM demoted down to 2.4 MiB at each plan; no SSD.
SMALL_NODE = {
    "dram": {"capacity_bytes": 8 * MiB, "high_watermark": 0.6, "low_watermark": 0.3},
    "ssd": {"enabled": False},
}
CACHE = Profile(durability=Durability.CACHE)  # (both kinds default to DURABLE)


def where(client: Client, kind: Kind, key: str) -> Tier | None:
    try:
        return client.stat(kind, key).tier
    except NotFoundError:
        return None


@pytest.mark.parametrize("kind", [Kind.BLOB, Kind.SCRATCH], ids=lambda k: k.name)
def test_cache_objects_of_a_configured_kind_are_demoted_remote_and_read_back_exact(
    peer: Peer, make_remote_daemon: Callable[..., Daemon], kind: Kind
) -> None:
    daemon = make_remote_daemon(
        "a",
        remote_config(peer, share=False, kinds=[kind.name]),  # a demotion really uploads
        tiers=SMALL_NODE,
        background={"migrate_interval_s": 60},
    )
    values = {f"{kind.name.lower()}-{i}": os.urandom(MiB) for i in range(12)}
    with Client(daemon.address) as client:
        for key, data in values.items():
            client.put(kind, key, data, profile=CACHE)
        daemon.maintain()
        tiers = {key: where(client, kind, key) for key in values}
        remote = [k for k, t in tiers.items() if t == Tier.REMOTE]
        # what DRAM could not keep is in the remote store, nothing was dropped
        assert set(tiers.values()) == {Tier.DRAM, Tier.REMOTE}, tiers
        assert len(remote) >= 6
        assert sample(daemon, "tiermem_remote_objects_total", op="put", result="ok") >= len(remote)
        for key in remote:
            assert client.get(kind, key) == values[key]
        assert sample(daemon, "tiermem_remote_objects_total", op="get", result="ok") >= len(remote)
        for key, data in values.items():
            assert client.get(kind, key) == data
