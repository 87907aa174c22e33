"""Tiering: unloading writes a snapshot and frees memory; the next use loads
it (memory-mapped for FLAT/HNSW) and answers exactly as before. Idle and
over-budget collections are unloaded by the maintenance pass; memory is
reported per collection and in Stats as VECTOR bytes."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pytest

from tests.vectors.conftest import clustered
from tiermem.client import Client, Kind, Tier
from tiermem.server.app import Daemon

N, D = 2000, 24


@pytest.mark.parametrize("index", ["flat", "hnsw", "ivf_pq"])
def test_unload_then_reload_gives_identical_results(
    vdaemon: Daemon, vclient: Client, index: str
) -> None:
    x = clustered(N, D, seed=7)
    vclient.vectors.create("c", D, index=index)
    vclient.vectors.upsert("c", np.arange(N), x, payloads=[{"k": i % 5} for i in range(N)])
    vdaemon.vectors.compact("default", "c")
    vclient.vectors.delete("c", np.arange(0, N, 4))  # tombstones go to SSD too
    q = clustered(100, D, seed=8)
    before = vclient.vectors.search("c", q, 10, where={"k": [1, 2]}, nprobe=32)
    loaded = vclient.vectors.describe("c")
    assert loaded.loaded and loaded.memory_bytes > N * D * 4 // 8

    assert vclient.vectors.unload("c")
    cold = vclient.vectors.describe("c")
    assert not cold.loaded and cold.tier == Tier.SSD and cold.memory_bytes == 0
    assert cold.snapshot_bytes > 0 and cold.snapshot_seq == loaded.log_seq
    assert not vclient.vectors.unload("c")  # already on SSD

    after = vclient.vectors.search("c", q, 10, where={"k": [1, 2]}, nprobe=32)  # loads it
    assert np.array_equal(before.ids, after.ids)
    assert np.array_equal(before.distances, after.distances)
    assert vclient.vectors.describe("c").loaded
    # Writes after an mmap load work and are kept.
    vclient.vectors.upsert("c", [N + 1], x[:1] + 0.5)
    assert vclient.vectors.count("c") == N - N // 4 + 1
    assert vclient.vectors.load("c") == 0.0  # already loaded


def test_idle_and_over_budget_collections_are_unloaded(
    make_vdaemon: Callable[..., Daemon],
) -> None:
    daemon = make_vdaemon(vectors={"dram_budget_bytes": 600_000, "idle_unload_s": 3600})
    x = clustered(N, D, seed=9)  # ~200 KB per FLAT collection plus maps
    with Client(daemon.address) as c:
        for name in ("a", "b", "c", "d"):
            c.vectors.create(name, D, index="flat")
            c.vectors.upsert(name, np.arange(N), x)
            time.sleep(0.01)  # distinct last-access times
        c.vectors.search("a", x[:1], 1)  # a is now the most recently used
        daemon.vectors.maintain()
        report = {r.name: r for r in daemon.vectors.memory_report()}
        loaded = {name for name, r in report.items() if r.loaded}
        assert sum(r.memory_bytes for r in report.values()) <= 600_000
        assert "a" in loaded and "b" not in loaded  # least recently used went first
        assert report["a"].query_rate_per_s > 0
        for r in report.values():
            assert r.snapshot_bytes > 0 or r.loaded
        stats = c.stats()
        dram = next(t for t in stats.tiers if t.tier == Tier.DRAM)
        ssd = next(t for t in stats.tiers if t.tier == Tier.SSD)
        assert dram.by_kind[Kind.VECTOR] == (
            len(loaded),
            sum(report[n].memory_bytes for n in loaded),
        )
        assert ssd.by_kind[Kind.VECTOR][0] >= 4 - len(loaded)
        # Idle unloading: with a zero idle limit everything goes to SSD.
        daemon.vectors.config.idle_unload_s = 1e-9
        daemon.vectors.maintain()
        assert not any(r.loaded for r in daemon.vectors.memory_report())
        assert c.vectors.search("b", x[:3], 1).ids[:, 0].tolist() == [0, 1, 2]
