"""A collection still loaded holds a good copy of what its snapshot covers:
when fsck finds that snapshot damaged, it is reported, and the next
maintenance pass writes a new snapshot from memory, which clears the report.
The collection is served throughout."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from tests.faults.flips import flip
from tests.vectors.conftest import VECTOR_CONFIG, clustered
from tiermem.client import Client
from tiermem.server.app import Daemon

N, D = 400, 8


def test_a_damaged_snapshot_of_a_loaded_collection_is_rewritten_from_memory(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(**VECTOR_CONFIG)
    gauge = "tiermem_damaged_objects"
    x = clustered(N, D, seed=1)
    q = clustered(10, D, seed=2)
    with Client(daemon.address) as c:
        c.vectors.create("c", D, index="flat")
        c.vectors.upsert("c", np.arange(N), x)
        assert daemon.vectors.snapshot("default", "c")
        before = c.vectors.search("c", q, 5)
        (state,) = Path(daemon.config.data_dir, "vectors").glob("*/*/state.npz")
        flip(state, state.stat().st_size // 2)
        assert [d.where for d in c.integrity.check().damaged] == ["vectors"]
        assert daemon.metrics.registry.get_sample_value(gauge) == 1
        assert np.array_equal(c.vectors.search("c", q, 5).ids, before.ids)  # from memory

        daemon.vectors.maintain()
        assert daemon.metrics.registry.get_sample_value(gauge) == 0
        assert c.integrity.check().clean
        assert c.vectors.unload("c")
        after = c.vectors.search("c", q, 5)  # loads the new snapshot
        assert np.array_equal(after.ids, before.ids)
        assert np.array_equal(after.distances, before.distances)


def test_a_clean_stop_rewrites_a_damaged_snapshot_of_a_loaded_collection(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon(**VECTOR_CONFIG)
    x = clustered(N, D, seed=1)
    q = clustered(10, D, seed=2)
    with Client(daemon.address) as c:
        c.vectors.create("c", D, index="flat")
        c.vectors.upsert("c", np.arange(N), x)
        assert daemon.vectors.snapshot("default", "c")
        before = c.vectors.search("c", q, 5)
        (index,) = Path(daemon.config.data_dir, "vectors").glob("*/*/index.faiss")
        flip(index, index.stat().st_size // 2)
        assert not c.integrity.check().clean
    daemon.stop()  # before any maintenance pass

    again = make_daemon(name=Path(daemon.config.data_dir).name, **VECTOR_CONFIG)
    with Client(again.address) as c:
        after = c.vectors.search("c", q, 5)
        assert np.array_equal(after.ids, before.ids)
        assert np.array_equal(after.distances, before.distances)
        assert c.integrity.check().clean
