"""A daemon's private remote values (its sessions' demoted objects) are named
under its own id (``codec.remote_name``), kept in its catalog: the same after
a restart, different for every daemon of the deployment, and never the shared
name of the key."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.remote.conftest import Peer, remote_config
from tiermem.server.app import Daemon
from tiermem.server.model import Kind, ObjectKey


@pytest.mark.parametrize("peer", ["redis_cluster"], indirect=True)  # naming is the same on both
def test_the_daemon_id_survives_a_restart_and_differs_between_daemons(
    peer: Peer, make_remote_daemon: Callable[..., Daemon]
) -> None:
    remote = remote_config(peer)
    a = make_remote_daemon("a", remote)
    b = make_remote_daemon("b", remote)
    assert a.store.remote is not None and b.store.remote is not None
    first = a.store.remote.daemon_id
    assert first and first != b.store.remote.daemon_id
    key = ObjectKey("default", Kind.KV_BLOCK, "chunk").encode()
    names = {a.store.remote.name_of(key), a.store.remote.name_of(key, private=True)}
    assert len(names | {b.store.remote.name_of(key, private=True)}) == 3
    a.stop(grace_s=0)

    again = make_remote_daemon("a", remote)  # the same data directory
    assert again.store.remote is not None and again.store.remote.daemon_id == first
