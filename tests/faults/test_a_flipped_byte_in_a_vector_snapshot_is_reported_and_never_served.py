"""A vector collection's snapshot files carry digests (in ``meta.json``),
checked on every load and by ``tiermem fsck``. Before, a flipped byte in
``index.faiss`` loaded silently: searches returned other ids and distances,
the damage gauge stayed 0 and fsck said clean.

The snapshot is the only copy of the collection's vectors (the log is trimmed
up to it and older snapshots are pruned), so a damaged one cannot be rebuilt:
the collection answers DATA_LOSS, is counted, logged and listed by fsck, and
every other collection is served as before. Dropping it clears the report."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.faults.flips import damaged_gauge, flip
from tests.vectors.conftest import VECTOR_CONFIG, clustered
from tiermem.cli.main import main as cli
from tiermem.client import ChecksumError, Client, Kind
from tiermem.server.app import Daemon
from tiermem.server.services.integrity import check_offline

N, D = 500, 16


def first_snapshot(data_dir: Path) -> Path:
    """The snapshot folder of the first collection created (ids are allocated in order)."""
    first = min((data_dir / "vectors").iterdir(), key=lambda p: int(p.name))
    (folder,) = first.iterdir()
    return folder


def test_a_flipped_byte_in_a_vector_snapshot_is_reported_and_never_served(
    make_daemon: Callable[..., Daemon], caplog: pytest.LogCaptureFixture
) -> None:
    daemon = make_daemon(**VECTOR_CONFIG)
    x = clustered(N, D, seed=3)
    q = clustered(20, D, seed=4)
    with Client(daemon.address) as c:
        for name in ("bad", "good"):
            c.vectors.create(name, D, index="flat")
            c.vectors.upsert(name, np.arange(N), x)
            assert c.vectors.unload(name)  # only the snapshot holds the vectors now
        good = c.vectors.search("good", q, 5)
    data_dir = Path(daemon.config.data_dir)
    daemon.stop()
    index = first_snapshot(data_dir) / "index.faiss"
    flip(index, index.stat().st_size // 2)  # inside the stored vectors

    report = check_offline(data_dir)
    assert [(d.key, d.where) for d in report.damaged] == [("default/VECTOR/bad", "vectors")]
    assert cli(["fsck", "--data-dir", str(data_dir)]) == 1

    again = make_daemon(name=data_dir.name, **VECTOR_CONFIG)
    with Client(again.address) as c:
        caplog.set_level(logging.ERROR)
        with pytest.raises(ChecksumError, match="bad"):
            c.vectors.search("bad", q, 5)
        with pytest.raises(ChecksumError):  # the same answer every time, not bytes
            c.vectors.search("bad", q, 5)
        assert damaged_gauge(again) == 1
        assert "data damaged, not served" in caplog.text and "index.faiss" in caplog.text
        after = c.vectors.search("good", q, 5)
        assert np.array_equal(good.ids, after.ids)
        assert np.array_equal(good.distances, after.distances)
        result = c.integrity.check()
        assert [(d.kind, d.key, d.where) for d in result.damaged] == [
            (Kind.VECTOR, "bad", "vectors")
        ]
        assert damaged_gauge(again) == 1  # found again, counted once
        # Dropping the damaged collection clears the report; its name is free.
        assert c.vectors.drop("bad")
        assert damaged_gauge(again) == 0
        assert c.integrity.check().clean
        c.vectors.create("bad", D, index="flat")
        c.vectors.upsert("bad", np.arange(N), x)
        assert np.array_equal(c.vectors.search("bad", q, 5).ids, good.ids)
