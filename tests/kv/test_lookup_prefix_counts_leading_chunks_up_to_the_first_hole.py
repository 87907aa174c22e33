"""LookupPrefix: leading stored chunks of a chain and their tiers; Prefetch."""

import torch

from tiermem.client import Client, KvBlock, KvScope, Profile, Tier
from tiermem.server.app import Daemon

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
    assert client.kv.lookup_prefix(SCOPE, [1, 2, 3, 4]).tiers == [Tier.DRAM] * 4
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
