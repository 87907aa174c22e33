"""A large blob read again and again is copied into DRAM (the hot cache): its
payload stays on SSD, so the copy is admitted like an extra copy of durable
data, not refused as a cache object not worth an SSD write."""

from __future__ import annotations

from collections.abc import Callable

from tests.blobs.helpers import MiB, pattern
from tiermem.client import Client
from tiermem.server.app import Daemon


def test_a_large_blob_read_often_is_cached(make_daemon: Callable[..., Daemon]) -> None:
    daemon = make_daemon("big-dram", tiers={"dram": {"capacity_bytes": 1024 * MiB}})
    data = pattern(160 * MiB, seed=90)
    with Client(daemon.address, timeout_s=60) as c:
        c.blobs.put("big.bin", data)
        buf = bytearray(len(data))
        for _ in range(6):  # as bench/blob_throughput.py does before its hot reads
            c.blobs.get_into("big.bin", buf)
            if c.blobs.stat("big.bin").cached:
                break
        assert c.blobs.stat("big.bin").cached
        before = c.path_stats()["shm"]["gets"]
        assert c.blobs.get_into("big.bin", buf)[0] == len(data) and buf == data
        assert c.path_stats()["shm"]["gets"] == before + 1  # leased where DRAM holds it
