"""KV blocks of 64 KiB and more go by the client's fastest data path (shared
memory on the daemon's host, else the bulk channel) and come back bit-exact;
small blocks, lossy codecs and batches with missing blocks use the KvService
stream, and the caller's allocator is asked once per block whichever path
carries it."""

from typing import Any

import pytest
import torch

from tiermem.client import Client, KvBlock, KvScope, Precision, Profile
from tiermem.client.kv import FetchedBlock
from tiermem.server.app import Daemon

SCOPE = KvScope("fast-llama", world_size=2, worker_id=0, dtype="bfloat16", salt="t1")
BIG = (4, 64, 256)  # 65,536 elements: 128 KiB in 16-bit, 256 KiB in float32


def moved(client: Client, path: str) -> tuple[int, int]:
    stats = client.path_stats()[path]
    return stats["puts"], stats["gets"]


@pytest.mark.parametrize("path", ["shm", "bulk"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_large_blocks_round_trip_bit_exact_by_each_fast_path(
    daemon: Daemon, path: str, dtype: torch.dtype
) -> None:
    with Client(daemon.address, timeout_s=30, fast_paths=(path, "grpc")) as client:
        assert client.dataplane.paths()[0] == path
        blocks = [KvBlock(i, (torch.randn(BIG) * 1e3).to(dtype), memory_format="KV_2LTD")
                  for i in range(3)]  # fmt: skip
        stored = client.kv.put_blocks(SCOPE, blocks)
        assert moved(client, path) == (3, 0)
        assert [s.chunk_hash for s in stored] == [i.to_bytes(8, "big") for i in range(3)]
        got = client.kv.get_blocks(SCOPE, [0, 1, 2])
        assert moved(client, path) == (3, 3)
        for block, back in zip(blocks, got, strict=True):
            assert back.found and back.memory_format == "KV_2LTD" and back.codec == ""
            t = back.tensor()
            assert t.dtype == dtype and tuple(t.shape) == BIG
            assert torch.equal(t.view(torch.uint8), block.data.view(torch.uint8))
        # the daemon's own KV view agrees: same keys, same scope rules
        assert client.kv.lookup_prefix(SCOPE, [0, 1, 2, 3]).stored_chunks == 3
        stream = client.kv.get_blocks(SCOPE, [1], path="grpc")[0]
        assert bytes(stream.data) == bytes(got[1].data)


def test_small_blocks_use_the_stream_and_missing_blocks_come_back_not_found(
    client: Client,
) -> None:
    client.kv.put_blocks(SCOPE, [KvBlock(10, torch.ones(BIG)), KvBlock(11, torch.ones(8))])
    stats = client.path_stats()
    # the 256 KiB block went by a fast path (bulk: below the shm minimum), the
    # small one by KvService
    assert stats["shm"]["puts"] + stats["bulk"]["puts"] == 1 and stats["grpc"]["puts"] == 0
    got = client.kv.get_blocks(SCOPE, [10, 99, 11])
    assert [g.found for g in got] == [True, False, True]
    assert torch.equal(got[0].tensor(), torch.ones(BIG))
    assert torch.equal(got[2].tensor(), torch.ones(8))


def test_the_allocator_is_asked_once_per_block_even_when_the_stream_takes_over(
    client: Client,
) -> None:
    src = [torch.randn(BIG).bfloat16() for _ in range(2)]
    client.kv.put_blocks(SCOPE, [KvBlock(20 + i, t) for i, t in enumerate(src)])
    asked: list[int] = []

    def allocate(block: FetchedBlock, index: int) -> Any:
        asked.append(index)
        return torch.empty(block.shape, dtype=torch.bfloat16)

    got = client.kv.get_blocks(SCOPE, [20, 21], allocate=allocate)  # fast path
    assert asked == [0, 1]
    assert all(torch.equal(g.tensor(), t) for g, t in zip(got, src, strict=True))
    asked.clear()
    got = client.kv.get_blocks(SCOPE, [20, 77, 21], allocate=allocate)  # a hole: the stream
    assert asked == [0, 2] and [g.found for g in got] == [True, False, True]
    assert torch.equal(got[2].tensor(), src[1])


def test_lossy_blocks_are_encoded_by_the_daemon_and_decoded_on_the_way_back(
    client: Client,
) -> None:
    t = torch.randn(BIG)
    lossy = Profile(precision=Precision.LOSSY_OK)
    stored = client.kv.put_blocks(SCOPE, [KvBlock(30, t)], profile=lossy, codec="int8")[0]
    assert stored.codec == "int8" and client.path_stats()["shm"]["puts"] == 0
    back = client.kv.get_blocks(SCOPE, [30])[0]
    assert back.codec == "int8" and back.tensor().dtype == torch.float32
    assert float((back.tensor() - t).abs().max()) <= stored.max_abs_error + 1e-6


def test_a_bad_scope_is_refused_before_any_byte_moves(client: Client) -> None:
    from tiermem.client import InvalidArgumentError

    bad = KvScope("has@sign", dtype="float32")
    with pytest.raises(InvalidArgumentError, match="must not contain"):
        client.kv.put_blocks(bad, [KvBlock(1, torch.ones(BIG))])
    assert client.path_stats()["shm"]["puts"] == 0


@pytest.mark.parametrize("path", ["shm", "bulk", "grpc"])
def test_blocks_read_without_buffers_are_new_bytearrays_of_their_own(
    daemon: Daemon, path: str
) -> None:
    """Without ``out`` or ``allocate`` each block comes back in a new bytearray
    (made from the leased bytes in one pass on the shared-memory path): exact,
    writable, and not a window on the daemon's copy."""
    with Client(daemon.address, timeout_s=30, fast_paths=(path, "grpc")) as client:
        blocks = [KvBlock(10 + i, torch.randn(BIG) * (i + 1)) for i in range(3)]
        client.kv.put_blocks(SCOPE, blocks)
        got = client.kv.get_blocks(SCOPE, [10, 11, 12])
        assert moved(client, path)[1] == (3 if path != "grpc" else 0)
        for block, back in zip(blocks, got, strict=True):
            assert type(back.data) is bytearray
            assert bytes(back.data) == block.data.numpy().tobytes()
            back.data[:4] = b"\xff\xff\xff\xff"  # ours to change
        again = client.kv.get_blocks(SCOPE, [10, 11, 12])
        for block, back in zip(blocks, again, strict=True):
            assert bytes(back.data) == block.data.numpy().tobytes()
