"""The HBM engine's fixed-size KV block pool (emulated on the CPU here; the
``gpu``-marked tests run the same on CUDA with pinned staging)."""

from collections.abc import Callable

import pytest
import torch

from tiermem.client import Client, KvBlock, KvScope, Profile, Tier
from tiermem.server.app import Daemon
from tiermem.server.errors import InvariantViolation
from tiermem.server.tiers.blockpool import BlockPool
from tiermem.server.tiers.hbm import HbmEngine

KiB = 1024
MiB = 1 << 20
gpu = pytest.mark.gpu


def test_pool_hands_out_every_slot_once_and_takes_them_back() -> None:
    pool = BlockPool(base=8192, slot_bytes=4096, slots=4)
    got = [pool.allocate() for _ in range(4)]
    assert got == [8192, 12288, 16384, 20480] and pool.allocate() is None
    assert pool.allocated_bytes == 4 * 4096
    pool.free(12288)
    assert pool.allocate() == 12288
    with pytest.raises(InvariantViolation):
        pool.free(12289)
    pool.free(8192)
    with pytest.raises(InvariantViolation):
        pool.free(8192)


def test_engine_routes_slot_sized_values_to_the_pool_and_others_to_extents() -> None:
    engine = HbmEngine(4 * MiB, "cpu", kv_block_bytes=256 * KiB, kv_pool_fraction=0.5)
    assert engine.pool.slots == 8 and engine.capacity_bytes == 4 * MiB
    full = engine.reserve(256 * KiB)
    partial = engine.reserve(200 * KiB)
    small = engine.reserve(10 * KiB)
    assert full is not None and partial is not None and small is not None
    assert engine.pool.owns(full.location) and engine.pool.owns(partial.location)
    assert not engine.pool.owns(small.location)
    data = bytes(range(256)) * 1024
    full.buffer[:] = data
    loc = engine.commit(full)
    assert bytes(engine.read(loc, len(data))) == data
    assert engine.used_bytes == 2 * 256 * KiB + 12 * KiB
    engine.free(loc, len(data))
    engine.abort(partial)
    engine.abort(small)
    assert engine.used_bytes == 0


def test_engine_falls_back_to_extents_when_slots_run_out() -> None:
    engine = HbmEngine(2 * MiB, "cpu", kv_block_bytes=512 * KiB, kv_pool_fraction=0.5)
    in_pool = [engine.reserve(512 * KiB) for _ in range(engine.pool.slots)]
    assert all(r is not None and engine.pool.owns(r.location) for r in in_pool)
    extra = engine.reserve(512 * KiB)
    assert extra is not None and not engine.pool.owns(extra.location)


def test_kv_blocks_live_in_hbm_slots_and_round_trip(make_daemon: Callable[..., Daemon]) -> None:
    daemon = make_daemon(
        tiers={"hbm": {"enabled": True, "capacity_bytes": 8 * MiB, "kv_block_bytes": 64 * KiB}}
    )
    engine = daemon.store.memory[Tier.HBM]
    assert isinstance(engine, HbmEngine)
    scope = KvScope("hbm-model", dtype="bfloat16")
    blocks = [KvBlock(i, torch.randn(2, 16, 1024).bfloat16()) for i in range(4)]  # 64 KiB each
    with Client(daemon.address) as client:
        stored = client.kv.put_blocks(scope, blocks, profile=Profile(preferred_tier=Tier.HBM))
        assert {s.tier for s in stored} == {Tier.HBM}
        assert engine.pool.allocated_bytes == 4 * 64 * KiB
        got = client.kv.get_tensors(scope, [b.chunk_hash for b in blocks])
        for b, g in zip(blocks, got, strict=True):
            assert torch.equal(g.view(torch.uint8), b.data.view(torch.uint8))
        assert client.kv.delete(model="hbm-model")[0] == 4
        assert engine.pool.allocated_bytes == 0


@gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_pool_stages_through_reused_pinned_buffers() -> None:
    engine = HbmEngine(64 * MiB, "cuda:0", kv_block_bytes=1 * MiB, staging_buffers=2)
    assert not engine.emulated and engine.pinned is not None and engine.pinned.idle == 2
    data = torch.randint(0, 256, (1 * MiB,), dtype=torch.uint8)
    r = engine.reserve(1 * MiB)
    assert r is not None and engine.pinned.idle == 1
    r.buffer[:] = memoryview(data.numpy())
    loc = engine.commit(r)
    assert engine.pinned.idle == 2
    assert engine.tensor(loc, 1 * MiB).device.type == "cuda"
    assert bytes(engine.read(loc, 1 * MiB)) == bytes(data.numpy())
    engine.free(loc, 1 * MiB)
    engine.close()
