"""A shared-memory read of a block daemon B does not hold gives a value of at
most the reply's inline limit inline, also when Mooncake lands it whole (head
and payload in one transfer, an extent reserved with room for the head): the
inline decision is taken on the payload's size, not on the head room's."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tests.remote.conftest import Peer, remote_config
from tests.remote.test_blocks_another_daemon_wrote_are_read_through_the_data_plane import (
    SCOPE,
    key_of,
)
from tiermem.client import Client, KvBlock
from tiermem.server.app import Daemon
from tiermem.server.model import Kind, ObjectKey
from tiermem.server.tiers.remote.codec import FIXED_HEAD_MIN_PAYLOAD_BYTES

SIZE = FIXED_HEAD_MIN_PAYLOAD_BYTES  # the smallest payload landed whole on Mooncake


@pytest.mark.parametrize("peer", ["mooncake"], indirect=True)
def test_a_remote_value_of_inline_size_comes_inline(
    peer: Peer, make_remote_daemon: Callable[..., Daemon]
) -> None:
    remote = remote_config(peer)
    a = make_remote_daemon("a", remote)
    b = make_remote_daemon("b", remote)
    blk = KvBlock(77_001, np.random.default_rng(5).integers(0, 256, SIZE, dtype=np.uint8))
    with Client(a.address) as ca:
        ca.kv.put_blocks(SCOPE, [blk])
    a.maintain()
    key = ObjectKey("default", Kind.KV_BLOCK, key_of(blk.chunk_hash))
    shm = b.dataplane.shm
    (grant,) = shm.lease("worker", [key], ttl_s=30.0, inline_max_bytes=SIZE)
    if grant.lease is not None:
        shm.release("worker", [grant.lease.lease_id])
    assert grant.meta.size_bytes == SIZE
    assert grant.lease is None, "a value of the inline limit was staged in the arena and leased"
    assert grant.inline == blk.data.tobytes()
