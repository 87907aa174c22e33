"""A shared-memory read of blocks daemon B does not hold is served straight
from the remote store: B fetches each block into a fresh arena extent (its
payload landing there straight from the store, or copied there with
``tiers.remote.land_reads = false``), verifies it there and leases that
extent, with no catalog work before the reply. When the lease ends
(released, or reaped after its TTL) the extent becomes the adopted object's
storage; over a bulk session that happens as soon as the reply is sent, the
extent pinned until the lease ends. If B stored the key itself meanwhile,
the extent is given back instead and B's own object stays."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.remote.conftest import Peer, remote_config, sample
from tests.remote.test_blocks_another_daemon_wrote_are_read_through_the_data_plane import (
    SCOPE,
    blocks,
    key_of,
)
from tiermem.client import Client, KvBlock
from tiermem.client import Kind as ClientKind
from tiermem.server.app import Daemon
from tiermem.server.dataplane import after_reply
from tiermem.server.dataplane.shm import ReadGrant
from tiermem.server.model import Kind, ObjectKey, Tier

ADOPTED = "tiermem_remote_adopted_objects_total"


def _keys(hashes: list[int]) -> list[ObjectKey]:
    return [ObjectKey("default", Kind.KV_BLOCK, key_of(h)) for h in hashes]


def _arena_bytes(daemon: Daemon, grant: ReadGrant) -> bytes:
    info = daemon.dataplane.shm.info()
    assert info is not None and grant.lease is not None
    with Path(info.path).open("rb") as f:
        f.seek(grant.lease.offset)
        return f.read(grant.lease.length)


def _dram_used(daemon: Daemon) -> int:
    return daemon.store.memory[Tier.DRAM].used_bytes


def _pair(
    peer: Peer, make_remote_daemon: Callable[..., Daemon], land_reads: bool = True
) -> tuple[Daemon, Daemon]:
    config = remote_config(peer)
    b_config = {**config, "land_reads": land_reads}
    return make_remote_daemon("a", config), make_remote_daemon("b", b_config)


def _published_by_a(
    peer: Peer,
    make_remote_daemon: Callable[..., Daemon],
    n: int,
    seed: int,
    land_reads: bool = True,
) -> tuple[Daemon, list[KvBlock], list[ObjectKey]]:
    """Daemon B, and ``n`` blocks daemon A wrote and published (with their keys)."""
    a, b = _pair(peer, make_remote_daemon, land_reads)
    written = blocks(n, seed=seed)
    with Client(a.address) as ca:
        ca.kv.put_blocks(SCOPE, written)
    a.maintain()
    return b, written, _keys([blk.chunk_hash for blk in written])


@pytest.mark.parametrize("land_reads", [True, False], ids=["landed", "copied"])
def test_a_leased_remote_block_is_adopted_when_its_lease_is_released(
    peer: Peer, make_remote_daemon: Callable[..., Daemon], land_reads: bool
) -> None:
    b, written, keys = _published_by_a(peer, make_remote_daemon, 4, 11, land_reads)
    shm = b.dataplane.shm
    grants = shm.lease("worker", keys, ttl_s=30.0, inline_max_bytes=0)
    for grant, blk in zip(grants, written, strict=True):
        assert grant.meta.tier == Tier.REMOTE  # served from the staging extent
        assert _arena_bytes(b, grant) == blk.data.tobytes()
    with b.store.lock:
        assert all(b.store.catalog.find(k.encode()) is None for k in keys)
    assert sample(b, ADOPTED) == 0
    shm.release("worker", [g.lease.lease_id for g in grants if g.lease is not None])
    assert sample(b, ADOPTED) == 4
    # now local, in the very extents that were leased: no remote call to read them
    gets = sample(b, "tiermem_remote_operations_total", op="get", result="ok")
    again = shm.lease("worker", keys, ttl_s=30.0, inline_max_bytes=0)
    assert [g.meta.tier for g in again] == [Tier.DRAM] * 4
    assert [g.lease.offset for g in again if g.lease] == [g.lease.offset for g in grants if g.lease]
    assert [_arena_bytes(b, g) for g in again] == [blk.data.tobytes() for blk in written]
    shm.release("worker", [g.lease.lease_id for g in again if g.lease is not None])
    assert sample(b, "tiermem_remote_operations_total", op="get", result="ok") == gets


def test_a_lease_that_runs_out_adopts_its_block_when_it_is_reaped(
    peer: Peer, make_remote_daemon: Callable[..., Daemon]
) -> None:
    b, written, keys = _published_by_a(peer, make_remote_daemon, 2, seed=12)
    b.dataplane.shm.lease("gone-worker", keys, ttl_s=0.0, inline_max_bytes=0)
    assert b.dataplane.reap_expired() == 2
    assert sample(b, ADOPTED) == 2
    with Client(b.address) as cb:
        got = cb.kv.get_blocks(SCOPE, [blk.chunk_hash for blk in written], path="shm")
    assert [bytes(g.data or b"") for g in got] == [blk.data.tobytes() for blk in written]


def test_a_key_stored_meanwhile_keeps_its_own_value_and_the_extent_is_given_back(
    peer: Peer, make_remote_daemon: Callable[..., Daemon]
) -> None:
    a, b = _pair(peer, make_remote_daemon)
    (blk,) = blocks(1, seed=13)
    (key,) = _keys([blk.chunk_hash])
    ours = KvBlock(blk.chunk_hash, np.full(len(blk.data), 7, dtype=np.uint8))
    with Client(a.address) as ca, Client(b.address) as cb:
        ca.kv.put_blocks(SCOPE, [blk])
        a.maintain()
        before = _dram_used(b)
        (grant,) = b.dataplane.shm.lease("worker", [key], ttl_s=30.0, inline_max_bytes=0)
        assert _arena_bytes(b, grant) == blk.data.tobytes()
        cb.kv.put_blocks(SCOPE, [ours])  # B stores the key itself while the lease runs
        assert grant.lease is not None
        b.dataplane.shm.release("worker", [grant.lease.lease_id])
        assert sample(b, ADOPTED) == 0
        (got,) = cb.kv.get_blocks(SCOPE, [blk.chunk_hash], path="shm")
        assert bytes(got.data or b"") == ours.data.tobytes()
    # B's own block only (its bytes and their arena rounding): no extent leaked
    assert _dram_used(b) == before + b.store.memory[Tier.DRAM].cost_of(len(blk.data))


def test_a_release_adopts_its_blocks_together_except_one_stored_meanwhile(
    peer: Peer, make_remote_daemon: Callable[..., Daemon]
) -> None:
    """The blocks of one Release are adopted in one batch; a key B stored itself
    while the leases ran keeps B's value, its extent is given back, and the
    batch's other blocks are still adopted."""
    a, b = _pair(peer, make_remote_daemon)
    written = blocks(3, seed=14)
    keys = _keys([blk.chunk_hash for blk in written])
    ours = KvBlock(written[1].chunk_hash, np.full(len(written[1].data), 9, dtype=np.uint8))
    with Client(a.address) as ca, Client(b.address) as cb:
        ca.kv.put_blocks(SCOPE, written)
        a.maintain()
        before = _dram_used(b)
        grants = b.dataplane.shm.lease("worker", keys, ttl_s=30.0, inline_max_bytes=0)
        cb.kv.put_blocks(SCOPE, [ours])  # B stores the middle key itself meanwhile
        b.dataplane.shm.release("worker", [g.lease.lease_id for g in grants if g.lease])
        assert sample(b, ADOPTED) == 2
        gets = sample(b, "tiermem_remote_operations_total", op="get", result="ok")
        got = cb.kv.get_blocks(SCOPE, [blk.chunk_hash for blk in written], path="shm")
        assert [bytes(g.data or b"") for g in got] == [
            written[0].data.tobytes(),
            ours.data.tobytes(),
            written[2].data.tobytes(),
        ]
        # the adopted blocks are read locally, from the extents that were leased
        assert sample(b, "tiermem_remote_operations_total", op="get", result="ok") == gets
    # no extent leaked: three blocks and their arena rounding
    assert _dram_used(b) == before + 3 * b.store.memory[Tier.DRAM].cost_of(len(written[0].data))


def test_blocks_adopted_right_after_the_reply_stay_put_until_their_leases_end(
    peer: Peer, make_remote_daemon: Callable[..., Daemon]
) -> None:
    """Over a bulk session a Lease's staged blocks are adopted as soon as the
    reply is sent (``after_reply``), while the client still copies out of
    them. Until each lease ends its extent is pinned: an adopted block
    deleted or moved to SSD meanwhile keeps its bytes until the release, and
    so does an extent whose adoption found the key stored by B itself."""
    b, written, keys = _published_by_a(peer, make_remote_daemon, 3, seed=16)
    shm = b.dataplane.shm
    before = _dram_used(b)
    cost = b.store.memory[Tier.DRAM].cost_of(len(written[0].data))
    ours = KvBlock(written[2].chunk_hash, np.full(len(written[2].data), 5, dtype=np.uint8))
    with after_reply.collecting() as deferred:  # what a bulk session does for a Lease
        grants = shm.lease("worker", keys, ttl_s=30.0, inline_max_bytes=0)
    assert sample(b, ADOPTED) == 0
    with Client(b.address) as cb:
        cb.kv.put_blocks(SCOPE, [ours])  # B stores the third key itself first
        after_reply.run(deferred)  # the session, once the reply is out
        assert sample(b, ADOPTED) == 2
        with b.store.lock:
            entries = [b.store.catalog.find(k.encode()) for k in keys[:2]]
        assert [e.loc for e in entries if e] == [g.lease.offset for g in grants[:2] if g.lease]
        # another reader finds them here while the first leases still run
        gets = sample(b, "tiermem_remote_operations_total", op="get", result="ok")
        again = shm.lease("other", keys[:2], ttl_s=30.0, inline_max_bytes=0)
        assert [g.meta.tier for g in again] == [Tier.DRAM] * 2
        assert sample(b, "tiermem_remote_operations_total", op="get", result="ok") == gets
        shm.release("other", [g.lease.lease_id for g in again if g.lease is not None])
        assert cb.delete(ClientKind.KV_BLOCK, keys[0].key)  # deleted while leased
        assert b.store.catalog.find(keys[0].encode()) is None
        assert b.mover.move(keys[1].encode(), Tier.SSD, force=True)  # moved while leased
        # every leased extent still holds what the lease promised
        assert [_arena_bytes(b, g) for g in grants] == [blk.data.tobytes() for blk in written]
        assert _dram_used(b) == before + 4 * cost  # 3 leased extents + B's own block
        shm.release("worker", [g.lease.lease_id for g in grants if g.lease is not None])
        # the deleted, the moved and the unadopted extents' space came back
        assert _dram_used(b) == before + cost
        assert b.remote is not None and b.remote.flush()  # the delete reached the store
        got = cb.kv.get_blocks(SCOPE, [blk.chunk_hash for blk in written], path="shm")
    assert [g.found for g in got] == [False, True, True]
    assert bytes(got[1].data or b"") == written[1].data.tobytes()
    assert bytes(got[2].data or b"") == ours.data.tobytes()


def test_a_block_whose_adoption_fails_at_its_commit_keeps_its_extent_until_the_lease_ends(
    peer: Peer, make_remote_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key is stored by B itself after the adoption's checks and before its
    commit (one block: ``adopt_filled``, refused by ``if_absent`` under the
    store lock once the extent is committed to the engine). The extent the
    client is still reading stays allocated until its lease ends."""
    b, written, keys = _published_by_a(peer, make_remote_daemon, 1, seed=17)
    remote = b.remote
    assert remote is not None
    shm = b.dataplane.shm
    before = _dram_used(b)
    cost = b.store.memory[Tier.DRAM].cost_of(len(written[0].data))
    ours = KvBlock(written[0].chunk_hash, np.full(len(written[0].data), 3, dtype=np.uint8))
    with after_reply.collecting() as deferred:
        (grant,) = shm.lease("worker", keys, ttl_s=30.0, inline_max_bytes=0)
    prepare = remote.objects.prepare
    stored: list[bool] = []
    with Client(b.address) as cb:

        def prepare_then_store(spec: Any) -> Any:
            profile = prepare(spec)
            if not stored:  # the adoption's check passed; B stores the key now
                stored.append(True)
                cb.kv.put_blocks(SCOPE, [ours])
            return profile

        monkeypatch.setattr(remote.objects, "prepare", prepare_then_store)
        after_reply.run(deferred)
        monkeypatch.undo()
        assert stored and sample(b, ADOPTED) == 0
        assert _arena_bytes(b, grant) == written[0].data.tobytes()
        assert _dram_used(b) == before + 2 * cost  # the leased extent + B's own block
        assert grant.lease is not None
        shm.release("worker", [grant.lease.lease_id])
        assert _dram_used(b) == before + cost
        (got,) = cb.kv.get_blocks(SCOPE, [written[0].chunk_hash], path="shm")
    assert bytes(got.data or b"") == ours.data.tobytes()
