"""PutBlocks/GetBlocks keep every bit, dtype, shape and memory format."""

import numpy as np
import pytest
import torch

from tiermem.client import Client, Kind, KvBlock, KvScope, Tier
from tiermem.client.kv import hash_bytes

SCOPE = KvScope("tiny-llama", world_size=2, worker_id=1, dtype="bfloat16")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_blocks_round_trip_bit_exact_per_dtype(client: Client, dtype: torch.dtype) -> None:
    shapes = [(2, 2, 16, 4, 8), (2, 2, 3, 4, 8), (1, 700_000)]  # the last spans chunks
    blocks = [
        KvBlock(1000 + i, (torch.randn(s) * 1e3).to(dtype), memory_format="KV_2LTD")
        for i, s in enumerate(shapes)
    ]
    stored = client.kv.put_blocks(SCOPE, blocks)
    assert [s.codec for s in stored] == ["", "", ""]
    assert all(s.tier == Tier.DRAM for s in stored)
    got = client.kv.get_blocks(SCOPE, [b.chunk_hash for b in blocks])
    for block, back in zip(blocks, got, strict=True):
        assert back.found and back.memory_format == "KV_2LTD"
        t = back.tensor()
        assert t.dtype == dtype and tuple(t.shape) == tuple(block.data.shape)
        assert torch.equal(t.view(torch.uint8), block.data.view(torch.uint8))


def test_blocks_arrive_in_caller_buffers(client: Client) -> None:
    src = [torch.randn(4, 32).bfloat16() for _ in range(3)]
    client.kv.put_blocks(SCOPE, [KvBlock(i, t) for i, t in enumerate(src)])
    out = [torch.empty(4, 32, dtype=torch.bfloat16) for _ in src]
    got = client.kv.get_blocks(SCOPE, [0, 1, 2], out=out)
    for t, o, g in zip(src, out, got, strict=True):
        assert g.tensor() is o and torch.equal(o.view(torch.uint8), t.view(torch.uint8))


def test_numpy_and_raw_bytes_blocks_round_trip(client: Client) -> None:
    a = np.arange(96, dtype=np.float16).reshape(8, 12)
    raw = bytes(range(256)) * 4
    client.kv.put_blocks(
        SCOPE, [KvBlock(b"np", a), KvBlock(b"raw", raw, dtype="uint8", shape=(32, 32))]
    )
    got = client.kv.get_blocks(SCOPE, [b"np", b"raw"])
    assert np.array_equal(got[0].array(), a)
    assert bytes(got[1].data) == raw and got[1].shape == (32, 32)


def test_missing_blocks_come_back_not_found_in_order(client: Client) -> None:
    client.kv.put(SCOPE, 7, torch.ones(8))
    got = client.kv.get_blocks(SCOPE, [6, 7, 8])
    assert [g.found for g in got] == [False, True, False]
    assert [g.chunk_hash for g in got] == [hash_bytes(h) for h in (6, 7, 8)]


def test_salt_model_and_worker_separate_blocks(client: Client) -> None:
    tenant_a = KvScope("m", dtype="float32", salt="tenant-a")
    client.kv.put(tenant_a, 42, torch.ones(4))
    for other in (
        KvScope("m", dtype="float32", salt="tenant-b"),
        KvScope("m", dtype="float32"),
        KvScope("m2", dtype="float32", salt="tenant-a"),
        KvScope("m", world_size=2, worker_id=1, dtype="float32", salt="tenant-a"),
        KvScope("m", dtype="float16", salt="tenant-a"),
    ):
        assert not client.kv.get_blocks(other, [42])[0].found
        assert client.kv.lookup_prefix(other, [42]).stored_chunks == 0
    assert client.kv.get_blocks(tenant_a, [42])[0].found


def test_int_and_bytes_hashes_never_collide(client: Client) -> None:
    hashes = [0, 1, -1, 255, -256, 2**63, -(2**63), 2**200]
    assert len({hash_bytes(h) for h in hashes}) == len(hashes)
    client.kv.put_blocks(
        SCOPE, [KvBlock(h, torch.full((2,), float(i))) for i, h in enumerate(hashes)]
    )
    back = client.kv.get_tensors(SCOPE, hashes)
    assert [float(t[0]) for t in back] == [float(i) for i in range(len(hashes))]


def test_kv_blocks_are_objects_of_kind_kv_block(client: Client) -> None:
    stored = client.kv.put(SCOPE, 5, torch.ones(3, 3), session="req-1")
    info = client.stat(Kind.KV_BLOCK, stored.key)
    assert info.dtype == "float32" and info.shape == (3, 3) and info.session == "req-1"
    assert stored.key.startswith("tiny-llama@2@1@bfloat16@-@")


def test_delete_by_model_session_and_namespace(client: Client) -> None:
    client.create_namespace("other")
    a, b = KvScope("model-a", dtype="float16"), KvScope("model-b", dtype="float16")
    client.kv.put_blocks(a, [KvBlock(i, torch.ones(4)) for i in range(3)], session="s1")
    client.kv.put_blocks(b, [KvBlock(i, torch.ones(4)) for i in range(3)])
    client.kv.put_blocks(b, [KvBlock(9, torch.ones(4))], session="s1")
    client.kv.put(KvScope("model-a", dtype="float16", namespace="other"), 0, torch.ones(4))
    client.put(Kind.BLOB, "model-a@not-kv", b"keep me")

    assert client.kv.delete(session="s1") == (4, 4 * 16)
    assert client.kv.lookup_prefix(b, [0, 1, 2]).stored_chunks == 3
    assert client.kv.delete(model="model-b") == (3, 3 * 16)
    assert client.kv.delete(model="model-b") == (0, 0)
    client.kv.put_blocks(a, [KvBlock(i, torch.ones(4)) for i in range(2)])
    assert client.kv.delete() == (2, 2 * 16)
    assert client.get(Kind.BLOB, "model-a@not-kv") == b"keep me"
    other = KvScope("model-a", dtype="float16", namespace="other")
    assert client.kv.lookup_prefix(other, [0]).stored_chunks == 1
