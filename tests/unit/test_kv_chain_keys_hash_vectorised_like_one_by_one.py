"""Canonical KV block keys are hashed from (prefix, 64-bit chunk) so a chain's
index probe is vectorised; the one-key paths (find, insert, records) agree with
it, and every other key keeps xxh3-128."""

from binascii import hexlify

import numpy as np
import xxhash

from tiermem.server.catalog import index as index_module
from tiermem.server.catalog.index import (
    KEY_HASH_CACHE,
    ObjectIndex,
    key_digest,
    key_hash,
    kv_chain_halves,
    kv_chunk_split,
)
from tiermem.server.model import Kind, ObjectKey
from tiermem.server.services.kv import KvScope, PackedHashes

SCOPE = KvScope("ns", "model-a", dtype="bfloat16", salt="tenant")
CHAIN = [(i * 0x9E3779B97F4A7C15) % (1 << 64) for i in range(500)]
HASHES = [h.to_bytes(8, "big") for h in CHAIN]


def xxh3_halves(key: bytes) -> tuple[int, int]:
    h = xxhash.xxh3_128_intdigest(key)
    return h >> 64, h & ((1 << 64) - 1)


def test_vectorised_halves_equal_the_one_key_hash_of_each_block_key() -> None:
    keys = SCOPE.encoded_keys(HASHES)
    hi, lo = kv_chain_halves(keys.base, np.array(CHAIN, dtype=np.uint64))
    assert [key_hash(k) for k in keys] == list(zip(hi.tolist(), lo.tolist(), strict=True))
    assert [key_digest(k) for k in keys] == [
        ((a << 64) | b).to_bytes(16, "big") for a, b in zip(hi.tolist(), lo.tolist(), strict=True)
    ]
    assert len(set(hi.tolist())) == len(CHAIN)  # a bijection within one scope


def test_only_canonical_kv_keys_take_the_chunk_hash_path() -> None:
    kv = ObjectKey("ns", Kind.KV_BLOCK, "m@1@0@bf16@-@" + "0123456789abcdef").encode()
    assert kv_chunk_split(kv) == (kv[:-16], 0x0123456789ABCDEF)
    bare = ObjectKey("ns", Kind.KV_BLOCK, "@" + "0123456789abcdef").encode()
    assert kv_chunk_split(bare) == (bare[:-16], 0x0123456789ABCDEF)  # the rule is the form
    not_canonical = [
        ObjectKey("ns", Kind.BLOB, "m@1@0@bf16@-@" + "0123456789abcdef").encode(),
        ObjectKey("ns", Kind.KV_BLOCK, "m@1@0@bf16@-@" + "0123456789ABCDEF").encode(),
        ObjectKey("ns", Kind.KV_BLOCK, "m@1@0@bf16@-@" + "0123456789abcde").encode(),
        ObjectKey("ns", Kind.KV_BLOCK, "m@1@0@bf16@-@" + "0123456789abcdef00").encode(),
        ObjectKey("ns", Kind.KV_BLOCK, "m@1@0@bf16@-@" + "0123456789abcde_").encode(),
        b"@0123456789abcdef",
        b"plain key",
        b"",
    ]
    for key in not_canonical[:-3]:
        assert kv_chunk_split(key) is None, key
        assert key_hash(key) == xxh3_halves(key)
    for key in not_canonical[-3:]:
        assert kv_chunk_split(key) is None
        assert key_hash(key) == xxh3_halves(key)
        assert key_digest(key) == xxhash.xxh3_128_digest(key)


def test_chain_probe_agrees_with_find_for_packed_and_listed_hashes() -> None:
    idx = ObjectIndex(initial_rows=16)
    keys = list(SCOPE.encoded_keys(HASHES))
    for k in keys[::2]:
        idx.insert(k)
    idx.remove(keys[10])
    other_scope = KvScope("ns", "model-b", dtype="bfloat16").encoded_keys(HASHES)
    idx.insert(other_scope[1])  # same chunk, other scope: must not be found for SCOPE
    expected = [-1 if (row := idx.find(k)) is None else row for k in keys]
    assert expected[1] == -1 and expected[0] >= 0
    packed = SCOPE.encoded_keys(PackedHashes(b"".join(HASHES), 8))
    listed = SCOPE.encoded_keys(HASHES)
    for chain_keys in (packed, listed):
        chunks = chain_keys.chunks()
        assert chunks is not None
        assert idx.find_kv_chain(chain_keys.base, chunks, chain_keys).tolist() == expected
        assert idx.find_many(chain_keys).tolist() == expected
    assert list(packed) == [k for k in keys] == [packed[i] for i in range(len(packed))]
    assert packed[2:4] == keys[2:4]


def test_chains_of_other_widths_fall_back_to_hashing_each_key() -> None:
    wide = SCOPE.encoded_keys([b"\x01" * 16, b"\x02" * 16])
    assert wide.chunks() is None
    assert wide[0].endswith(hexlify(b"\x01" * 16))
    assert SCOPE.encoded_keys([b"\x01" * 8, b"\x02" * 7]).chunks() is None
    assert SCOPE.encoded_keys(PackedHashes(b"\x00" * 32, 16)).chunks() is None


def test_key_hashes_are_remembered_for_recent_keys_within_a_bound() -> None:
    # a request hashes its key several times (find, insert, record, touch):
    # the repeats are answered from memory, and memory holds a bounded number
    key_hash.cache_clear()
    key = SCOPE.encoded_keys(HASHES[:1])[0]
    first = key_hash(key)
    assert key_hash(bytes(bytearray(key))) == first  # an equal key, another object
    assert key_hash.cache_info().hits == 1
    assert first == index_module._key_hash(key)
    many = [ObjectKey("ns", Kind.BLOB, f"k{i}").encode() for i in range(KEY_HASH_CACHE + 100)]
    assert [key_hash(k) for k in many] == [xxh3_halves(k) for k in many]
    assert key_hash.cache_info().currsize == KEY_HASH_CACHE
    assert key_hash(key) == first  # evicted by now, hashed again the same way
