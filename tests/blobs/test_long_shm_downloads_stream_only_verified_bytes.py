"""A long download by a client on the daemon's host is streamed through shared
memory: the daemon leases an extent, reads and verifies the range into it with
several threads, and reports the verified prefix while the client copies it.
Any range comes back exact; a block damaged on disk in the middle of the range
fails the download with DATA_LOSS, nothing is returned as success and no
partial file is left; the extent is freed either way."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.blobs.helpers import MiB, pattern
from tiermem.client import Client
from tiermem.client.errors import TiermemClientError
from tiermem.server.app import Daemon

KiB = 1024
SIZE = MiB + 777  # 17 read units of 64 KiB
SMALL_UNITS = {
    "blobs": {
        "block_bytes": 16 * KiB,
        "read_unit_bytes": 64 * KiB,
        "read_threads": 3,
        "cache_enabled": False,  # every read is a cold one
        "local_file_reads": False,  # else a local client reads the payload file itself
    }
}


@pytest.fixture
def streaming(make_daemon: Callable[..., Daemon]) -> Iterator[tuple[Daemon, Client, list[int]]]:
    daemon = make_daemon(**SMALL_UNITS)
    fills: list[int] = []
    fill = daemon.blobs._fill

    def counted(*args: Any) -> Iterator[int]:
        fills.append(1)
        return fill(*args)

    daemon.blobs._fill = counted  # type: ignore[method-assign]
    with Client(daemon.address, timeout_s=30) as client:
        yield daemon, client, fills


def extents_freed(daemon: Daemon) -> bool:
    """True once every lease has been released and the staging bytes given back."""
    dataplane = daemon.dataplane
    assert dataplane is not None
    deadline = time.monotonic() + 10  # releases go without waiting for their answer
    while time.monotonic() < deadline:
        if len(dataplane.leases) == 0 and dataplane.budget.used_bytes == 0:
            return True
        time.sleep(0.02)
    return False


@pytest.mark.parametrize("path", [None, "shm"])
def test_long_ranges_stream_through_shared_memory_exactly(
    streaming: tuple[Daemon, Client, list[int]], path: str | None
) -> None:
    daemon, client, fills = streaming
    data = pattern(SIZE, seed=21)
    client.blobs.put("scan.tif", data)
    ranges = ((0, 0), (100_000, 500_000), (SIZE - 200_000, 0), (16 * KiB, 256 * KiB))
    for offset, length in ranges:
        want = data[offset : offset + length] if length else data[offset:]
        assert client.blobs.get("scan.tif", offset=offset, length=length, path=path) == want
    buf = bytearray(SIZE)
    assert client.blobs.get_into("scan.tif", buf, path=path)[0] == SIZE
    assert buf == data
    assert len(fills) == len(ranges) + 1  # each one streamed
    stats = client.path_stats()
    assert stats["shm"]["gets"] == len(ranges) + 1 and stats["grpc"]["gets"] == 0
    assert extents_freed(daemon)


def test_a_block_damaged_mid_range_fails_the_download_and_keeps_nothing(
    streaming: tuple[Daemon, Client, list[int]], tmp_path: Path
) -> None:
    daemon, client, fills = streaming
    data = pattern(SIZE, seed=22)
    info = client.blobs.put("scan.tif", data)
    payload = daemon.blobs.payload_path(info.sha256)
    assert payload is not None
    with payload.open("r+b") as f:  # one flipped bit in the 40th 16 KiB block, unit 10 of 17
        f.seek(40 * 16 * KiB + 5)
        byte = f.read(1)
        f.seek(40 * 16 * KiB + 5)
        f.write(bytes([byte[0] ^ 0x10]))
    with pytest.raises(TiermemClientError) as err:
        client.blobs.get_into("scan.tif", bytearray(SIZE))
    assert err.value.code == "DATA_LOSS"
    assert "scan.tif" in err.value.message and "damaged" in err.value.message
    assert fills == [1]  # it was the streamed path that found it
    out = tmp_path / "scan.tif"
    with pytest.raises(TiermemClientError) as err:
        client.blobs.get("scan.tif", out)
    assert err.value.code == "DATA_LOSS"
    assert not out.exists() and not out.with_name("scan.tif.part").exists()
    assert extents_freed(daemon)
    client.blobs.put("again.tif", data)  # the same bytes repair the content
    assert client.blobs.get("scan.tif") == data
