"""KV blocks a session owns are private to it: write-behind publishing leaves
them out of the remote store, which keeps no owner with a value (another
daemon of the deployment would adopt them as unowned, readable by anyone in
the namespace). A session's put that takes over a published unowned block
deletes that version from the store too. Blocks put without a session are
still shared. Before, both were published and daemon B read them."""

from __future__ import annotations

from collections.abc import Callable

import torch

from tests.remote.conftest import Peer, remote_config, sample
from tests.remote.test_two_daemons_share_kv_through_the_remote_store import SCOPE, chain
from tiermem.client import Client, KvBlock
from tiermem.server.app import Daemon


def test_a_sessions_blocks_on_a_are_not_found_on_b(
    peer: Peer, make_remote_daemon: Callable[..., Daemon]
) -> None:
    remote = remote_config(peer)
    a = make_remote_daemon("a", remote)
    b = make_remote_daemon("b", remote)
    private, public = chain(6, seed=11), chain(4, seed=12)
    with Client(a.address) as ca, Client(b.address) as cb:
        session = ca.sessions.open(label="private")
        cs = ca.as_session(session.id)
        cs.kv.put_blocks(SCOPE, private)
        ca.kv.put_blocks(SCOPE, public)
        a.maintain()  # waits for the write-behind publish
        assert sample(a, "tiermem_remote_published_objects_total", result="stored") == 4
        hashes = [blk.chunk_hash for blk in private]
        assert cb.kv.lookup_prefix(SCOPE, hashes).stored_chunks == 0
        assert not any(g.found for g in cb.kv.get_blocks(SCOPE, hashes))
        assert cb.kv.lookup_prefix(SCOPE, [blk.chunk_hash for blk in public]).stored_chunks == 4
        # the session still reads its own blocks on A
        got = cs.kv.get_tensors(SCOPE, hashes)
        assert all(
            t.view(torch.int16).equal(blk.data.view(torch.int16))
            for t, blk in zip(got, private, strict=True)
        )


def test_a_published_block_a_session_takes_over_leaves_the_store(
    peer: Peer, make_remote_daemon: Callable[..., Daemon]
) -> None:
    remote = remote_config(peer)
    a = make_remote_daemon("a", remote)
    b = make_remote_daemon("b", remote)
    blocks = chain(3, seed=13)
    hashes = [blk.chunk_hash for blk in blocks]
    with Client(a.address) as ca, Client(b.address) as cb:
        ca.kv.put_blocks(SCOPE, blocks)
        a.maintain()
        assert sample(a, "tiermem_remote_published_objects_total", result="stored") == 3
        session = ca.sessions.open(label="takes over")
        mine = [KvBlock(blk.chunk_hash, torch.zeros_like(blk.data)) for blk in blocks]
        ca.as_session(session.id).kv.put_blocks(SCOPE, mine)
        a.maintain()  # waits for the remote deletes
        assert cb.kv.lookup_prefix(SCOPE, hashes).stored_chunks == 0
        assert not any(g.found for g in cb.kv.get_blocks(SCOPE, hashes))
