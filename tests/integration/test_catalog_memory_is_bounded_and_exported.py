"""RocksDB's memory (memtables and block cache) is bounded and exported as
``tiermem_catalog_memory_bytes{part}``, so a soak can tell cache warm-up from a leak."""

from __future__ import annotations

import os

from tiermem.client import Client, Kind
from tiermem.server.app import Daemon
from tiermem.server.storage.rocks import BLOCK_CACHE_BYTES, MEMTABLES_TOTAL_BYTES


def test_catalog_memory_is_bounded_and_exported(daemon: Daemon) -> None:
    with Client(daemon.address) as c:
        for i in range(300):
            c.put(Kind.SCRATCH, f"s{i}", os.urandom(2000))
        for i in range(300):
            c.get(Kind.SCRATCH, f"s{i}")
    registry = daemon.metrics.registry
    memtables = registry.get_sample_value("tiermem_catalog_memory_bytes", {"part": "memtables"})
    cache = registry.get_sample_value("tiermem_catalog_memory_bytes", {"part": "block_cache"})
    assert memtables is not None and 300 * 2000 <= memtables <= MEMTABLES_TOTAL_BYTES * 1.1
    assert cache is not None and 0 <= cache <= BLOCK_CACHE_BYTES
