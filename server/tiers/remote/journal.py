"""The journal of remote deletes: objects whose copy in the remote store must be
deleted, kept in the catalog (RocksDB column family ``remote_deletes``).

A remote delete is carried out in the background (``services/remote.py``), so
a crash can come between the local change that makes it necessary (a delete,
an overwrite, a demotion of an object nobody else will adopt) and the delete
itself. The journal keeps the key until the delete is confirmed by the store
(or found unnecessary), and a restarted daemon carries out every delete it
lists. Keys are encoded object keys (the remote name is derived from them when
the delete runs), each mapped to an empty value; adding a key twice is one
entry.

Writes are unsynced: they go to the WAL after the catalog write that made them
necessary and before the WAL sync of any durable change made after it, so they
survive a process crash, and power loss whenever that change's own sync does.
A removal lost to power loss only repeats a delete at the next start.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tiermem.server.storage.rocks import RocksStore

#: The column family (declared in ``storage/rocks.py``).
COLUMN_FAMILY = "remote_deletes"


class DeleteJournal:
    def __init__(self, rocks: RocksStore) -> None:
        self._rocks = rocks

    def add(self, keys: Iterable[bytes]) -> None:
        """Record that the remote copies of ``keys`` must be deleted (one write).
        Raises what ``RocksStore.write`` raises (CapacityExceeded, Unavailable)."""
        self._write(keys, remove=False)

    def remove(self, keys: Iterable[bytes]) -> None:
        """Forget ``keys``: their remote deletes were carried out (one write)."""
        self._write(keys, remove=True)

    def keys(self, limit: int, after: bytes = b"") -> list[bytes]:
        """Up to ``limit`` journaled keys after ``after`` (b"": from the first),
        in key order."""
        out: list[bytes] = []
        for key, _ in self._rocks.scan(COLUMN_FAMILY, start=after or None):
            if key == after:
                continue
            if len(out) >= limit:
                break
            out.append(key)
        return out

    def _write(self, keys: Iterable[bytes], *, remove: bool) -> None:
        batch = self._rocks.batch()
        for key in keys:
            if remove:
                batch.delete(COLUMN_FAMILY, key)
            else:
                batch.put(COLUMN_FAMILY, key, b"")
        batch.commit(sync=False)
