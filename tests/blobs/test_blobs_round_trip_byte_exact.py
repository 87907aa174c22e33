"""Blobs round-trip byte-exact: a 1 GiB blob streamed up and down over gRPC,
and blobs over the shared-memory and bulk fast paths."""

from __future__ import annotations

from pathlib import Path

from tests.blobs.helpers import MiB, pattern, sha256_file, write_big_file
from tiermem.client import Client
from tiermem.server.app import Daemon

GiB = 1 << 30


def test_a_1_gib_blob_streams_up_and_down_byte_exact(client: Client, tmp_path: Path) -> None:
    src = tmp_path / "big.bin"
    digest = write_big_file(src, GiB)
    info = client.blobs.put("big.bin", src, media_type="application/octet-stream", path="grpc")
    assert (info.size_bytes, info.sha256) == (GiB, digest)
    dest = tmp_path / "back.bin"
    back = client.blobs.get("big.bin", dest, path="grpc", verify="sha256")
    assert back.sha256 == digest
    src.unlink()
    assert dest.stat().st_size == GiB
    assert sha256_file(dest) == digest


def test_bulk_channel_carries_blobs_both_ways(client: Client) -> None:
    data = pattern(9 * MiB + 123, seed=1)
    client.blobs.put("bulk.bin", data, path="bulk")
    assert client.path_stats()["bulk"]["put_bytes"] >= len(data)
    assert client.blobs.get("bulk.bin", path="bulk") == data
    assert (
        client.blobs.get("bulk.bin", path="bulk", offset=MiB + 5, length=3 * MiB)
        == data[MiB + 5 : 4 * MiB + 5]
    )
    assert client.path_stats()["bulk"]["gets"] >= 2


def test_hot_blobs_are_read_from_shared_memory(daemon: Daemon) -> None:
    data = pattern(6 * MiB + 7, seed=2)
    with Client(daemon.address) as c:
        c.blobs.put("hot.bin", data)
        for _ in range(4):  # reads make it hot: the daemon copies it into DRAM
            assert c.blobs.get("hot.bin") == data
        assert c.blobs.stat("hot.bin").cached
        before = c.path_stats()["shm"]["gets"]
        assert c.blobs.get("hot.bin", path="shm") == data
        assert c.blobs.get("hot.bin", path="shm", offset=3, length=MiB) == data[3 : MiB + 3]
        assert c.path_stats()["shm"]["gets"] >= before + 2
