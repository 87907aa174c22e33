"""The per-namespace usage behind tiermem_objects / tiermem_object_bytes: its
sum over namespaces is Catalog.usage (copies on every tier), removed rows do not
count, and namespaces past the label limit share one slot."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tiermem.server.catalog.catalog import USAGE_COLUMNS, Catalog, usage_by_namespace
from tiermem.server.catalog.index import SEG_NONE
from tiermem.server.model import Kind, Tier
from tiermem.server.storage.rocks import RocksStore


def test_usage_per_namespace_adds_up_to_usage_and_caps_namespaces(tmp_path: Path) -> None:
    rocks = RocksStore(tmp_path / "catalog")
    try:
        catalog = Catalog(rocks)
        keys = [f"k{i}".encode() for i in range(5000)]
        rows = np.array([catalog.index.insert(k) for k in keys], dtype=np.int64)
        rng = np.random.default_rng(7)
        c = catalog.index.cols
        c["tier"][rows] = rng.integers(int(Tier.HBM), int(Tier.SSD) + 1, len(rows))
        c["kind"][rows] = rng.integers(1, len(Kind) + 1, len(rows))
        c["ns"][rows] = rng.integers(1, 9, len(rows))  # namespaces 1..8
        c["size"][rows] = rng.integers(1, 1 << 20, len(rows))
        c["seg"][rows] = np.where(rng.random(len(rows)) < 0.5, SEG_NONE, 1)
        for key in keys[:700]:
            catalog.index.remove(key)
        limit = 3
        usage = usage_by_namespace(catalog.copy_columns(*USAGE_COLUMNS), limit)
        assert usage.shape[2] == limit + 2  # ids 1..3, plus one slot for the rest
        assert (usage.sum(axis=2) == catalog.usage()).all()
        live = catalog.index.live_rows()
        later = c["ns"][live] > limit
        in_ssd = c["tier"][live] == int(Tier.SSD)
        with_copy = (c["seg"][live] != SEG_NONE) & ~in_ssd
        expected_other = int(later.sum() + (later & with_copy).sum())
        assert int(usage[:, :, limit + 1, 0].sum()) == expected_other
    finally:
        rocks.close()
