"""A session's block demoted to the remote tier goes under the daemon's private
name; promoted back to DRAM it keeps that copy (flagged as a remote copy), and
a later demotion asks the store whether the copy is still there (ff9f558)
before uploading again. That check, and the upload when the copy was lost,
used the shared name: the copy was never found there, so the session's value
was uploaded under the key's shared name with its owner cleared, where every
other daemon of the deployment reads and adopts it as unowned (and it
replaced any value they had published under that key). Both now use the name
of the copy the catalog records (``Store.remote_private``)."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from tests.remote.conftest import Peer, forget, remote_config
from tiermem.client import Client, Kind, NotFoundError
from tiermem.server.app import Daemon
from tiermem.server.model import Kind as ServerKind
from tiermem.server.model import ObjectKey, Tier

MiB = 1 << 20
KEY = ObjectKey("default", ServerKind.KV_BLOCK, "mine").encode()


@pytest.mark.parametrize("lost", [False, True], ids=["kept", "lost"])
def test_a_promoted_private_block_is_never_uploaded_under_the_shared_name(
    peer: Peer, make_remote_daemon: Callable[..., Daemon], lost: bool
) -> None:
    remote = remote_config(peer)
    b = make_remote_daemon("b", remote)
    store = b.store.remote
    assert store is not None
    data = os.urandom(MiB)
    with Client(b.address, fast_paths=("grpc",)) as client:
        session = client.sessions.open(label="private")
        mine = client.as_session(session.id)
        mine.put(Kind.KV_BLOCK, "mine", data)
        assert b.mover.move(KEY, Tier.REMOTE)
        assert store.exists([KEY], [True]) == [True]
        assert b.mover.move(KEY, Tier.DRAM)  # promoted: the private copy is kept
        entry = b.store.catalog.find(KEY)
        assert entry is not None and entry.remote_copy
        if lost:  # the store evicted it meanwhile
            forget(peer, [store.name_of(KEY, private=True)])
        assert b.mover.move(KEY, Tier.REMOTE)
        assert store.exists([KEY], [True]) == [True]
        assert store.exists([KEY], [False]) == [False]
        assert mine.get(Kind.KV_BLOCK, "mine") == data

    c = make_remote_daemon("c", remote)
    with Client(c.address) as other, pytest.raises(NotFoundError):
        other.get(Kind.KV_BLOCK, "mine")
