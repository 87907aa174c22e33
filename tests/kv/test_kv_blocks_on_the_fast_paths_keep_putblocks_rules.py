"""KV blocks the client sends by shared memory or the bulk channel (as KV_BLOCK
object puts) keep PutBlocks' rules: a chunk hash named twice in one put is
INVALID_ARGUMENT (two large blocks: the last silently won; a large and a
small one: they went different ways and the small one replaced the large),
and a block over ``kv.max_block_bytes`` is refused on every path."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from tiermem.client import CapacityError, Client, InvalidArgumentError, KvBlock, KvScope
from tiermem.server.app import Daemon

SCOPE = KvScope("fast-model", dtype="float32")
BIG = 1 << 18  # 256 KiB: over the fast paths' threshold


@pytest.mark.parametrize("small", [False, True], ids=["two large", "large and small"])
def test_a_hash_named_twice_is_refused_and_nothing_stored(client: Client, small: bool) -> None:
    second = torch.ones(4) if small else torch.ones(BIG // 4)
    with pytest.raises(InvalidArgumentError, match="twice"):
        client.kv.put_blocks(SCOPE, [KvBlock(1, torch.zeros(BIG // 4)), KvBlock(1, second)])
    assert client.kv.lookup_prefix(SCOPE, [1]).stored_chunks == 0


def test_a_block_over_the_kv_limit_is_refused_on_every_path(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(kv={"max_block_bytes": 128 << 10})
    with Client(daemon.address, timeout_s=30) as c:
        # The fast paths answer RESOURCE_EXHAUSTED too; the client takes it as 'try
        # the next path' and the gRPC path gives the daemon's answer.
        for path in (None, "grpc"):
            with pytest.raises(CapacityError, match="max_block_bytes"):
                c.kv.put_blocks(SCOPE, [KvBlock(3, torch.zeros(BIG // 4))], path=path)
        # A forced fast path has no next path: the daemon's refusal is raised there
        # (see the test below).
        for path in ("bulk", "shm"):
            with pytest.raises(CapacityError, match="max_block_bytes"):
                c.kv.put_blocks(SCOPE, [KvBlock(3, torch.zeros(BIG // 4))], path=path)
        assert c.kv.lookup_prefix(SCOPE, [3]).stored_chunks == 0
        c.kv.put_blocks(SCOPE, [KvBlock(4, torch.zeros(1 << 14))])  # under it: stored
        assert c.kv.lookup_prefix(SCOPE, [4]).stored_chunks == 1


@pytest.mark.parametrize("path", ["bulk", "shm"])
def test_a_forced_fast_path_reports_the_daemons_size_cap(
    make_daemon: Callable[..., Daemon], path: str
) -> None:
    """The daemon's RESOURCE_EXHAUSTED and message, not the client's 'could not
    serve'; nothing is stored."""
    daemon = make_daemon(kv={"max_block_bytes": 128 << 10})
    with Client(daemon.address, timeout_s=30) as c:
        with pytest.raises(CapacityError) as refused:
            c.kv.put_blocks(SCOPE, [KvBlock(3, torch.zeros(BIG // 4))], path=path)
        said = refused.value.message
        assert "is 262144 bytes; the limit is 131072 (kv.max_block_bytes)" in said, said
        assert c.kv.lookup_prefix(SCOPE, [3]).stored_chunks == 0
