"""On a CUDA host with the HBM tier on, FLAT collections are mirrored onto the
GPU (reported on HBM) and answer as the CPU index does; filtered searches and
tombstones fall back to the CPU index. Needs faiss-gpu and a GPU."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tests.vectors.conftest import clustered
from tiermem.client import Client, Tier
from tiermem.server.app import Daemon
from tiermem.server.vectors.index import gpu_count

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(gpu_count() == 0, reason="faiss sees no GPU"),
]


def test_flat_collection_searches_on_the_gpu(make_vdaemon: Callable[..., Daemon]) -> None:
    daemon = make_vdaemon(tiers={"hbm": {"enabled": True, "device": "cuda:0"}})
    x = clustered(5000, 64, seed=1)
    with Client(daemon.address) as c:
        c.vectors.create("g", 64, index="flat")
        c.vectors.upsert("g", np.arange(5000), x, payloads=[{"k": i % 2} for i in range(5000)])
        cpu = c.vectors.search("g", x[:100], 10)
        c.vectors.unload("g")
        c.vectors.load("g")
        assert c.vectors.describe("g").tier == Tier.HBM
        gpu = c.vectors.search("g", x[:100], 10)
        assert np.array_equal(cpu.ids[:, 0], gpu.ids[:, 0])
        filtered = c.vectors.search("g", x[:100], 10, where={"k": 1})
        assert (filtered.ids % 2 == 1).all()
