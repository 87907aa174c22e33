"""Journal writes (``DeleteJournal.add``/``remove``) run under the store lock
(a delete, an overwrite or a session's close queues its remote deletes
there), and each read the marks of every key with its own RocksDB get:
closing a session with tens of thousands of remote-copied blocks held the
lock for a while. A write now reads the marks of all its keys in one
multi-get and writes them in one batch, with the same result as key by key
(each name kept or removed on its own, an entry from before private names
standing for the shared name)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiermem.server.storage.rocks import RocksStore
from tiermem.server.tiers.remote.journal import COLUMN_FAMILY, DeleteJournal, names

COUNT = 20_000


def test_a_write_of_many_keys_reads_them_in_one_multi_get(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rocks = RocksStore(tmp_path / "catalog")
    journal = DeleteJournal(rocks)
    keys = [b"k%06d" % i for i in range(COUNT)]
    batch = rocks.batch()
    batch.put(COLUMN_FAMILY, keys[0], b"")  # written before private names: shared
    batch.commit(sync=False)
    reads = 0
    real_get = rocks.get

    def counted(cf: str, key: bytes) -> bytes | None:
        nonlocal reads
        reads += 1
        return real_get(cf, key)

    monkeypatch.setattr(rocks, "get", counted)
    journal.add(keys[: COUNT // 2])
    journal.add(keys, private=True)
    journal.remove(keys[1::2])
    assert reads == 0, f"{reads} reads, one per key"
    monkeypatch.undo()
    got = dict(journal.entries(COUNT + 1))
    assert len(got) == COUNT
    for i, key in enumerate(keys):
        want = [i < COUNT // 2 and i % 2 == 0, True]
        assert names(got[key]) == [p for p, on in zip((False, True), want, strict=True) if on], key
    journal.remove(keys, private=True)
    journal.remove(keys)
    assert journal.entries(10) == []
    rocks.close()
