"""Only a session the daemon opened keeps its objects out of the remote store.
A plain owner tag (an id the daemon never opened: no quota, no isolation, as
before sessions existed), e.g. a trusted worker tagging KV blocks with a
conversation id, is shared like an unowned put: its blocks are published, and
a tagged put over a published unowned block publishes the new version instead
of deleting the old one. Before, 3381209 treated every tag as a session:
nothing tagged was published and a tagged overwrite removed the shared block."""

from __future__ import annotations

from collections.abc import Callable

import torch

from tests.remote.conftest import Peer, remote_config, sample
from tests.remote.test_two_daemons_share_kv_through_the_remote_store import SCOPE, chain
from tiermem.client import Client, KvBlock
from tiermem.server.app import Daemon


def test_owner_tagged_blocks_are_shared_like_before_sessions(
    peer: Peer, make_remote_daemon: Callable[..., Daemon]
) -> None:
    remote = remote_config(peer)
    a = make_remote_daemon("a", remote)
    b = make_remote_daemon("b", remote)
    blocks = chain(4, seed=21)
    hashes = [blk.chunk_hash for blk in blocks]
    with Client(a.address) as ca, Client(b.address) as cb:
        # a trusted worker (no x-tiermem-session) tags blocks with a conversation id
        ca.kv.put_blocks(SCOPE, blocks, session="conversation-42")
        assert a.sessions.get("conversation-42") is None  # a tag, not a session
        a.maintain()
        assert sample(a, "tiermem_remote_published_objects_total", result="stored") == 4
        assert cb.kv.lookup_prefix(SCOPE, hashes).stored_chunks == 4


def test_a_tagged_put_over_a_published_block_publishes_it_again(
    peer: Peer, make_remote_daemon: Callable[..., Daemon]
) -> None:
    remote = remote_config(peer)
    a = make_remote_daemon("a", remote)
    b = make_remote_daemon("b", remote)
    blocks = chain(3, seed=22)
    hashes = [blk.chunk_hash for blk in blocks]
    with Client(a.address) as ca, Client(b.address) as cb:
        ca.kv.put_blocks(SCOPE, blocks)
        a.maintain()
        assert sample(a, "tiermem_remote_published_objects_total", result="stored") == 3
        tagged = [KvBlock(blk.chunk_hash, torch.ones_like(blk.data)) for blk in blocks]
        ca.kv.put_blocks(SCOPE, tagged, session="conversation-43")
        a.maintain()  # waits for the publish (and any delete)
        assert sample(a, "tiermem_remote_published_objects_total", result="stored") == 6
        assert cb.kv.lookup_prefix(SCOPE, hashes).stored_chunks == 3
        got = cb.kv.get_tensors(SCOPE, hashes)
        assert all(
            t.view(torch.int16).equal(blk.data.view(torch.int16))
            for t, blk in zip(got, tagged, strict=True)
        )
