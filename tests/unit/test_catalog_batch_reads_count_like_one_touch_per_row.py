"""Batch reads (``Catalog.entries``, ``Catalog.touch_many``) leave the index and
the prior learner exactly as one ``entry`` / ``touch`` per row would: same
rates, access times, first-read flags and learned priors, on batches above and
below the vectorising threshold and with a row read twice."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tiermem.server.catalog import catalog as catalog_module
from tiermem.server.catalog.catalog import VECTOR_MIN_ROWS, Catalog
from tiermem.server.catalog.index import FLAG_SEEN, HINT_SHIFT
from tiermem.server.model import Kind, Tier
from tiermem.server.storage.rocks import RocksStore

NOW = 1_800_000_000.0


def _filled(path: Path, n: int) -> tuple[RocksStore, Catalog, list[int], list[bytes]]:
    """A catalog of ``n`` rows of mixed kinds, hints, sessions, ages; a third seen."""
    rocks = RocksStore(path)
    catalog = Catalog(rocks)
    keys = [f"key-{i}".encode() for i in range(n)]
    rows = [catalog.index.insert(k) for k in keys]
    rng = np.random.default_rng(11)
    c = catalog.index.cols
    at = np.array(rows)
    c["kind"][at] = rng.integers(1, len(Kind) + 1, n)
    c["tier"][at] = rng.choice([int(Tier.DRAM), int(Tier.SSD)], n)
    c["size"][at] = rng.integers(1, 1 << 20, n)
    c["sess"][at] = rng.integers(0, 2, n)
    hints = rng.integers(0, 4, n)
    seen = rng.random(n) < 0.33
    c["flags"][at] = c["flags"][at] | (hints << HINT_SHIFT).astype(np.uint8)
    c["flags"][at[seen]] |= FLAG_SEEN
    c["atime"][at] = NOW - rng.uniform(0, 120, n)
    c["rate"][at] = rng.uniform(0, 3, n).astype(np.float32)
    for kind, hint in zip(c["kind"][at].tolist(), hints.tolist(), strict=True):
        catalog.learner.on_put(kind, hint, NOW - 200)  # so first reads move the priors
    return rocks, catalog, rows, keys


@pytest.fixture
def fixed_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(catalog_module.time, "time", lambda: NOW)
    yield


@pytest.mark.parametrize("n", [3, VECTOR_MIN_ROWS, 64])
@pytest.mark.parametrize("repeat_one", [False, True])
def test_touch_many_counts_reads_like_one_touch_per_row(
    tmp_path: Path, fixed_clock: None, n: int, repeat_one: bool
) -> None:
    rocks_a, one_by_one, rows, keys = _filled(tmp_path / "a", n)
    rocks_b, batched, _, _ = _filled(tmp_path / "b", n)
    try:
        picked = list(range(0, n, 2)) + ([0] if repeat_one else [])
        read_rows = [rows[i] for i in picked]
        read_keys = [keys[i] for i in picked]
        for row, key in zip(read_rows, read_keys, strict=True):
            one_by_one.touch(row, key)
        batched.touch_many(read_rows, read_keys)
        a, b = one_by_one.index.cols, batched.index.cols
        for name in ("rate", "atime", "flags"):
            np.testing.assert_allclose(a[name], b[name], rtol=1e-6, err_msg=name)
        assert (b["flags"][read_rows] & FLAG_SEEN).all()
        for kind in range(1, len(Kind) + 1):
            for hint in range(4):
                assert one_by_one.learner.prior(kind, hint) == pytest.approx(
                    batched.learner.prior(kind, hint), rel=1e-9
                )
        assert set(one_by_one.recent_keys) == set(batched.recent_keys)
    finally:
        rocks_a.close()
        rocks_b.close()


def test_entries_match_entry_and_mark_absent_rows(tmp_path: Path) -> None:
    rocks, catalog, rows, _ = _filled(tmp_path / "c", 40)
    try:
        asked = np.array([rows[5], -1, rows[0], rows[39], -1], dtype=np.int64)
        got = catalog.entries(asked)
        assert got[1] is None and got[4] is None
        assert got[0] == catalog.entry(rows[5])
        assert got[2] == catalog.entry(rows[0])
        assert got[3] == catalog.entry(rows[39])
    finally:
        rocks.close()
