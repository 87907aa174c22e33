"""Catalog records of version 1 hashed KV block keys with xxh3-128; version 2
hashes them from (prefix, chunk). A daemon restarted on a version-1 catalog
rehashes those records and finds every block."""

from collections.abc import Callable

import pytest
import torch
import xxhash

from tiermem.client import Client, KvBlock, KvScope, Profile, Tier
from tiermem.server.app import Daemon
from tiermem.server.catalog import index as index_module
from tiermem.server.catalog import records
from tiermem.server.services.kv import KvScope as ServerScope

SCOPE = KvScope("format-model", dtype="float32")
CHAIN = [(i * 0x9E3779B97F4A7C15) % (1 << 64) for i in range(1, 41)]


def xxh3_halves(key: bytes) -> tuple[int, int]:
    h = xxhash.xxh3_128_intdigest(key)
    return h >> 64, h & ((1 << 64) - 1)


def test_version_one_kv_records_are_rehashed_on_recovery(
    make_daemon: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as old_format:
        # the previous format: version-1 records, every key hashed with xxh3-128
        old_format.setattr(records, "VERSION", 1)
        old_format.setattr(records, "key_hash", xxh3_halves)
        old_format.setattr(index_module, "key_hash", xxh3_halves)
        old_format.setattr(index_module, "key_digest", xxhash.xxh3_128_digest)
        old_format.setattr(
            index_module.ObjectIndex,
            "find_kv_chain",
            lambda self, prefix, chunks, keys: self.find_many(keys),
        )
        old = make_daemon("d")
        with Client(old.address) as client:
            client.kv.put_blocks(
                SCOPE,
                [KvBlock(h, torch.full((32,), float(i))) for i, h in enumerate(CHAIN)],
                profile=Profile(preferred_tier=Tier.SSD),
            )
            assert client.kv.lookup_prefix(SCOPE, CHAIN).stored_chunks == len(CHAIN)
        raw = old.store.catalog.rocks.get("objects", catalog_key(CHAIN[0]))
        assert raw is not None and raw[0] == 1
        old.stop(grace_s=0)

    new = make_daemon("d")
    with Client(new.address) as client:
        assert client.kv.lookup_prefix(SCOPE, CHAIN).stored_chunks == len(CHAIN)
        got = client.kv.get_tensors(SCOPE, CHAIN)
        assert [float(t[0]) for t in got] == [float(i) for i in range(len(CHAIN))]
        client.kv.put_blocks(SCOPE, [KvBlock(CHAIN[0], torch.full((32,), -1.0))])
        assert float(client.kv.get_tensors(SCOPE, CHAIN[:1])[0][0]) == -1.0
    raw = new.store.catalog.rocks.get("objects", catalog_key(CHAIN[0]))
    assert raw is not None and raw[0] == records.VERSION == 2  # rewritten in the new format


def catalog_key(chunk: int) -> bytes:
    return ServerScope("default", SCOPE.model, dtype=SCOPE.dtype).encoded_keys(
        [chunk.to_bytes(8, "big")]
    )[0]
