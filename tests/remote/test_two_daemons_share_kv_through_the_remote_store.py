"""Two daemons configured with the same remote tier (same deployment) share KV:
a chain written through daemon A is found by LookupPrefix on daemon B and read
back byte-exact there (B adopts the blocks into its own tiers). Remote names
are namespaced: another deployment, another namespace or another tenant salt on
the same cluster sees nothing."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import torch

from tests.remote.conftest import Peer, remote_config, sample
from tests.remote.peers import RedisCluster
from tests.remote.test_blocks_another_daemon_wrote_are_read_through_the_data_plane import (
    adopted_soon,
)
from tiermem.client import Client, Kind, KvBlock, KvScope, Tier
from tiermem.client.fastpath import ObjectRef
from tiermem.server.app import Daemon

SCOPE = KvScope("shared-model", dtype="float16", salt="tenant-1")


def chain(n: int, seed: int) -> list[KvBlock]:
    gen = torch.Generator().manual_seed(seed)
    return [
        KvBlock(
            seed * 1_000_003 + i, torch.randn(2, 8, 64, generator=gen, dtype=torch.float32).half()
        )
        for i in range(n)
    ]


def test_a_chain_written_through_a_is_found_and_read_byte_exact_on_b(
    peer: Peer, make_remote_daemon: Callable[..., Daemon]
) -> None:
    remote = remote_config(peer)
    a = make_remote_daemon("a", remote)
    b = make_remote_daemon("b", remote)
    blocks = chain(24, seed=1)
    hashes = [blk.chunk_hash for blk in blocks]
    with Client(a.address) as ca, Client(b.address) as cb:
        ca.kv.put_blocks(SCOPE, blocks)
        a.maintain()  # waits for the write-behind publish
        assert sample(a, "tiermem_remote_published_objects_total", result="stored") == 24
        hit = cb.kv.lookup_prefix(SCOPE, [*hashes, 12345])
        assert hit.stored_chunks == 24 and hit.tiers == [Tier.REMOTE] * 24
        got = cb.kv.get_tensors(SCOPE, hashes)
        for blk, tensor in zip(blocks, got, strict=True):
            assert tensor.dtype == torch.float16 and tensor.shape == blk.data.shape
            assert tensor.view(torch.int16).equal(blk.data.view(torch.int16))
        # B adopted what it read (right after its reply, while the client
        # copied): now local, still byte-exact, no remote round trip
        assert adopted_soon(b, 24) == 24
        assert cb.kv.lookup_prefix(SCOPE, hashes).tiers == [Tier.DRAM] * 24
        gets = sample(b, "tiermem_remote_operations_total", op="get", result="ok")
        again = cb.kv.get_tensors(SCOPE, hashes)
        assert all(x.equal(y) for x, y in zip(again, got, strict=True))
        assert sample(b, "tiermem_remote_operations_total", op="get", result="ok") == gets
        # a chain B extends is found by A the same way
        more = chain(4, seed=2)
        cb.kv.put_blocks(SCOPE, more)
        b.maintain()
        tail = [blk.chunk_hash for blk in more]
        assert ca.kv.lookup_prefix(SCOPE, [*hashes, *tail]).stored_chunks == 28
        assert ca.kv.get_tensors(SCOPE, tail)[3].equal(more[3].data)


def test_other_deployments_namespaces_and_salts_never_see_the_values(
    peer: Peer, make_remote_daemon: Callable[..., Daemon]
) -> None:
    deployment = f"t-{uuid.uuid4().hex[:12]}"
    a = make_remote_daemon("a", remote_config(peer, deployment), namespaces=["default", "other"])
    elsewhere = make_remote_daemon("c", remote_config(peer))  # another deployment
    same = make_remote_daemon("b", remote_config(peer, deployment), namespaces=["default", "other"])
    blocks = chain(6, seed=3)
    hashes = [blk.chunk_hash for blk in blocks]
    with Client(a.address) as ca, Client(elsewhere.address) as cc, Client(same.address) as cb:
        ca.kv.put_blocks(SCOPE, blocks)
        a.maintain()
        assert cb.kv.lookup_prefix(SCOPE, hashes).stored_chunks == 6
        assert cc.kv.lookup_prefix(SCOPE, hashes).stored_chunks == 0
        other_salt = KvScope(SCOPE.model, dtype=SCOPE.dtype, salt="tenant-2")
        assert cb.kv.lookup_prefix(other_salt, hashes).stored_chunks == 0
        other_ns = KvScope(SCOPE.model, dtype=SCOPE.dtype, salt=SCOPE.salt, namespace="other")
        assert cb.kv.lookup_prefix(other_ns, hashes).stored_chunks == 0
        assert not any(blk.found for blk in cc.kv.get_blocks(SCOPE, hashes))
    if isinstance(peer, RedisCluster):
        # the names in the store: deployment/namespace/kind/key
        import redis

        cluster = redis.RedisCluster(host="127.0.0.1", port=peer.ports[0])
        try:
            names = sorted(
                n.decode() for n in cluster.scan_iter(match=f"{deployment}/*", target_nodes="all")
            )
        finally:
            cluster.close()
        assert len(names) == 6
        assert all(n.startswith(f"{deployment}/default/") for n in names)


def test_prefetch_on_b_brings_a_chain_from_the_store_into_its_memory(
    peer: Peer, make_remote_daemon: Callable[..., Daemon]
) -> None:
    remote = remote_config(peer)
    a = make_remote_daemon("a", remote)
    b = make_remote_daemon("b", remote)
    blocks = chain(8, seed=4)
    hashes = [blk.chunk_hash for blk in blocks]
    with Client(a.address) as ca, Client(b.address) as cb:
        ca.kv.put_blocks(SCOPE, blocks)
        a.maintain()
        report = cb.kv.prefetch(SCOPE, [*hashes, 999])
        assert (report.promoted, report.resident, report.missing) == (8, 0, 1)
        assert cb.kv.lookup_prefix(SCOPE, hashes).tiers == [Tier.DRAM] * 8
        # now an ordinary local object: the shared-memory data plane serves it
        key = f"{SCOPE.model}@1@0@{SCOPE.dtype}@{_salt_tag(SCOPE.salt)}@{hashes[0]:016x}"
        (fetched,) = cb.dataplane.get_many([ObjectRef(Kind.KV_BLOCK, key)])
        assert bytes(fetched.data) == blocks[0].data.numpy().tobytes()


def _salt_tag(salt: str) -> str:
    import hashlib

    return hashlib.blake2b(salt.encode(), digest_size=8).hexdigest()
