import os

import numpy as np
import pytest
import torch

from tiermem.client import Client, Durability, Kind, Profile, Tier


@pytest.mark.parametrize("kind", list(Kind))
@pytest.mark.parametrize("size", [1, 1000, 20_000, 70_000, 3 << 20])
def test_bytes_round_trip_for_every_kind(client: Client, kind: Kind, size: int) -> None:
    data = os.urandom(size)
    info = client.put(kind, f"obj-{size}", data)
    assert info.size_bytes == size and info.version == 1
    assert client.get(kind, f"obj-{size}") == data
    assert client.stat(kind, f"obj-{size}").checksum == info.checksum


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int64]
)
def test_tensors_round_trip_bit_exact(client: Client, dtype: torch.dtype) -> None:
    t = (torch.randn(3, 5, 7) * 100).to(dtype)
    info = client.put_tensor(Kind.KV_BLOCK, f"t-{dtype}", t)
    assert info.dtype == str(dtype).removeprefix("torch.") and info.shape == (3, 5, 7)
    back = client.get_tensor(Kind.KV_BLOCK, f"t-{dtype}")
    assert back.dtype == dtype and back.shape == t.shape
    assert torch.equal(back.view(torch.uint8), t.contiguous().view(torch.uint8))


def test_numpy_arrays_keep_dtype_and_shape(client: Client) -> None:
    a = np.random.default_rng(0).standard_normal((17, 33)).astype(np.float16)
    client.put_array(Kind.VECTOR, "arr", a)
    b = client.get_array(Kind.VECTOR, "arr")
    assert (
        b.dtype == a.dtype
        and b.shape == a.shape
        and np.array_equal(a.view(np.uint16), b.view(np.uint16))
    )


def test_kinds_and_namespaces_are_separate_keyspaces(client: Client) -> None:
    client.create_namespace("other")
    client.put(Kind.BLOB, "same", b"blob")
    client.put(Kind.SCRATCH, "same", b"scratch")
    client.put(Kind.BLOB, "same", b"other-ns", namespace="other")
    assert client.get(Kind.BLOB, "same") == b"blob"
    assert client.get(Kind.SCRATCH, "same") == b"scratch"
    assert client.get(Kind.BLOB, "same", namespace="other") == b"other-ns"


def test_overwrite_bumps_version_and_replaces_bytes(client: Client) -> None:
    client.put(Kind.SCRATCH, "k", b"one")
    info = client.put(Kind.SCRATCH, "k", b"two-two")
    assert info.version == 2
    assert client.get(Kind.SCRATCH, "k") == b"two-two"


def test_ranges_return_the_requested_slice(client: Client) -> None:
    data = os.urandom(100_000)
    client.put(Kind.BLOB, "r", data)
    assert client.get(Kind.BLOB, "r", offset=10, length=500) == data[10:510]
    assert client.get(Kind.BLOB, "r", offset=99_990) == data[99_990:]


def test_kind_defaults_place_kv_in_dram_as_cache_and_blobs_on_ssd(client: Client) -> None:
    kv = client.put(Kind.KV_BLOCK, "kv", b"x" * 100_000)
    assert kv.tier == Tier.DRAM and kv.profile.durability == Durability.CACHE and not kv.persisted
    blob = client.put(Kind.BLOB, "b", b"y" * 100_000)
    assert blob.tier == Tier.SSD and blob.persisted
    durable_kv = client.put(
        Kind.KV_BLOCK, "kvd", b"z" * 100_000, profile=Profile(durability=Durability.DURABLE)
    )
    assert durable_kv.tier == Tier.DRAM and durable_kv.persisted


def test_list_pages_filters_by_kind_prefix_and_session(client: Client) -> None:
    for i in range(25):
        client.put(Kind.SCRATCH, f"a/{i:02d}", b"x", session="s1" if i % 2 else "")
    client.put(Kind.BLOB, "a/blob", b"x")
    everything = list(client.list(page_size=7))
    assert len(everything) == 26
    scratch = [o.key for o in client.list(kind=Kind.SCRATCH, prefix="a/1", page_size=3)]
    assert scratch == [f"a/{i}" for i in range(10, 20)]
    owned = [o.key for o in client.list(session="s1", page_size=4)]
    assert owned == [f"a/{i:02d}" for i in range(1, 25, 2)]
