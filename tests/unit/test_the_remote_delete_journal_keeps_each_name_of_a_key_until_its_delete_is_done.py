"""The journal of remote deletes (``tiers/remote/journal.py``) records names,
not only keys: a key's shared name, this daemon's private name, or both (a
session's private copy and an older shared version can both need deleting).
Removing one name keeps the other; an entry written before private names (an
empty value) stands for the shared name; entries survive a reopen."""

from __future__ import annotations

from pathlib import Path

from tiermem.server.storage.rocks import RocksStore
from tiermem.server.tiers.remote.journal import COLUMN_FAMILY, DeleteJournal, names


def test_each_name_stays_journaled_until_its_own_delete_is_done(tmp_path: Path) -> None:
    rocks = RocksStore(tmp_path / "catalog")
    journal = DeleteJournal(rocks)
    journal.add([b"both", b"shared"])
    journal.add([b"both", b"private"], private=True)
    journal.add([b"both"])  # again: no change
    assert [(k, names(m)) for k, m in journal.entries(10)] == [
        (b"both", [False, True]),
        (b"private", [True]),
        (b"shared", [False]),
    ]
    journal.remove([b"both"])  # the shared delete was done
    journal.remove([b"private"])  # no shared name journaled: nothing to do
    assert [(k, names(m)) for k, m in journal.entries(10)] == [
        (b"both", [True]),
        (b"private", [True]),
        (b"shared", [False]),
    ]
    journal.remove([b"both", b"private"], private=True)
    assert journal.entries(10, after=b"") == [(b"shared", 0x01)]
    rocks.close()

    again = RocksStore(tmp_path / "catalog")
    assert [k for k, _ in DeleteJournal(again).entries(10)] == [b"shared"]
    again.close()


def test_an_entry_from_before_private_names_stands_for_the_shared_name(tmp_path: Path) -> None:
    rocks = RocksStore(tmp_path / "catalog")
    batch = rocks.batch()
    batch.put(COLUMN_FAMILY, b"old", b"")  # the first format: key -> empty
    batch.commit(sync=False)
    journal = DeleteJournal(rocks)
    assert [(k, names(m)) for k, m in journal.entries(10)] == [(b"old", [False])]
    journal.add([b"old"], private=True)
    assert [(k, names(m)) for k, m in journal.entries(10)] == [(b"old", [False, True])]
    journal.remove([b"old"])
    journal.remove([b"old"], private=True)
    assert journal.entries(10) == []
    rocks.close()
