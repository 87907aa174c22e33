"""Snapshots written before their meta.json carried digests (no ``digests``,
no ``meta_digest``) load as before, unchecked, and fsck calls them clean."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tests.vectors.conftest import VECTOR_CONFIG, clustered
from tiermem.client import Client
from tiermem.server.app import Daemon
from tiermem.server.services.integrity import check_offline

N, D = 300, 8


def test_a_vector_snapshot_written_before_digests_still_loads(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(**VECTOR_CONFIG)
    x = clustered(N, D, seed=5)
    q = clustered(10, D, seed=6)
    with Client(daemon.address) as c:
        c.vectors.create("old", D, index="hnsw")
        c.vectors.upsert("old", np.arange(N), x)
        assert c.vectors.unload("old")
        before = c.vectors.search("old", q, 5)
    data_dir = Path(daemon.config.data_dir)
    daemon.stop()
    (meta_path,) = (data_dir / "vectors").glob("*/*/meta.json")
    meta = json.loads(meta_path.read_text())
    assert meta.pop("digests") and meta.pop("meta_digest")
    meta_path.write_text(json.dumps(meta))  # as the older daemon wrote it
    assert check_offline(data_dir).damaged_total == 0

    again = make_daemon(name=data_dir.name, **VECTOR_CONFIG)
    with Client(again.address) as c:
        after = c.vectors.search("old", q, 5)
        assert np.array_equal(before.ids, after.ids)
        assert np.array_equal(before.distances, after.distances)
        assert c.integrity.check().clean
