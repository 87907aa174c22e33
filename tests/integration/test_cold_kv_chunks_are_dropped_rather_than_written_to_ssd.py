"""Through a real daemon: the chunks a one-shot request stores after a prefix
hit, marked COLD by ``KvClient.put_new_chunks``, are not kept (a later read is
a miss, never wrong bytes, and nothing is written to SSD for them), on the
shared-memory path and on the KvService stream alike; session chunks, chunks
of a request with no hit and DURABLE objects are kept byte-exact."""

from collections.abc import Callable

import numpy as np
import pytest

from tiermem.client import AccessHint, Client, Durability, Kind, Profile, Tier
from tiermem.client.kv import KvBlock, KvScope
from tiermem.server.app import Daemon
from tiermem.server.model import AccessHint as Hint
from tiermem.server.model import Kind as ServerKind
from tiermem.server.model import Profile as ServerProfile
from tiermem.server.model import Tier as ServerTier

MiB = 1 << 20
#: 4 MiB chunks: at the COLD prior (0.001 reads/s) even a DRAM copy does not pay
#: for its write within the planner's horizon, so admission keeps none of them
BLOCK_BYTES = 4 * MiB


def blocks(first: int, count: int) -> list[KvBlock]:
    return [
        KvBlock(h, np.full(BLOCK_BYTES, h % 251, dtype=np.uint8))
        for h in range(first, first + count)
    ]


def admission_drops(daemon: Daemon) -> float:
    return sum(
        s.value
        for m in daemon.metrics.placement_admission_drops.collect()
        for s in m.samples
        if s.name.endswith("_total")
    )


def ssd_used(client: Client) -> int:
    return next(t.used_bytes for t in client.stats().tiers if t.tier.name == "SSD")


@pytest.mark.parametrize("path", [None, "grpc"])
def test_one_shot_chunks_after_a_hit_are_dropped_and_the_rest_kept(
    make_daemon: Callable[..., Daemon], path: str | None
) -> None:
    daemon = make_daemon()
    scope = KvScope(model="m")
    with Client(daemon.address, timeout_s=30) as client:
        kv = client.kv
        prefix = blocks(0, 3)
        kv.put_blocks(scope, prefix, path=path)  # the shared prefix: no hint, kept
        hit = kv.lookup_prefix(scope, [b.chunk_hash for b in prefix] + [100]).stored_chunks
        assert hit == 3
        ssd_before = ssd_used(client)
        tail = blocks(100, 4)
        kv.put_new_chunks(scope, tail, prefix_hit_chunks=hit, path=path)
        assert admission_drops(daemon) == len(tail)
        assert ssd_used(client) == ssd_before
        got = kv.get_blocks(scope, [b.chunk_hash for b in prefix + tail])
        for block, fetched in zip(prefix, got[:3], strict=True):
            assert fetched.found and bytes(fetched.data) == block.data.tobytes()
        assert not any(f.found for f in got[3:])  # a miss: the client recomputes

        # kept: a session's new chunks, a request's chunks with no hit at all
        turn = blocks(200, 2)
        kv.put_new_chunks(scope, turn, prefix_hit_chunks=hit, session="chat-1", path=path)
        fresh = blocks(300, 2)
        kv.put_new_chunks(scope, fresh, prefix_hit_chunks=0, path=path)
        got = kv.get_blocks(scope, [b.chunk_hash for b in turn + fresh])
        for block, fetched in zip(turn + fresh, got, strict=True):
            assert fetched.found and bytes(fetched.data) == block.data.tobytes()
        assert admission_drops(daemon) == len(tail)

        # a DURABLE object hinted COLD is never dropped
        data = np.arange(BLOCK_BYTES, dtype=np.uint8).tobytes()
        cold = Profile(hint=AccessHint.COLD, durability=Durability.DURABLE)
        client.put(Kind.BLOB, "cold-durable", data, profile=cold)
        assert client.get(Kind.BLOB, "cold-durable") == data
        # a COLD CACHE object put with a preferred tier is kept there
        kept = Profile(hint=AccessHint.COLD, preferred_tier=Tier.DRAM)
        kv.put_blocks(scope, blocks(500, 1), profile=kept, path=path)
        assert kv.get_blocks(scope, [500])[0].found
        # a CACHE object overwritten by a put admission does not keep is gone
        # (or, where no free memory received the new bytes, on SSD): never stale
        kv.put_blocks(scope, blocks(400, 1), path=path)
        new = np.zeros(BLOCK_BYTES, dtype=np.uint8)
        kv.put_new_chunks(scope, [KvBlock(400, new)], prefix_hit_chunks=1, path=path)
        fetched = kv.get_blocks(scope, [400])[0]
        assert not fetched.found or bytes(fetched.data) == new.tobytes()


def test_only_puts_admission_did_not_want_are_asked_again_after_commit(daemon: Daemon) -> None:
    """A reservation where admission put the object is kept without asking the
    planner a second time at commit; one admission would DROP, or one in a tier
    the caller chose, is asked again (``Reservation.recheck``)."""
    placement, objects = daemon.placement, daemon.objects
    hot = ServerProfile(hint=Hint.HOT).resolved(ServerKind.KV_BLOCK)
    cold = ServerProfile(hint=Hint.COLD).resolved(ServerKind.KV_BLOCK)
    wanted = placement.reserve(256 << 10, hot, ServerKind.KV_BLOCK)
    [batched] = placement.reserve_many([(256 << 10, hot, ServerKind.KV_BLOCK)])
    unwanted = placement.reserve(BLOCK_BYTES, cold, ServerKind.KV_BLOCK)
    chosen = placement.reserve_in(ServerTier.DRAM, 256 << 10, hot)
    try:
        assert (wanted.recheck, batched.recheck) == (False, False)
        assert unwanted.recheck and unwanted.tier == ServerTier.DRAM  # received, then dropped
        assert chosen.recheck
    finally:
        for reservation in (wanted, batched, unwanted, chosen):
            objects.abort(reservation)
