"""Blobs round-trip byte-exact: a 1 GiB blob streamed up and down over gRPC,
and blobs over the shared-memory and bulk fast paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.blobs.helpers import MiB, pattern, sha256_file, write_big_file
from tiermem.client import Client
from tiermem.client.errors import TiermemClientError
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


def test_cold_blobs_are_staged_in_shared_memory_for_local_clients(client: Client) -> None:
    data = pattern(5 * MiB + 9, seed=5)
    client.blobs.put("cold.bin", data)
    assert client.blobs.get("cold.bin", path="shm") == data  # read straight into the arena
    assert not client.blobs.stat("cold.bin").cached
    buf = bytearray(len(data))
    assert client.blobs.get_into("cold.bin", buf, path="shm")[0] == len(data) and buf == data
    assert client.path_stats()["shm"]["gets"] == 2
    # a range that does not start at 0 is not staged: the client falls back
    assert client.blobs.get("cold.bin", offset=MiB + 1, length=10) == data[MiB + 1 : MiB + 11]


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


def test_get_into_fills_a_callers_buffer_on_every_path(client: Client) -> None:
    data = pattern(10 * MiB + 3, seed=3)
    client.blobs.put("into.bin", data)
    for path in ("bulk", "grpc", None):
        buf = bytearray(len(data) + 5)
        n, info = client.blobs.get_into("into.bin", buf, path=path)
        assert (n, info.size_bytes) == (len(data), len(data))
        assert buf[:n] == data and buf[n:] == b"\0" * 5
        view = memoryview(bytearray(MiB))
        n, _ = client.blobs.get_into("into.bin", view, offset=MiB + 1, length=MiB, path=path)
        assert n == MiB and view == data[MiB + 1 : 2 * MiB + 1]
    with pytest.raises(TiermemClientError) as err:
        client.blobs.get_into("into.bin", bytearray(MiB))
    assert err.value.code == "INVALID_ARGUMENT" and "destination buffer" in err.value.message
