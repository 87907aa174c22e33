"""LookupPrefix: leading stored chunks of a chain and their tiers; Prefetch."""

import time

import grpc
import pytest
import torch

from tiermem.client import Client, KvBlock, KvScope, Profile, Tier
from tiermem.client.kv import hash_bytes
from tiermem.server.app import Daemon
from tiermem.v1 import kv_pb2, kv_pb2_grpc

SCOPE = KvScope("chain-model", dtype="float16")


def store(client: Client, hashes: list[int], **kw: object) -> None:
    client.kv.put_blocks(SCOPE, [KvBlock(h, torch.full((64,), float(h))) for h in hashes], **kw)  # type: ignore[arg-type]


def test_chain_with_holes_counts_up_to_the_first_hole(client: Client) -> None:
    chain = list(range(100, 120))
    store(client, chain[:7] + chain[8:])
    hit = client.kv.lookup_prefix(SCOPE, chain)
    assert hit.stored_chunks == 7 and hit.tiers == [Tier.DRAM] * 7
    assert client.kv.lookup_prefix(SCOPE, chain[8:]).stored_chunks == 12
    assert client.kv.lookup_prefix(SCOPE, [99, *chain]).stored_chunks == 0
    assert client.kv.lookup_prefix(SCOPE, []).stored_chunks == 0


def test_full_chain_of_a_thousand_chunks(client: Client) -> None:
    chain = [h * 0x9E3779B97F4A7C15 for h in range(1000)]
    store(client, chain)
    assert client.kv.lookup_prefix(SCOPE, chain).stored_chunks == 1000
    assert client.kv.lookup_prefix(SCOPE, [*chain[:500], 1, *chain[500:]]).stored_chunks == 500


def test_tiers_are_reported_and_prefetch_promotes_to_memory(client: Client) -> None:
    store(client, [1, 2])
    store(client, [3, 4], profile=Profile(preferred_tier=Tier.SSD))
    assert client.kv.lookup_prefix(SCOPE, [1, 2, 3, 4]).tiers == [Tier.DRAM] * 2 + [Tier.SSD] * 2
    result = client.kv.prefetch(SCOPE, [1, 2, 3, 4, 5])
    assert (result.promoted, result.resident, result.missing) == (2, 2, 1)
    # the promotions run on the migrator, after the reply: wait for them (bounded)
    deadline = time.monotonic() + 10
    while client.kv.lookup_prefix(SCOPE, [1, 2, 3, 4]).tiers != [Tier.DRAM] * 4:
        assert time.monotonic() < deadline, "prefetched blocks were not promoted"
        time.sleep(0.02)
    got = client.kv.get_tensors(SCOPE, [3, 4])
    assert [float(t[0]) for t in got] == [3.0, 4.0]


def test_lookup_is_answered_from_the_index_without_catalog_reads(
    daemon: Daemon, client: Client
) -> None:
    store(client, [10, 11, 12])
    rocks = daemon.store.catalog.rocks
    calls = 0
    real_get = rocks.get

    def counting_get(cf: str, key: bytes) -> bytes | None:
        nonlocal calls
        calls += 1
        return real_get(cf, key)

    rocks.get = counting_get  # type: ignore[method-assign]
    try:
        assert client.kv.lookup_prefix(SCOPE, [10, 11, 12, 13]).stored_chunks == 3
    finally:
        rocks.get = real_get  # type: ignore[method-assign]
    assert calls == 0


def test_packed_and_listed_chains_give_the_same_answer(client: Client) -> None:
    chain = [7, 2**64 - 1, 0, 12345]
    store(client, chain[:3])
    packed = client.kv.lookup_prefix(SCOPE, chain)  # ints in [0, 2^64): sent packed
    listed = client.kv.lookup_prefix(SCOPE, [hash_bytes(h) for h in chain])  # bytes: listed
    assert packed == listed and packed.stored_chunks == 3
    assert client.kv.lookup_prefix(SCOPE, [-1, *chain]).stored_chunks == 0  # not packable


@pytest.mark.parametrize(
    ("packed", "width", "listed"),
    [(b"\0" * 12, 8, []), (b"\0" * 8, 0, []), (b"\0" * 65, 65, []), (b"\0" * 8, 8, [b"x"])],
)
def test_malformed_packed_chains_are_invalid_arguments(
    client: Client, packed: bytes, width: int, listed: list[bytes]
) -> None:
    stub = kv_pb2_grpc.KvServiceStub(client.transport.channel)
    request = kv_pb2.LookupPrefixRequest(
        scope=kv_pb2.KvScope(namespace="default", model=SCOPE.model, world_size=1, dtype="float16"),
        packed_hashes=packed,
        hash_width=width,
        chunk_hashes=listed,
    )
    with pytest.raises(grpc.RpcError) as info:
        stub.LookupPrefix(request, timeout=30)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
