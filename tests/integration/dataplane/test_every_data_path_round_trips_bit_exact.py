"""Tensors of every KV dtype round-trip bit-exact through each data path, and
the client says which path carried them."""

from __future__ import annotations

import pytest
import torch

from tests.integration.dataplane.helpers import wait_for
from tiermem.client import Client, Kind
from tiermem.client.fastpath import ObjectRef, PutItem
from tiermem.server.app import Daemon

MiB = 1 << 20


def kv_tensor(dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(2, 8, 64, 64, generator=g).to(dtype)  # 256 KiB in float32
    t.view(-1)[:4] = torch.tensor([float("inf"), float("-inf"), float("nan"), -0.0]).to(dtype)
    return t


@pytest.mark.parametrize("path", ["shm", "bulk", "grpc"])
def test_float32_float16_bfloat16_round_trip_bit_exact(client: Client, path: str) -> None:
    for i, dtype in enumerate((torch.float32, torch.float16, torch.bfloat16)):
        t = kv_tensor(dtype, i)
        raw = t.view(-1).view(torch.uint8).numpy()
        name = f"{path}-{dtype}"
        item = PutItem(Kind.KV_BLOCK, name, raw, dtype=str(dtype)[6:], shape=tuple(t.shape))
        info = client.dataplane.put_many([item], path=path)[0]
        assert (info.dtype, info.shape) == (str(dtype)[6:], tuple(t.shape))
        fetched = client.dataplane.get_many([ObjectRef(Kind.KV_BLOCK, name)], path=path)[0]
        assert fetched.path == path
        back = torch.frombuffer(bytearray(fetched.data), dtype=dtype).reshape(fetched.info.shape)
        assert torch.equal(back.view(torch.uint8), t.view(torch.uint8))
        # and through the plain API, which picks a path by itself
        assert torch.equal(
            client.get_tensor(Kind.KV_BLOCK, name).view(torch.uint8), t.view(torch.uint8)
        )
    stats = client.path_stats()[path]
    assert stats["puts"] >= 3 and stats["gets"] >= 3


def test_the_client_picks_shared_memory_then_bulk_then_grpc(daemon: Daemon) -> None:
    small = bytes(range(256)) * 1024  # 256 KiB: one round trip (bulk) beats two (shm)
    large = bytes(range(256)) * (16 * 1024)  # 4 MiB: shared memory
    for data, allowed, shm_min, expected in (
        (large, ("shm", "bulk", "grpc"), 2 * MiB, "shm"),
        (small, ("shm", "bulk", "grpc"), 2 * MiB, "bulk"),
        (small, ("shm", "bulk", "grpc"), 0, "shm"),
        (small, ("shm", "grpc"), 2 * MiB, "shm"),
        (small, ("bulk", "grpc"), 2 * MiB, "bulk"),
        (small, ("grpc",), 2 * MiB, "grpc"),
    ):
        with Client(daemon.address, fast_paths=allowed, fast_shm_min_bytes=shm_min) as c:
            assert c.dataplane.paths()[0] == allowed[0]
            key = f"pick-{expected}-{len(data)}-{shm_min}-{len(allowed)}"
            c.put(Kind.BLOB, key, data)
            # a get learns the sizes from the buffers it is given
            out = bytearray(len(data))
            got = c.dataplane.get_many([ObjectRef(Kind.BLOB, key)], out=[out])
            assert bytes(got[0].data) == data and got[0].path == expected
            stats = c.path_stats()
            assert stats[expected]["puts"] == 1 and stats[expected]["gets"] == 1
            assert stats[expected]["put_bytes"] == len(data)


def test_small_values_ride_the_bulk_session_and_come_back_inline(client: Client) -> None:
    client.put(Kind.SCRATCH, "tiny", b"note")
    assert client.get(Kind.SCRATCH, "tiny") == b"note"
    stats = client.path_stats()
    assert stats["bulk"]["puts"] == 1 and stats["bulk"]["gets"] == 1
    assert stats["shm"]["puts"] == 0 and stats["shm"]["gets"] == 0
    assert stats["grpc"]["puts"] == 0 and stats["grpc"]["gets"] == 0


def test_small_values_use_grpc_when_the_fast_paths_are_off(daemon: Daemon) -> None:
    with Client(daemon.address, fast_paths=("grpc",)) as c:
        c.put(Kind.SCRATCH, "tiny", b"note")
        assert c.get(Kind.SCRATCH, "tiny") == b"note"
        assert c.stat(Kind.SCRATCH, "tiny").size_bytes == 4
        stats = c.path_stats()
        assert stats["grpc"]["puts"] == 1 and stats["grpc"]["gets"] == 1
        assert stats["bulk"]["puts"] == 0 and stats["bulk"]["gets"] == 0


def test_batches_keep_their_order_and_get_into_caller_buffers(client: Client) -> None:
    blocks = [bytes([i]) * (128 << 10) for i in range(8)]
    items = [PutItem(Kind.KV_BLOCK, f"batch-{i}", b) for i, b in enumerate(blocks)]
    for path in ("shm", "bulk"):
        infos = client.dataplane.put_many(items, path=path)
        assert [i.key for i in infos] == [f"batch-{i}" for i in range(8)]
        outs = [bytearray(128 << 10) for _ in blocks]
        refs = [ObjectRef(Kind.KV_BLOCK, f"batch-{i}") for i in reversed(range(8))]
        fetched = client.dataplane.get_many(refs, out=outs, path=path)
        assert [bytes(f.data) for f in fetched] == blocks[::-1]
        assert [bytes(o) for o in outs] == blocks[::-1]


def test_ssd_resident_objects_are_served_through_a_staging_copy(
    client: Client, daemon: Daemon
) -> None:
    from tiermem.client import AccessHint, Profile

    data = bytes(range(251)) * 4099  # ~1 MiB, not arena-aligned
    client.put(Kind.BLOB, "cold", data, profile=Profile(hint=AccessHint.COLD))
    assert client.stat(Kind.BLOB, "cold").tier.name == "SSD"
    fetched = client.dataplane.get_many([ObjectRef(Kind.BLOB, "cold")], path="shm")[0]
    assert bytes(fetched.data) == data and fetched.path == "shm"
    plane = daemon.dataplane
    assert plane is not None
    wait_for(lambda: len(plane.leases) == 0, "the read lease's release")  # sent without waiting


def test_shm_puts_honour_admission_and_durability(client: Client) -> None:
    from tiermem.client import AccessHint, Durability, Profile

    data = b"\x5a" * (1 << 20)
    cold = PutItem(Kind.BLOB, "cold-shm", data, profile=Profile(hint=AccessHint.COLD))
    durable = PutItem(
        Kind.KV_BLOCK, "durable-shm", data, profile=Profile(durability=Durability.DURABLE)
    )
    a, b = client.dataplane.put_many([cold, durable], path="shm")
    assert a.tier.name == "SSD" and a.persisted
    assert b.tier.name == "DRAM" and b.persisted
    assert client.get(Kind.BLOB, "cold-shm") == data
    assert client.get(Kind.KV_BLOCK, "durable-shm") == data
